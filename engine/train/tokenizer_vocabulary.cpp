// Counting a tokenizer.json's vocabulary as `tokenizers` does (see tokenizer_vocabulary.h).
// defines: tokenizer_token_ids, tokenizer_vocabulary, model_tokenizer_vocabulary
#include "engine/train/tokenizer_vocabulary.h"

#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "engine/util/files.h"
#include "engine/util/json_read.h"

namespace odyssey {

std::unordered_map<std::string, int64_t> tokenizer_token_ids(const std::string& json, const std::string& path) {
  std::string error;
  const std::optional<Json> doc = parse_json(json, &error);
  auto refuse = [&](const std::string& why) {
    return std::invalid_argument(path + ": " + why + " (a Hugging Face tokenizer.json)");
  };
  if (!doc || !doc->is_object()) throw refuse(doc ? "not a JSON object" : "parse error, not JSON (" + error + ")");
  const auto model = doc->find("model");
  if (model == doc->end() || !model->is_object()) throw refuse("no \"model\" object");
  const auto vocab = model->find("vocab");
  if (vocab == model->end()) throw refuse("no \"model\".\"vocab\"");
  // The model's vocabulary: token -> id, and its size as the model counts it (its entries).
  std::unordered_map<std::string, int64_t> model_ids;
  int64_t model_size = 0;
  if (vocab->is_object()) {  // BPE, WordPiece, WordLevel: token -> id
    for (const auto& [token, id] : vocab->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        throw refuse("\"model\".\"vocab\" maps " + token + " to " + json_value_text(id) + ", not an id >= 0");
      model_ids[token] = id.get<int64_t>();
    }
    model_size = static_cast<int64_t>(vocab->size());
  } else if (vocab->is_array()) {  // Unigram: [token, score] pairs, the id each one's index
    for (const auto& entry : *vocab) {
      if (!entry.is_array() || entry.empty() || !entry[0].is_string())
        throw refuse("\"model\".\"vocab\" holds " + json_value_text(entry) + ", not a [token, score] pair");
      // A repeated token takes its last id, as `tokenizers` builds its map (token_to_id("a") of
      // [<unk>, a, b, a] is 3): the ids the encoder produces reach the last index.
      model_ids[entry[0].get<std::string>()] = model_size++;
    }
  } else {
    throw refuse("\"model\".\"vocab\" is " + json_value_text(*vocab) + ", neither an object nor a list");
  }
  // The added tokens get their ids as `tokenizers` gives them when it loads the file, whatever the
  // file's "id" says: a token of the model's vocabulary keeps its id; another takes the model's
  // size if it is the first, else one past the largest added id when that is at or past the
  // model's size (or the model is empty), else the model's size. Empty tokens are left out.
  std::unordered_map<std::string, int64_t> added_ids;
  int64_t largest_added = -1;
  if (const auto added = doc->find("added_tokens"); added != doc->end() && added->is_array())
    for (const auto& token : *added) {
      const auto content = token.find("content");
      if (content == token.end() || !content->is_string())
        throw refuse("\"added_tokens\" holds " + json_value_text(token) + ", without a \"content\" string");
      const std::string text = content->get<std::string>();
      if (text.empty() || added_ids.count(text)) continue;
      int64_t id;
      if (const auto in_model = model_ids.find(text); in_model != model_ids.end())
        id = in_model->second;
      else if (added_ids.empty())
        id = model_size;
      else
        id = largest_added >= model_size || model_size == 0 ? largest_added + 1 : model_size;
      added_ids[text] = id;
      largest_added = std::max(largest_added, id);
    }
  // get_vocab(with_added_tokens=True): the model's tokens and the added ones, by token (an added
  // token of the model's vocabulary has the model's id)
  for (const auto& [text, id] : added_ids) model_ids.emplace(text, id);
  return model_ids;
}

int64_t tokenizer_vocabulary(const std::string& json, const std::string& path) {
  const std::unordered_map<std::string, int64_t> ids = tokenizer_token_ids(json, path);
  int64_t largest = -1;
  for (const auto& [text, id] : ids) largest = std::max(largest, id);
  return std::max(largest + 1, static_cast<int64_t>(ids.size()));
}

std::optional<int64_t> model_tokenizer_vocabulary(const std::string& hf_path) {
  if (hf_path.empty()) return std::nullopt;
  const std::string path = join_path(hf_path, "tokenizer.json");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return tokenizer_vocabulary(read_file_bounded(path, kMaxTokenizerJsonBytes, "tokenizer.json"), path);
}

}  // namespace odyssey
