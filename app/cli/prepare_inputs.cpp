// Expands `odyssey prepare`'s inputs (files and directories, recursively and sorted) and finds the
// tokenizer.json of --tokenizer. defines: list_text_inputs, find_tokenizer_json
#include "app/cli/prepare_inputs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "engine/util/files.h"

namespace odyssey::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// How a file is read, from its name's extension in any case (notes.TXT is text); "" for a name a
/// directory walk skips.
std::string kind_of(const std::string& path) {
  std::string lower = path;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ends_with(lower, ".jsonl") || ends_with(lower, ".json")) return "jsonl";
  if (ends_with(lower, ".parquet")) return "parquet";
  if (ends_with(lower, ".txt")) return "text";
  return "";
}

PrepareError bad(const std::string& why) { return PrepareError(2, why); }

/// The regular files under `dir` that a walk takes, appended to `found`; `seen` holds the
/// directories entered (device, inode), so a symbolic link back up the tree is entered once.
void walk(const std::string& dir, std::set<std::pair<dev_t, ino_t>>& seen, std::vector<std::string>& found) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !seen.insert({st.st_dev, st.st_ino}).second) return;
  for (const auto& name : list_dir(dir)) {
    if (name.empty() || name[0] == '.') continue;  // hidden: .git, editors' swap files
    const std::string path = join_path(dir, name);
    const bool reached = ::stat(path.c_str(), &st) == 0;
    if (reached && S_ISDIR(st.st_mode)) {
      walk(path, seen, found);
    } else if (!kind_of(path).empty()) {
      // A text input's name that is no file to read is refused, not skipped: its documents would
      // be missing from the output unsaid.
      if (!reached) throw bad("input " + path + ": cannot read it (" + std::strerror(errno) + "; a dangling link?)");
      if (!S_ISREG(st.st_mode))
        throw bad("input " + path +
                  ": not a regular file (a FIFO, socket or device); remove it or name the files to read");
      found.push_back(path);
    }
  }
}

}  // namespace

std::vector<TextInput> list_text_inputs(const std::vector<std::string>& arguments) {
  std::vector<TextInput> inputs;
  for (const auto& argument : arguments) {
    struct stat st {};
    if (::stat(argument.c_str(), &st) != 0)
      throw bad("input " + argument + ": cannot read it (" + std::strerror(errno) + ")");
    if (S_ISDIR(st.st_mode)) {
      std::set<std::pair<dev_t, ino_t>> seen;
      std::vector<std::string> found;
      walk(argument, seen, found);
      if (found.empty())
        throw bad("input " + argument + ": a directory with no .txt, .jsonl, .json or .parquet file under it");
      std::sort(found.begin(), found.end());
      for (const auto& path : found) {
        struct stat file {};
        ::stat(path.c_str(), &file);
        inputs.push_back(TextInput{path, kind_of(path), static_cast<int64_t>(file.st_size)});
      }
    } else if (S_ISREG(st.st_mode)) {
      const std::string kind = kind_of(argument);
      inputs.push_back(TextInput{argument, kind.empty() ? "text" : kind, static_cast<int64_t>(st.st_size)});
    } else {
      throw bad("input " + argument + ": not a regular file or a directory (a FIFO, socket or device)");
    }
  }
  // One file reached twice (named twice, through a link, or inside a directory also named) would
  // write its documents twice.
  std::map<std::pair<dev_t, ino_t>, std::string> files;
  for (const auto& input : inputs) {
    struct stat st {};
    if (::stat(input.path.c_str(), &st) != 0) continue;  // gone meanwhile: reading it says so
    const auto [earlier, first] = files.emplace(std::make_pair(st.st_dev, st.st_ino), input.path);
    if (!first)
      throw bad("input " + input.path + " is the file " + earlier->second +
                " again (named twice, linked, or inside a directory also named): its documents would be written twice");
  }
  return inputs;
}

std::string find_tokenizer_json(const std::string& path, const std::string& named_as) {
  const std::string file = is_directory(path) ? join_path(path, "tokenizer.json") : path;
  const std::string name = named_as.empty() ? "--tokenizer " + path : named_as;
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0)
    throw bad(name + ": " +
              (file == path ? std::string("cannot read it (") + std::strerror(errno) + ")"
                            : "a directory without tokenizer.json (a Hugging Face model directory has one)"));
  if (!S_ISREG(st.st_mode)) throw bad(name + ": " + file + " is not a regular file");
  return file;
}

}  // namespace odyssey::cli
