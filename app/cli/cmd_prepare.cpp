// odyssey prepare INPUT... --tokenizer PATH --out FILE: text (JSON lines, plain text, Parquet) to a
// documents file for training.dataset = "documents", tokenized by Hugging Face `tokenizers` in the
// project's Python (text_tokenizer.h), with a progress bar and the counts at the end.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "app/cli/cli.h"
#include "app/cli/prepare_inputs.h"
#include "app/cli/stop_signal_scope.h"
#include "app/cli/text_tokenizer.h"
#include "engine/train/documents_file.h"
#include "engine/train/tokenizer_vocabulary.h"
#include "engine/util/files.h"
#include "engine/util/json.h"

namespace odyssey::cli {
namespace {

constexpr const char* kUsage =
    "usage: odyssey prepare INPUT... (--tokenizer PATH | --preset PRESET [--set k=v]...) --out FILE [--append-eos]\n"
    "                       [--match-special-tokens] [--overwrite] [--json]\n"
    "  INPUT       .jsonl/.json (a \"text\" field per line), .parquet (a \"text\" string column, one document a\n"
    "              row; read with pyarrow, which make deps installs), any other file as one plain-text document,\n"
    "              or a directory of .txt/.jsonl/.json/.parquet (recursive, sorted)\n"
    "  --tokenizer a Hugging Face tokenizer.json, or a model directory holding one\n"
    "  --preset    the preset to train with: without --tokenizer, its model.hf_path directory's tokenizer.json;\n"
    "              either way the tokenizer's vocabulary must fit its model.vocab_size (--set overrides its keys)\n"
    "  --out       the documents file to write (training.dataset = \"documents\", training.dataset_path = FILE)\n"
    "  --append-eos  the tokenizer's eos token after every document (no separator otherwise)\n"
    "  --match-special-tokens  a special token's text inside a document (chat markup such as\n"
    "              <|start_header_id|>) is that token's id; without it, the tokens of its characters\n"
    "  --overwrite   replace an existing FILE\n"
    "  --json        print the counts as one JSON object on stdout\n";

volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

std::string megabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

/// The progress of the inputs: a bar redrawn in place on a terminal (at most ten times a second),
/// one line per finished file otherwise (logs, pipes, tests). Written to stderr.
class PrepareProgress {
 public:
  PrepareProgress(const std::vector<TextInput>& inputs, bool terminal) : inputs_(inputs), terminal_(terminal) {
    for (const auto& input : inputs) total_bytes_ += input.bytes;
  }
  void begin_file(int64_t file) {
    end_file();
    file_ = file;
    file_documents_ = file_tokens_ = 0;
    bytes_before_ = 0;
    for (int64_t f = 0; f < file; ++f) bytes_before_ += inputs_[f].bytes;
    bytes_in_file_ = 0;
  }
  void document(int64_t tokens) {
    ++documents_, ++file_documents_;
    tokens_ += tokens, file_tokens_ += tokens;
  }
  void read(int64_t bytes) {
    bytes_in_file_ = bytes;
    draw(false);
  }
  void finish() {
    end_file();
    draw(true);
    if (terminal_) std::cerr << "\n";
  }

 private:
  void end_file() {
    if (file_ < 0 || terminal_) return;
    std::cerr << "prepare: [" << file_ + 1 << "/" << inputs_.size() << "] " << inputs_[file_].path << " ("
              << megabytes(inputs_[file_].bytes) << "): " << file_documents_ << " documents, " << file_tokens_
              << " tokens\n";
    file_ = -1;
  }
  void draw(bool last) {
    if (!terminal_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!last && now - drawn_ < std::chrono::milliseconds(100)) return;
    drawn_ = now;
    const int64_t done = std::min(total_bytes_, bytes_before_ + bytes_in_file_);
    const double fraction = last ? 1.0 : total_bytes_ > 0 ? static_cast<double>(done) / total_bytes_ : 0.0;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth);
    std::cerr << "\rprepare " << std::string(filled, '#') << std::string(kWidth - filled, '.') << " "
              << static_cast<int>(fraction * 100) << "%  " << megabytes(last ? total_bytes_ : done) << " of "
              << megabytes(total_bytes_) << "  " << documents_ << " documents  " << tokens_ << " tokens\033[K"
              << std::flush;
  }

  const std::vector<TextInput>& inputs_;
  bool terminal_;
  int64_t total_bytes_ = 0, bytes_before_ = 0, bytes_in_file_ = 0;
  int64_t file_ = -1, file_documents_ = 0, file_tokens_ = 0, documents_ = 0, tokens_ = 0;
  std::chrono::steady_clock::time_point drawn_{};
};

struct PrepareArgs {
  std::vector<std::string> inputs;
  std::string tokenizer, out, preset;
  std::vector<Override> overrides;  ///< --set, applied to --preset
  TokenizeOptions tokenize;         ///< --append-eos, --match-special-tokens
  bool overwrite = false, json = false;
};

/// Parses argv[first..] (--flag=value is --flag value, as parse_args takes it); nullopt after
/// printing the problem (exit 2).
std::optional<PrepareArgs> parse_prepare_args(int argc, char** argv, int first) {
  PrepareArgs a;
  auto bad = [](const std::string& why) -> std::optional<PrepareArgs> {
    std::cerr << "odyssey prepare: " << why << "\n" << kUsage;
    return std::nullopt;
  };
  bool options_ended = false;
  OnceFlags given;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (options_ended || arg.empty() || arg[0] != '-') {
      a.inputs.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    std::optional<std::string> inline_value;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (arg == "--append-eos" || arg == "--match-special-tokens" || arg == "--overwrite" || arg == "--json") {
      if (inline_value) return bad(arg + " takes no value (got " + std::string(argv[i]) + ")");
      (arg == "--append-eos"             ? a.tokenize.append_eos
       : arg == "--match-special-tokens" ? a.tokenize.match_special_tokens
       : arg == "--overwrite"            ? a.overwrite
                                         : a.json) = true;
    } else if (arg == "--tokenizer" || arg == "--out" || arg == "--preset" || arg == "--set") {
      std::string value;
      if (inline_value)
        value = *inline_value;
      else if (i + 1 < argc) {
        if (const std::string option = option_taken_as_value(arg, argv[i + 1]); !option.empty()) return bad(option);
        value = argv[++i];
      }
      if (value.empty()) return bad(arg + " needs a value");
      if (arg != "--set")
        if (const std::string twice = given.give(arg, value); !twice.empty()) return bad(twice);
      if (arg == "--set") {
        Override o;
        ConfigIssue issue;
        if (!parse_override(value, static_cast<int>(a.overrides.size()) + 1, &o, &issue)) {
          std::cerr << issue.format() << "\n";
          return std::nullopt;
        }
        a.overrides.push_back(std::move(o));
      } else {
        (arg == "--tokenizer" ? a.tokenizer
         : arg == "--out"     ? a.out
                              : a.preset) = arg == "--tokenizer" ? value : clean_path(value);
      }
    } else {
      return bad("unknown option " + std::string(argv[i]));
    }
  }
  if (a.inputs.empty()) return bad("no INPUT: name the text files or directories to prepare");
  if (a.tokenizer.empty() && a.preset.empty())
    return bad(
        "--tokenizer PATH (a tokenizer.json or a model directory) or --preset PRESET (its model.hf_path's) is "
        "required");
  if (!a.overrides.empty() && a.preset.empty()) return bad("--set needs --preset: it overrides a key of the preset");
  if (a.out.empty()) return bad("--out FILE is required");
  return a;
}

/// Refuses an --out that would lose something: a directory, a missing folder, an existing file
/// without --overwrite, or a file the command reads: one of the inputs (it would be replaced while
/// it is read), the tokenizer or the preset (each would be lost, --overwrite or not).
void check_out(const PrepareArgs& a, const std::vector<TextInput>& inputs, const std::string& tokenizer_json) {
  const std::string folder = folder_of(a.out);
  if (is_directory(a.out)) throw PrepareError(2, "--out " + a.out + " is a directory; name the file to write");
  if (!is_directory(folder)) throw PrepareError(2, "--out " + a.out + ": the folder " + folder + " does not exist");
  for (const auto& input : inputs)
    if (same_path(input.path, a.out))
      throw PrepareError(2,
                         "--out " + a.out + " is the input " + input.path + ": it would be replaced while it is read");
  if (same_path(tokenizer_json, a.out))
    throw PrepareError(2, "--out " + a.out + " is the tokenizer " + tokenizer_json +
                              ": it would be replaced by the documents file; choose another name");
  if (!a.preset.empty() && same_path(a.preset, a.out))
    throw PrepareError(2, "--out " + a.out + " is the preset " + a.preset +
                              ": it would be replaced by the documents file; choose another name");
  // The entry itself (lstat): a link, even one to nothing, or a FIFO or device is no documents
  // file to replace; found before the tokenizing, not by the publish after it.
  struct stat st {};
  if (::lstat(a.out.c_str(), &st) != 0) return;
  if (!S_ISREG(st.st_mode))
    throw PrepareError(2, "--out " + a.out + " is " +
                              (S_ISLNK(st.st_mode) ? std::string("a symbolic link") : "not a regular file") +
                              ": prepare writes a regular file there and replaces regular files only (--overwrite); "
                              "name the file itself, or choose another name");
  if (!a.overwrite)
    throw PrepareError(2, "--out " + a.out + " exists: pass --overwrite to replace it, or choose another name");
}

struct DocumentStats {
  int64_t longest = 0;
  double median = 0;
};

DocumentStats document_stats(const std::vector<int64_t>& index) {
  std::vector<int64_t> lengths(index.size() - 1);
  for (size_t d = 0; d + 1 < index.size(); ++d) lengths[d] = index[d + 1] - index[d];
  DocumentStats s;
  s.longest = *std::max_element(lengths.begin(), lengths.end());
  const size_t mid = lengths.size() / 2;
  std::nth_element(lengths.begin(), lengths.begin() + mid, lengths.end());
  s.median = static_cast<double>(lengths[mid]);
  if (lengths.size() % 2 == 0)  // the mean of the two middle lengths
    s.median = (s.median + *std::max_element(lengths.begin(), lengths.begin() + mid)) / 2;
  return s;
}

std::string median_text(double median) {
  char buf[32];
  std::snprintf(buf, sizeof buf, median == static_cast<int64_t>(median) ? "%.0f" : "%.1f", median);
  return buf;
}

int run_prepare(int argc, char** argv, int first) {
  const auto args = parse_prepare_args(argc, argv, first);
  if (!args) return kExitBadInput;
  const PrepareArgs& a = *args;
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  const char* after_bar = terminal ? "\n" : "";  // a message never continues the progress bar's line
  std::optional<LoadedPreset> preset;
  if (!a.preset.empty()) {
    preset = load_or_report(a.preset, a.overrides, std::cerr, PresetData::Skip);  // its data file is --out
    if (!preset) return kExitBadInput;
  }
  try {
    const std::vector<TextInput> inputs = list_text_inputs(a.inputs);
    std::string tokenizer_path = a.tokenizer;
    if (tokenizer_path.empty()) {
      tokenizer_path = preset->config.model.hf_path;
      if (tokenizer_path.empty())
        throw PrepareError(2, "--preset " + a.preset +
                                  " has no model.hf_path (a Hugging Face model directory) to take "
                                  "the tokenizer from: pass --tokenizer PATH");
    }
    const std::string tokenizer_json = find_tokenizer_json(
        tokenizer_path, a.tokenizer.empty() ? "--preset " + a.preset + "'s model.hf_path " + tokenizer_path : "");
    check_out(a, inputs, tokenizer_json);
    // The preset's model's own tokenizer, when its model.hf_path holds one: a --tokenizer of
    // another vocabulary would write ids that are not this model's tokens.
    std::optional<int64_t> model_vocabulary;
    if (preset && !a.tokenizer.empty()) {  // without --tokenizer the tokenizer is that one
      try {
        model_vocabulary = model_tokenizer_vocabulary(preset->config.model.hf_path);
      } catch (const std::exception& e) {
        throw PrepareError(2, "--preset " + a.preset + ": model.hf_path's " + e.what());
      }
    }
    std::optional<DocumentsFileWriter> writer;
    try {
      writer.emplace(a.out);
    } catch (const FileWriteError& e) {  // a folder not permitted: the --out given is wrong
      throw PrepareError(2, std::string("--out: ") + e.what());
    }
    // SIGINT and SIGTERM ask the tokenizer loop to stop (no SA_RESTART: its poll wakes up). The
    // flag is cleared before the handler goes in, so no signal is lost between.
    g_stop_signal = 0;
    const StopSignalScope stop_signals(on_stop_signal, /*restart=*/false);
    PrepareProgress progress(inputs, terminal);
    TokenizerInfo tokenizer;
    int64_t empty_documents = 0;
    TokenizerEvents events;
    events.tokenizer = [&](const TokenizerInfo& info) {
      tokenizer = info;
      // Before the first document: a file the preset's model cannot train on is never written.
      if (preset && info.vocab_size > preset->config.model.vocab_size)
        throw PrepareError(2, "--tokenizer " + tokenizer_json + ": its vocabulary holds " +
                                  std::to_string(info.vocab_size) + " tokens, more than model.vocab_size = " +
                                  std::to_string(preset->config.model.vocab_size) + " of --preset " + a.preset +
                                  ": the tokenizer does not match the model (use the "
                                  "model's own tokenizer, or raise model.vocab_size)");
      if (model_vocabulary && info.vocab_size != *model_vocabulary)
        throw PrepareError(2, "--tokenizer " + tokenizer_json + ": its vocabulary holds " +
                                  std::to_string(info.vocab_size) + " tokens, and the tokenizer.json of --preset " +
                                  a.preset + "'s model.hf_path " + preset->config.model.hf_path + " holds " +
                                  std::to_string(*model_vocabulary) +
                                  ": the tokenizer is not the model's (drop --tokenizer to use the model's own)");
    };
    events.file = [&](int64_t file) { progress.begin_file(file); };
    events.document = [&](const uint32_t* ids, int64_t n) {
      if (n == 0) {
        ++empty_documents;  // text without a token: no document (the index has no empty one)
        return;
      }
      writer->add_document(ids, n);
      progress.document(n);
    };
    events.progress = [&](int64_t, int64_t bytes) { progress.read(bytes); };
    events.stop_signal = [] { return static_cast<int>(g_stop_signal); };
    run_text_tokenizer(tokenizer_json, a.tokenize, inputs, events);
    progress.finish();
    const auto& index = writer->index();
    if (index.size() < 2)
      throw PrepareError(2, "no document holds text: the " + std::to_string(inputs.size()) + " input file(s) gave " +
                                std::to_string(empty_documents) + " empty document(s) and nothing else");
    writer->commit(tokenizer.vocab_size, a.overwrite);
    const DocumentStats stats = document_stats(index);
    const int64_t documents = static_cast<int64_t>(index.size()) - 1, tokens = index.back();
    if (a.json) {
      std::string text;
      JsonWriter w(text);
      w.begin_object()
          .key("ok")
          .value(true)
          .key("out")
          .value(a.out)
          .key("files")
          .value(static_cast<int64_t>(inputs.size()))
          .key("documents")
          .value(documents)
          .key("tokens")
          .value(tokens)
          .key("longest")
          .value(stats.longest)
          .key("median")
          .value(stats.median)
          .key("empty_skipped")
          .value(empty_documents)
          .key("vocab_size")
          .value(tokenizer.vocab_size)
          .key("tokenizer")
          .value(tokenizer_json)
          .key("special_tokens_matched")
          .value(a.tokenize.match_special_tokens)
          .key("eos_id");
      if (tokenizer.eos_id >= 0)
        w.value(tokenizer.eos_id);
      else
        w.null();
      w.end_object();
      std::cout << text << "\n";
    } else {
      std::cout << "prepared " << a.out << ": " << documents << " documents, " << tokens << " tokens from "
                << inputs.size() << " file(s) (tokenizer " << tokenizer_json << ", vocabulary " << tokenizer.vocab_size
                << ")\n"
                << "  longest document " << stats.longest << " tokens, median document " << median_text(stats.median)
                << " tokens" << (empty_documents ? ", " + std::to_string(empty_documents) + " empty skipped" : "")
                << "\n"
                << "  special tokens' text: "
                << (a.tokenize.match_special_tokens ? "matched as the tokens (--match-special-tokens)"
                                                    : "encoded as text")
                << "\n"
                << "  separator: "
                << (tokenizer.eos_id >= 0 ? "eos " + tokenizer.eos_text + " after every document"
                                          : std::string("none (the file's index keeps the boundaries)"))
                << "\n"
                << "  train on it: --set training.dataset=documents --set training.dataset_path=" << a.out
                << " --set model.vocab_size=" << tokenizer.vocab_size << " (or more)\n";
    }
    return kExitOk;
  } catch (const PrepareError& e) {
    std::cerr << after_bar << (e.located ? "" : "odyssey prepare: ") << e.what() << "\n";
    return e.exit_code;
  } catch (const FileWriteError& e) {
    std::cerr << after_bar << "odyssey prepare: " << e.what() << " (nothing written)\n";
    return kExitRuntime;
  }
}

const CommandRegistration registration{
    Command{72, "prepare",
            "prepare INPUT... --tokenizer PATH|--preset PRESET [--set k=v]... --out FILE [--append-eos] "
            "[--match-special-tokens] [--overwrite] [--json]",
            "tokenize text (JSON lines, plain text, Parquet) into a documents file to train on", run_prepare, kUsage}};

}  // namespace
}  // namespace odyssey::cli
