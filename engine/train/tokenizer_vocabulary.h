// The vocabulary of a Hugging Face tokenizer.json, counted as `tokenizers` counts it, so that a
// documents file prepared with another tokenizer than the model's is refused. No LibTorch.
// defines: kMaxTokenizerJsonBytes, tokenizer_vocabulary, tokenizer_token_ids, model_tokenizer_vocabulary
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace odyssey {

/// The largest tokenizer.json read: published ones (256k vocabularies with their merges) are tens of MB.
constexpr int64_t kMaxTokenizerJsonBytes = int64_t{128} << 20;

/// The ids the tokenizer.json text `json` can produce, as scripts/prepare_text.py's vocabulary_size
/// counts them with `tokenizers` (the header vocab_size of the documents files it writes): the
/// larger of one more than the largest id and the count of distinct tokens, over the model's
/// vocabulary (BPE, WordPiece, WordLevel: an object of token -> id; Unigram: a list of [token,
/// score] pairs, each id its index) and the added tokens with the ids `tokenizers` gives them on
/// loading (not the file's "id": see the .cpp). Throws std::invalid_argument naming `path` and what
/// is missing or malformed.
int64_t tokenizer_vocabulary(const std::string& json, const std::string& path);

/// Every token of the tokenizer.json text `json` with its id, as `tokenizers`' get_vocab(with_added_
/// tokens=True) gives them (the model's vocabulary and the added tokens, as tokenizer_vocabulary
/// counts them). Throws as tokenizer_vocabulary does.
std::unordered_map<std::string, int64_t> tokenizer_token_ids(const std::string& json, const std::string& path);

/// model.hf_path's tokenizer.json vocabulary (tokenizer_vocabulary), or nullopt when `hf_path` is
/// empty or holds no tokenizer.json. Throws FileReadError or std::invalid_argument for one that
/// cannot be read.
std::optional<int64_t> model_tokenizer_vocabulary(const std::string& hf_path);

}  // namespace odyssey
