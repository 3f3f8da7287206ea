// Counting a tokenizer.json's vocabulary as `tokenizers` does (see tokenizer_vocabulary.h).
// defines: tokenizer_vocabulary, model_tokenizer_vocabulary
#include "engine/train/tokenizer_vocabulary.h"

#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

#include "engine/util/files.h"
#include "engine/util/json_read.h"

namespace odyssey {

int64_t tokenizer_vocabulary(const std::string& json, const std::string& path) {
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
  int64_t largest = -1;
  std::unordered_set<std::string> tokens;
  if (vocab->is_object()) {  // BPE, WordPiece, WordLevel: token -> id
    for (const auto& [token, id] : vocab->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        throw refuse("\"model\".\"vocab\" maps " + token + " to " + json_value_text(id) + ", not an id >= 0");
      largest = std::max(largest, id.get<int64_t>());
      tokens.insert(token);
    }
  } else if (vocab->is_array()) {  // Unigram: [token, score] pairs, the id each one's index
    for (const auto& entry : *vocab) {
      if (!entry.is_array() || entry.empty() || !entry[0].is_string())
        throw refuse("\"model\".\"vocab\" holds " + json_value_text(entry) + ", not a [token, score] pair");
      tokens.insert(entry[0].get<std::string>());
    }
    largest = static_cast<int64_t>(vocab->size()) - 1;
  } else {
    throw refuse("\"model\".\"vocab\" is " + json_value_text(*vocab) + ", neither an object nor a list");
  }
  if (const auto added = doc->find("added_tokens"); added != doc->end() && added->is_array())
    for (const auto& token : *added) {
      const auto id = token.find("id");
      const auto content = token.find("content");
      if (id == token.end() || !id->is_number_integer() || id->get<int64_t>() < 0 || content == token.end() ||
          !content->is_string())
        throw refuse("\"added_tokens\" holds " + json_value_text(token) + ", without an \"id\" >= 0 and a \"content\"");
      largest = std::max(largest, id->get<int64_t>());
      tokens.insert(content->get<std::string>());
    }
  return std::max(largest + 1, static_cast<int64_t>(tokens.size()));
}

std::optional<int64_t> model_tokenizer_vocabulary(const std::string& hf_path) {
  if (hf_path.empty()) return std::nullopt;
  const std::string path = join_path(hf_path, "tokenizer.json");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return tokenizer_vocabulary(read_file_bounded(path, kMaxTokenizerJsonBytes, "tokenizer.json"), path);
}

}  // namespace odyssey
