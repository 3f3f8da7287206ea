// The tokenizer process of `odyssey prepare`: scripts/prepare_text.py (embedded in the binary) run by
// the project's Python with Hugging Face `tokenizers`, and the record stream it answers with.
// defines: PrepareError, TokenizerInfo, TextInput, TokenizerEvents, TokenizeOptions, project_python, run_text_tokenizer
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace odyssey::cli {

/// `odyssey prepare` cannot go on: exit_code 2 for bad input (the message is "FILE:LINE: rule"),
/// 1 for a runtime failure (no Python, the tokenizer process died), 130/143 when stopped by a signal.
class PrepareError : public std::runtime_error {
 public:
  PrepareError(int exit_code, const std::string& message, bool located = false)
      : std::runtime_error(message), exit_code(exit_code), located(located) {}
  int exit_code;
  bool located;  ///< the message begins with the place it is about ("FILE:LINE: ..."), printed as is
};

/// What the tokenizer process says of the tokenizer before the first document.
struct TokenizerInfo {
  int64_t vocab_size = 0;  ///< every token id is below it (added tokens included)
  int64_t eos_id = -1;     ///< the id appended after every document (--append-eos), or -1
  std::string eos_text;    ///< the eos token and where it came from, or why there is none
};

/// One input file and how it is read: "jsonl" (a "text" field per line), "text" (the file is one
/// document) or "parquet" (a "text" column; needs pyarrow).
struct TextInput {
  std::string path;
  std::string kind;
  int64_t bytes = 0;  ///< size when listed, for the progress bar
};

/// Called as the records arrive, in the process's order: tokenizer, then per file `file` and its
/// documents with progress, file after file.
struct TokenizerEvents {
  std::function<void(const TokenizerInfo&)> tokenizer;
  std::function<void(int64_t file)> file;
  std::function<void(const uint32_t* ids, int64_t n)> document;  ///< n may be 0 (text without tokens)
  std::function<void(int64_t file, int64_t bytes_read)> progress;
  std::function<int()> stop_signal;  ///< a signal number when the user asked to stop, else 0
};

/// How the text is encoded, besides the tokenizer itself.
struct TokenizeOptions {
  bool append_eos = false;  ///< the tokenizer's eos after every document (--append-eos)
  /// A special token's text inside a document is that token's id (--match-special-tokens: chat
  /// markup such as "<|start_header_id|>" that is meant as the tokens); else the tokens of its
  /// characters, as any text.
  bool match_special_tokens = false;
};

/// The Python that runs the tokenizer: $ODYSSEY_PYTHON when set, else the build's (the venv whose
/// wheel gave LibTorch, ODYSSEY_TORCH_PYTHON_USED at configure time); "" when neither is known.
std::string project_python();

/// Runs the tokenizer process over `inputs` (files, in order) with `tokenizer_json` and hands every
/// record to `events`; returns the number of documents. Throws PrepareError.
int64_t run_text_tokenizer(const std::string& tokenizer_json, const TokenizeOptions& options,
                           const std::vector<TextInput>& inputs, const TokenizerEvents& events);

}  // namespace odyssey::cli
