// What `odyssey prepare` reads: its INPUT arguments expanded to files (a directory recursively, in
// sorted order) with how each is read, and the tokenizer.json that --tokenizer names.
// defines: list_text_inputs, find_tokenizer_json
#pragma once

#include <string>
#include <vector>

#include "app/cli/text_tokenizer.h"

namespace odyssey::cli {

/// Each argument in order: a file as itself (.jsonl and .json: JSON lines with a "text" field;
/// .parquet: a "text" column; anything else: plain text, one document), a directory as the .txt,
/// .jsonl, .json and .parquet files under it (recursively, hidden entries skipped, sorted by
/// path). Throws PrepareError (exit 2) for a missing or unreadable argument, a FIFO or device, or a
/// directory holding none of those files.
std::vector<TextInput> list_text_inputs(const std::vector<std::string>& arguments);

/// --tokenizer PATH: the file itself, or PATH/tokenizer.json for a model directory. Throws
/// PrepareError (exit 2) naming what is missing, and where PATH came from: `named_as`, or
/// "--tokenizer PATH" when empty.
std::string find_tokenizer_json(const std::string& path, const std::string& named_as = "");

}  // namespace odyssey::cli
