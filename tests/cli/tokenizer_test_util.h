// Helpers of the CLI tests that need a tokenizer and read documents files: a WordLevel
// tokenizer.json built with Hugging Face `tokenizers` in the build's Python (missing, the tests
// fail, never skip), and a documents file read from its bytes as docs/data.md lays it out.
// defines: tokenizers_python, make_tokenizer, DocumentsBytes, read_documents
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.h"

namespace odyssey::test {

/// The build's Python, which must import `tokenizers`: a missing library fails here, loudly.
inline std::string tokenizers_python() {
  const std::string python = ODYSSEY_TORCH_PYTHON;
  INFO("odyssey prepare runs the build's Python (the LibTorch wheel's venv); this build recorded none");
  REQUIRE_FALSE(python.empty());
  const int rc = std::system(("'" + python + "' -c 'import tokenizers' 2>/dev/null").c_str());
  INFO("the Python at " << python << " cannot import `tokenizers`: run `make deps` (scripts/deps.sh installs it)");
  REQUIRE(rc == 0);
  return python;
}

/// A WordLevel tokenizer.json in `dir`: the words in order take ids 0.. ("[UNK]" and "</s>" first,
/// "</s>" a special token), split on whitespace.
/// `split_digits`: digits are words of their own ("12345" is five tokens), as the needle of
/// `odyssey eval` needs.
inline std::string make_tokenizer(const std::string& dir, const std::vector<std::string>& words,
                                  bool split_digits = false) {
  const std::string python = tokenizers_python();
  std::string vocab = "{";
  for (size_t i = 0; i < words.size(); ++i) vocab += (i ? ", \"" : "\"") + words[i] + "\": " + std::to_string(i);
  vocab += "}";
  const std::string script = dir + "/make_tokenizer.py", path = dir + "/tokenizer.json";
  std::ofstream(script) << "from tokenizers import Tokenizer, models, pre_tokenizers\n"
                        << "tok = Tokenizer(models.WordLevel(" << vocab << ", unk_token='[UNK]'))\n"
                        << (split_digits ? "tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), "
                                           "pre_tokenizers.Digits(individual_digits=True)])\n"
                                         : "tok.pre_tokenizer = pre_tokenizers.Whitespace()\n")
                        << "tok.add_special_tokens(['</s>'])\n"
                        << "tok.save('" << path << "')\n";
  REQUIRE(std::system(("'" + python + "' '" + script + "'").c_str()) == 0);
  return path;
}

/// A documents file read from its bytes as docs/data.md lays it out (not through the engine's
/// reader, so the format itself is checked).
struct DocumentsBytes {
  uint64_t vocab = 0;
  std::vector<uint64_t> index;
  std::vector<uint32_t> tokens;
};

inline DocumentsBytes read_documents(const std::string& path) {
  const std::string b = read_text(path);
  REQUIRE(b.size() >= 64);
  REQUIRE(b.substr(0, 8) == std::string("ODYDOCS\0", 8));
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  };
  uint32_t version, dtype;
  std::memcpy(&version, b.data() + 8, 4);
  std::memcpy(&dtype, b.data() + 12, 4);
  CHECK(version == 1);
  CHECK(dtype == 1);
  const uint64_t T = u64(16), D = u64(24);
  DocumentsBytes d;
  d.vocab = u64(32);
  REQUIRE(b.size() == 64 + 8 * (D + 1) + 4 * T);
  for (uint64_t i = 0; i <= D; ++i) d.index.push_back(u64(64 + 8 * i));
  d.tokens.resize(T);
  std::memcpy(d.tokens.data(), b.data() + 64 + 8 * (D + 1), 4 * T);
  return d;
}

}  // namespace odyssey::test
