// odyssey eval RUN_DIR|HF_DIR --data FILE --seq-len N [--json] [--out DIR] [--overwrite]
// [--preset P] [--set k=v]... [--tokenizer PATH] [--trials N] [--seed N] [--first-bucket N]
// [--needle-min N] [--max-sequences N] [--no-needle]: a trained model's loss by position bucket on
// held-out documents and a needle-in-a-haystack grid, forward only under the run's memory stack on
// the run's ranks (engine/train/eval.h); a table on stdout (or --json), DIR/eval.json and DIR/needle.png.
// Exit 0, 1 (runtime failure), 2 (bad input).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "app/cli/cli.h"
#include "app/cli/eval_heatmap.h"
#include "app/cli/prepare_inputs.h"
#include "app/cli/stop_signal_scope.h"
#include "app/cli/text_tokenizer.h"
#include "engine/config/config_diff.h"
#include "engine/config/schema.h"
#include "engine/config/sizes.h"
#include "engine/parallel/job.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/checksum.h"
#include "engine/train/documents_dataset.h"
#include "engine/train/eval.h"
#include "engine/train/hf_checkpoint.h"
#include "engine/train/job_text.h"
#include "engine/train/run.h"
#include "engine/util/files.h"
#include "engine/util/json.h"
#include "engine/util/json_read.h"
#include "engine/util/publish_file.h"
#include "engine/util/splitmix.h"

namespace odyssey::cli {
namespace {

/// The one-line usage: `odyssey --help` lists it, and a refused command line prints it.
constexpr const char* kSynopsis =
    "eval RUN_DIR|HF_DIR --data FILE --seq-len N [--preset P] [--set k=v]... [--json] [--out DIR] [--overwrite] "
    "[--tokenizer PATH] [--trials N] [--seed N] [--first-bucket N] [--needle-min N] [--max-sequences N] "
    "[--no-needle] [--quiet]";

/// `odyssey eval --help`: every option (docs/eval.md says more).
constexpr const char* kHelp =
    "usage: odyssey eval RUN_DIR|HF_DIR --data FILE --seq-len N [options]\n"
    "  RUN_DIR          a run's --out (its latest checkpoint and that checkpoint's config), or\n"
    "  HF_DIR           a Hugging Face model directory (config.json, safetensors)\n"
    "  --data FILE      a documents file of held-out text (odyssey prepare), at least N + 1 tokens\n"
    "  --seq-len N      the longest context evaluated (K, M and G suffixes)\n"
    "  --preset P       for HF_DIR: the rest of the config (ranks, memory stack); else the defaults\n"
    "  --set k=v        change how the model runs (model.rope_*, training.device, dtype, document_positions,\n"
    "                   parallel.*, memory.*), never a shape or what eval sets itself\n"
    "  --json           print one JSON object on stdout\n"
    "  --out DIR        where eval.json and needle.png go (RUN_DIR/eval, or ./eval-<HF_DIR's name>)\n"
    "  --overwrite      replace eval.json and needle.png in --out\n"
    "  --tokenizer PATH the needle's tokenizer: a tokenizer.json or a directory holding one (default: HF_DIR's,\n"
    "                   or the one RUN_DIR's checkpoint carries from the model.hf_path it was trained from)\n"
    "  --trials N       needle trials a cell, one passkey each (3; at most 1000)\n"
    "  --seed N         the passkeys' seed (1234)\n"
    "  --first-bucket N the loss buckets: [0, N), [N, 4N), [4N, 16N), ... up to --seq-len (1K, or\n"
    "                   --seq-len / 16 where that is less)\n"
    "  --needle-min N   the needle grid's shortest context, doubled up to --seq-len (1K)\n"
    "  --max-sequences N  evaluate only the file's first N sequences\n"
    "  --no-needle      the loss by position only\n"
    "  --quiet          no progress on stderr\n";

// [section] Signals ----------------------------------------------------------------------------

// eval writes nothing until its results are whole, so SIGINT and SIGTERM end it at once (exit 130
// or 143), wherever it is: reading weights, in the torchrun rendezvous, in the forwards. The
// handler removes what eval made before it wrote a result (the --out folders, a write probe) with
// async-signal-safe calls. While the results are written the signal waits for them to be whole.
std::atomic<const std::vector<std::string>*> g_made_folders{nullptr};  ///< innermost first; set once built
char g_write_probe[4096] = "";                                         ///< a probe file being checked, or ""
volatile std::sig_atomic_t g_publishing = 0;                           ///< 1 while eval.json and needle.png are written
volatile std::sig_atomic_t g_deferred_signal = 0;                      ///< a signal that came while publishing

extern "C" void on_eval_stop_signal(int sig) {
  if (g_publishing) {
    g_deferred_signal = sig;
    return;
  }
  if (g_write_probe[0] != '\0') ::unlink(g_write_probe);
  if (const std::vector<std::string>* made = g_made_folders.load())
    for (const std::string& folder : *made) ::rmdir(folder.c_str());  // only empty ones go
  static const char kInt[] = "\nodyssey eval: stopped by Ctrl-C before its results were written: nothing was written\n";
  static const char kTerm[] =
      "\nodyssey eval: stopped by SIGTERM before its results were written: nothing was written\n";
  const ssize_t ignored =
      sig == SIGINT ? ::write(STDERR_FILENO, kInt, sizeof(kInt) - 1) : ::write(STDERR_FILENO, kTerm, sizeof(kTerm) - 1);
  (void)ignored;
  ::_exit(128 + sig);
}

/// Installs on_eval_stop_signal for the command's life, its state cleared first (SA_RESTART: the
/// writes of a deferred stop go on).
class EvalStopSignals {
 public:
  EvalStopSignals() : scope_(handler_with_state_cleared(), /*restart=*/true) {}
  ~EvalStopSignals() { g_made_folders.store(nullptr); }

 private:
  /// Clears the handler's state before the handler is installed, so no signal is lost between.
  static void (*handler_with_state_cleared())(int) {
    g_made_folders.store(nullptr);
    g_write_probe[0] = '\0';
    g_publishing = 0;
    g_deferred_signal = 0;
    return on_eval_stop_signal;
  }
  StopSignalScope scope_;
};

/// Bad input: the message names the flag or file, its value and the rule.
struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct EvalArgs {
  std::string source, data, out, preset, tokenizer;
  std::vector<Override> overrides;
  std::vector<std::string> set_texts;  ///< each --set as given ("model.flavor=llama3-8b"), for messages
  int64_t seq_len = 0, trials = 3, needle_min = 1024, max_sequences = 0;
  int64_t first_bucket = 0;  ///< 0 until read: --first-bucket, else 1K or --seq-len / 16, the smaller
  uint64_t seed = 1234;
  bool json = false, overwrite = false, needle = true, quiet = false;
};

EvalArgs parse(int argc, char** argv, int first) {
  EvalArgs a;
  int set_index = 0;
  OnceFlags given;
  std::vector<std::string> needle_flags;  // the needle grid's options given, in order
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0)
      if (const size_t eq = arg.find('='); eq != std::string::npos && arg.rfind("--set", 0) != 0) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    auto value = [&](bool once = true) -> std::string {  // once: a flag of one value (--set repeats)
      std::string v;
      if (inline_value)
        v = *inline_value;
      else if (i + 1 >= argc)
        throw BadInput(arg + " needs a value");
      else if (const std::string option = option_taken_as_value(arg, argv[i + 1]); !option.empty())
        throw BadInput(option);
      else
        v = argv[++i];
      // "" is no value: `--out ""` wrote to the default folder, `--tokenizer ""` took the default
      if (v.empty()) throw BadInput(arg + " needs a value (got an empty one)");
      if (const std::string twice = once ? given.give(arg, v) : std::string(); !twice.empty()) throw BadInput(twice);
      return v;
    };
    auto count = [&](int64_t min) -> int64_t {
      const std::string v = value();
      const std::optional<int64_t> n = parse_size(v);
      if (!n || *n < min)
        throw BadInput(arg + " " + v + ": must be a whole number from " + std::to_string(min) + " to " +
                       std::to_string(std::numeric_limits<int64_t>::max()) + " (K, M and G suffixes: powers of 1024)");
      return *n;
    };
    if (arg == "--json" || arg == "--overwrite" || arg == "--no-needle" || arg == "--quiet") {
      if (inline_value) throw BadInput(arg + " takes no value (got " + std::string(argv[i]) + ")");
      if (arg == "--json") a.json = true;
      if (arg == "--overwrite") a.overwrite = true;
      if (arg == "--no-needle") a.needle = false;
      if (arg == "--quiet") a.quiet = true;
    } else if (arg == "--data") {
      a.data = value();
    } else if (arg == "--out") {
      a.out = clean_path(value());
    } else if (arg == "--preset") {
      a.preset = value();
    } else if (arg == "--tokenizer") {
      a.tokenizer = value();
      needle_flags.push_back(arg);
    } else if (arg == "--seq-len") {
      a.seq_len = count(2);
    } else if (arg == "--trials") {
      a.trials = count(1);
      needle_flags.push_back(arg);
      if (a.trials > kMaxNeedleTrials)
        throw BadInput("--trials " + std::to_string(a.trials) + ": at most " + std::to_string(kMaxNeedleTrials) +
                       " a cell (a cell's accuracy then resolves 0.1%; each trial is one forward of every "
                       "length at every depth)");
    } else if (arg == "--seed") {
      a.seed = static_cast<uint64_t>(count(0));
      needle_flags.push_back(arg);
    } else if (arg == "--first-bucket") {
      a.first_bucket = count(1);
    } else if (arg == "--needle-min") {
      a.needle_min = count(1);
      needle_flags.push_back(arg);
    } else if (arg == "--max-sequences") {
      a.max_sequences = count(1);
    } else if (arg == "--set" || arg.rfind("--set=", 0) == 0) {
      const std::string v = arg == "--set" ? value(/*once=*/false) : arg.substr(6);
      Override o;
      ConfigIssue issue;
      if (!parse_override(v, ++set_index, &o, &issue)) throw BadInput(issue.format());
      a.overrides.push_back(o);
      a.set_texts.push_back(v);
    } else if (!arg.empty() && arg[0] == '-') {
      throw BadInput("unknown option " + std::string(argv[i]));
    } else if (a.source.empty()) {
      a.source = clean_path(arg);
    } else {
      throw BadInput("one RUN_DIR or HF_DIR only (got " + a.source + " and " + arg + ")");
    }
  }
  if (a.source.empty()) throw BadInput("no RUN_DIR or HF_DIR");
  if (a.data.empty()) throw BadInput("--data FILE (a documents file of `odyssey prepare`) is required");
  if (a.seq_len == 0) throw BadInput("--seq-len N (the longest context to evaluate) is required");
  // 1K, or a sixteenth of a shorter --seq-len: three buckets at least ([0, F), [F, 4F), [4F, 16F)),
  // where 1K alone made one bucket of a 64-token evaluation
  if (a.first_bucket == 0) a.first_bucket = std::clamp<int64_t>(a.seq_len / 16, 1, 1024);
  if (!a.needle && !needle_flags.empty())
    throw BadInput(needle_flags.front() + " sets up the needle grid, and --no-needle runs none: drop one of them");
  return a;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// The --set arguments that name a [model] key, as given: "--set model.flavor=llama3-8b".
std::string model_sets(const EvalArgs& a) {
  std::string out;
  for (size_t i = 0; i < a.overrides.size(); ++i)
    if (a.overrides[i].section == "model") out += (out.empty() ? "--set " : ", --set ") + a.set_texts[i];
  return out.empty() ? "--set" : out;
}

/// Why `odyssey eval` refuses a --set of `section.key`, or empty when it takes it. Eval sets the
/// step itself (eval_config: --seq-len, the documents of --data packed split under masking, one
/// sequence a replica), runs no optimizer and writes no run: a --set of those keys would be ignored.
std::string eval_refuses(const std::string& section, const std::string& key) {
  if (section == "output") return "odyssey eval writes no run (its results go to --out DIR)";
  if (section.empty()) return "odyssey eval writes no preset for a description to name";
  if (section == "memory" && key == "offload_optimizer") return "odyssey eval runs no optimizer";
  if (section == "parallel" && key == "emulate")
    return "odyssey eval runs every rank of the model (rank emulation computes rank 0 only)";
  if (section != "training") return "";
  if (key == "seq_len") return "odyssey eval takes the longest context from --seq-len";
  if (key == "dataset" || key == "dataset_path") return "odyssey eval reads the documents file of --data";
  if (key == "batch_size") return "odyssey eval runs one sequence a data-parallel replica";
  if (key == "document_mask" || key == "document_packing")
    return "odyssey eval packs the documents split, with document masking (the loss of each document alone)";
  if (key == "seed") return "the passkeys' seed is --seed";
  if (key == "dtype" || key == "device" || key == "document_positions") return "";
  return "odyssey eval runs no optimizer or schedule";  // steps, lr, warmup_steps, betas, grad_clip, ...
}

/// Refuses each --set that eval_refuses, naming it and the keys eval takes.
void check_eval_sets(const EvalArgs& a) {
  for (size_t i = 0; i < a.overrides.size(); ++i) {
    const std::string why = eval_refuses(a.overrides[i].section, a.overrides[i].key);
    if (!why.empty())
      throw BadInput("--set " + a.set_texts[i] + ": " + why +
                     "; --set takes the keys that change how the model runs: model.rope_*, model.norm_eps, "
                     "training.device, training.dtype, training.document_positions, parallel.*, memory.*, "
                     "hardware.*");
  }
}

/// `model`'s shape as its keys say it: flavor "tiny" (n_layers 4, d_model 128, ...).
std::string shape_text(const RunConfig& cfg) {
  std::string out = "flavor \"" + cfg.model.flavor + "\" (";
  for (size_t i = 0; i < model_shape_keys().size(); ++i) {
    const KeySpec& spec = *model_shape_keys()[i];
    out += (i ? ", " : "") + std::string(spec.name) + " " + value_text(spec, cfg);
  }
  return out + ")";
}

/// Eval runs the model whose weights it reads: the --set keys may change how it runs (RoPE
/// scaling and theta for a context extension, norm_eps, the device and dtype, the ranks, the memory
/// techniques), never a parameter's shape. Refused here, before the weights are read or a model
/// built, naming each key that differs with the model's value and the asked one.
void check_own_model(const RunConfig& own, const RunConfig& asked, const std::string& own_source, const EvalArgs& a) {
  std::string changed;
  for (const KeyChange& c : config_changes(own, asked))
    for (const KeySpec* spec : model_shape_keys())
      if (c.key == spec->full_name()) changed += (changed.empty() ? "" : ", ") + c.describe();
  if (changed.empty()) return;
  throw BadInput(model_sets(a) + ": " + own_source + " gives the model " + shape_text(own) + ", and the --set makes " +
                 changed +
                 ": eval runs the model whose weights it reads (keys that shape no weight may change: "
                 "model.rope_theta, model.rope_scaling and model.rope_*, model.norm_eps; and training.device, "
                 "training.dtype, parallel.*, memory.*)");
}

/// HF_DIR's config.json must parse before the preset loader reads it, so that the message names
/// that file and says "parse error" rather than the override eval made of it.
void check_hf_config_json(const std::string& dir) {
  const std::string path = join_path(dir, "config.json");
  std::string text, error;
  try {
    text = read_file_bounded(path, int64_t{64} << 20, "Hugging Face config.json");
  } catch (const std::exception& e) {
    throw BadInput("HF_DIR " + dir + ": " + e.what());
  }
  if (!parse_json(text, &error))
    throw BadInput("HF_DIR " + dir + ": " + path + ": parse error, not JSON (" + error +
                   "): a Hugging Face model directory holds its config.json as a JSON object");
}

/// The model to evaluate: its config and where its weights are.
struct Source {
  bool run = false;                    ///< a run directory (else a Hugging Face directory)
  std::optional<CheckpointInfo> info;  ///< the run's latest checkpoint
  RunConfig run_config;                ///< the run's config (the checkpoint's) with --set, or the HF preset's
  RunConfig saved;                     ///< a run's config as its checkpoint saved it: how its shards join
};

/// An issue of eval_config's config, checked as a document the flags generated: its line in that
/// document is nobody's to open, so only the key, value and rule are said.
std::string issue_of_eval_config(ConfigIssue issue) {
  issue.loc = {};
  return issue.format();
}

/// The keys eval_config sets, as overrides loaded before the --set ones, so that the config is
/// validated as eval runs it (training.document_positions is checked against eval's documents, not
/// the run's dataset) and a message names the flag that gave the value.
std::vector<Override> eval_step_overrides(const EvalArgs& a) {
  auto set = [](const char* key, RawValue value, const std::string& from) {
    Override o;
    o.section = "training";
    o.key = key;
    o.value = std::move(value);
    o.loc = SourceLoc{from, 0, 0};
    return o;
  };
  return {set("seq_len", RawValue::integer(a.seq_len), "--seq-len"),
          set("dataset", RawValue::string("documents"), "--data"),
          set("dataset_path", RawValue::string(a.data), "--data"),
          set("document_mask", RawValue::boolean(true), "--data"),
          set("document_packing", RawValue::string("split"), "--data"),
          set("batch_size", RawValue::integer(1), "odyssey eval")};
}

Source open_source(const EvalArgs& a) {
  check_eval_sets(a);
  struct stat st {};
  if (::stat(a.source.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw BadInput(a.source + ": not a directory (RUN_DIR: a run's --out; HF_DIR: a Hugging Face model directory)");
  Source s;
  LoadedPreset loaded;
  if (exists(join_path(a.source, "checkpoints/latest.json"))) {
    if (!a.preset.empty())
      throw BadInput("--preset " + a.preset + ": " + a.source +
                     " is a run directory, which carries its own config "
                     "(its checkpoint's config.toml); change keys with --set");
    s.run = true;
    try {
      s.info = read_checkpoint_info(a.source);
    } catch (const CheckpointError& e) {
      throw BadInput(e.what());
    }
    // Validated as evaluated (a Ulysses degree must divide --seq-len, not the trained length).
    std::vector<Override> overrides = eval_step_overrides(a);
    overrides.insert(overrides.end(), a.overrides.begin(), a.overrides.end());
    loaded = load_checkpoint_config(s.info->config_toml, s.info->path + "/config.toml", overrides);
    const LoadedPreset saved = load_checkpoint_config(s.info->config_toml, s.info->path + "/config.toml");
    if (!saved.ok()) throw BadInput("the checkpoint's config does not load: " + saved.issues.front().format());
    s.saved = saved.config;
    if (loaded.ok()) check_own_model(s.saved, loaded.config, s.info->path + "/config.toml", a);
    if (loaded.ok() && s.saved.parallel.emulate)
      throw BadInput(a.source + " is an emulated run (parallel.emulate): it saved rank 0 of " +
                     std::to_string(s.info->world_size) + " only, not the whole model");
  } else if (exists(join_path(a.source, "config.json"))) {
    check_hf_config_json(a.source);
    Override hf;
    hf.section = "model";
    hf.key = "hf_path";
    hf.value = RawValue::string(a.source);
    hf.loc = SourceLoc{"HF_DIR " + a.source, 0, 0};  // a message about it names the directory, not --set
    std::vector<Override> overrides = eval_step_overrides(a);
    overrides.push_back(hf);
    // Without --preset: the defaults, with the one key a preset must name (eval_config sets it again).
    const std::string defaults = "[training]\nseq_len = " + std::to_string(a.seq_len) + "\n";
    auto load = [&](const std::vector<Override>& with) {
      return a.preset.empty() ? load_preset_text(defaults, "(defaults)", with) : load_preset(a.preset, with);
    };
    const LoadedPreset own = load(overrides);  // HF_DIR's model as its config.json gives it
    overrides.insert(overrides.end(), a.overrides.begin(), a.overrides.end());
    loaded = load(overrides);
    if (own.ok() && loaded.ok()) check_own_model(own.config, loaded.config, join_path(a.source, "config.json"), a);
  } else {
    throw BadInput(a.source +
                   ": neither a run directory (no checkpoints/latest.json) nor a Hugging Face model "
                   "directory (no config.json)");
  }
  if (!loaded.ok()) {
    std::string text;
    for (const ConfigIssue& issue : loaded.issues) text += (text.empty() ? "" : "\n") + issue.format();
    throw BadInput(text);
  }
  s.run_config = loaded.config;
  return s;
}

/// The needle's tokenizer: its tokenizer.json and how messages name it ("--tokenizer T", or the
/// model directory's own).
struct NeedleTokenizer {
  std::string json;
  std::string label;
};

/// One tokenizer process over `texts`: their tokens, in order. The tokenizer's vocabulary must be
/// the one `data` was prepared with (its header's vocab_size: the filler and the prompts then mean
/// the same tokens) and fit the model's.
std::vector<std::vector<int64_t>> tokenize(const NeedleTokenizer& tokenizer, const std::vector<std::string>& texts,
                                           int64_t model_vocab, const DocumentsFile& data) {
  char path[] = "/tmp/odyssey-eval-XXXXXX.jsonl";
  const int fd = ::mkstemps(path, 6);
  if (fd < 0) throw std::runtime_error(std::string("cannot create a temporary file ") + path);
  ::close(fd);
  {
    std::string lines;
    for (const std::string& t : texts) {
      std::string body;
      JsonWriter w(body);
      w.begin_object().key("text").value(t).end_object();
      lines += body + "\n";
    }
    std::ofstream out(path, std::ios::binary);
    out << lines;
    out.close();
    if (!out)  // a full disk, a file size limit: the tokenizer would read a cut list
      throw std::runtime_error(std::string("cannot write the texts to tokenize to ") + path + ": " +
                               std::strerror(errno));
  }
  std::vector<std::vector<int64_t>> out;
  TokenizerEvents events;
  events.tokenizer = [&](const TokenizerInfo& info) {
    if (info.vocab_size > model_vocab)
      throw PrepareError(2, tokenizer.label + ": its vocabulary holds " + std::to_string(info.vocab_size) +
                                " tokens, more than the model's model.vocab_size = " + std::to_string(model_vocab) +
                                ": the tokenizer does not match the model");
    if (info.vocab_size != data.vocab_size())
      throw PrepareError(2, tokenizer.label + ": its vocabulary holds " + std::to_string(info.vocab_size) +
                                " tokens, and --data " + data.path() + " was prepared with a vocabulary of " +
                                std::to_string(data.vocab_size()) +
                                " (its header's vocab_size): the needle's prompts and the file's filler would be "
                                "tokens of two tokenizers (pass the tokenizer the file was prepared with)");
  };
  events.document = [&](const uint32_t* ids, int64_t n) { out.emplace_back(ids, ids + n); };
  try {
    run_text_tokenizer(tokenizer.json, TokenizeOptions{}, {TextInput{path, "jsonl", 0}}, events);
  } catch (const PrepareError& e) {
    ::unlink(path);
    // The tokenizer process names its file as prepare's --tokenizer; here it may be a directory's
    // or a checkpoint's own, which the label says.
    const std::string named = "--tokenizer " + tokenizer.json;
    std::string what = e.what();
    if (what.rfind(named, 0) == 0) what = tokenizer.label + what.substr(named.size());
    // A text it cannot encode is named by its line in the temporary file, gone now and the user's
    // to neither open nor edit: said as the needle's text it is, with the way out.
    const std::string temporary = std::string(path) + ":";
    if (what.rfind(temporary, 0) == 0) {
      const size_t line_end = what.find(':', temporary.size());
      size_t line = 0;
      for (size_t i = temporary.size();
           i < line_end && i < what.size() && std::isdigit(static_cast<unsigned char>(what[i])); ++i)
        line = line * 10 + static_cast<size_t>(what[i] - '0');
      const std::string text = line >= 1 && line <= texts.size() ? texts[line - 1] : std::string("?");
      what = tokenizer.label + ": the needle grid's text \"" + text + "\"" +
             (line_end == std::string::npos ? what.substr(temporary.size() - 1) : what.substr(line_end)) +
             " (the needle grid needs a tokenizer that encodes its texts: another --tokenizer, or --no-needle)";
    }
    throw PrepareError(e.exit_code, what, e.located);
  } catch (...) {
    ::unlink(path);
    throw;
  }
  ::unlink(path);
  if (out.size() != texts.size())
    throw std::runtime_error("the tokenizer answered " + std::to_string(out.size()) + " texts of " +
                             std::to_string(texts.size()));
  return out;
}

/// The id of the tokenizer's unknown token: its model's `unk_token` looked up in the model's
/// vocabulary or the added tokens (WordLevel, WordPiece, BPE), or a Unigram model's `unk_id`; -1
/// when it has none (byte-level BPE encodes every text) or the file does not say.
int64_t unknown_token_id(const std::string& tokenizer_json) {
  std::string text;
  try {  // bounded as every input file is (the largest published tokenizer.json is tens of MB)
    text = read_file_bounded(tokenizer_json, int64_t{1} << 30, "tokenizer.json");
  } catch (const FileReadError&) {  // unreadable: the tokenizer's own run says why
    return -1;
  }
  const std::optional<Json> j = parse_json(text);
  if (!j || !j->is_object() || !j->contains("model") || !j->at("model").is_object()) return -1;
  const Json& model = j->at("model");
  if (model.contains("unk_id") && model.at("unk_id").is_number_integer()) return model.at("unk_id").get<int64_t>();
  if (!model.contains("unk_token") || !model.at("unk_token").is_string()) return -1;
  const std::string unk = model.at("unk_token").get<std::string>();
  if (model.contains("vocab") && model.at("vocab").is_object() && model.at("vocab").contains(unk) &&
      model.at("vocab").at(unk).is_number_integer())
    return model.at("vocab").at(unk).get<int64_t>();
  if (j->contains("added_tokens") && j->at("added_tokens").is_array())
    for (const Json& t : j->at("added_tokens"))
      if (t.is_object() && t.value("content", "") == unk && t.contains("id") && t.at("id").is_number_integer())
        return t.at("id").get<int64_t>();
  return -1;
}

std::string tokens_text(const std::vector<int64_t>& tokens) {
  std::string out = "[";
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + std::to_string(tokens[i]);
  return out + "]";
}

/// One passkey per trial, tokenized: the needle sentence, the question and the answer. The answer's
/// tokens are those the question and the answer have encoded together, after the question's: a
/// tokenizer that marks the start of a text (Llama 2's and Mistral's prepend "▁") gives the answer
/// encoded alone a token greedy decoding after the question never produces, and no trial could be
/// correct. A passkey the tokenizer cannot spell (an unknown token in its answer, or the same tokens
/// as another passkey's) would make the grid score nothing meaningful: bad input.
std::vector<NeedlePrompt> needle_prompts(const NeedleTokenizer& tokenizer, int64_t trials, uint64_t seed,
                                         int64_t model_vocab, const DocumentsFile& data) {
  SplitMix rng(seed);
  const std::string question = "What is the pass key? The pass key is";
  std::vector<std::string> keys, texts{question};
  for (int64_t t = 0; t < trials; ++t) {
    std::string key = std::to_string(1 + rng.below(9));
    for (int d = 0; d < 4; ++d) key += std::to_string(rng.below(10));
    keys.push_back(key);
    texts.push_back(" The pass key is " + key + ". Remember it. " + key + " is the pass key. ");
    texts.push_back(question + " " + key);
  }
  const auto tokens = tokenize(tokenizer, texts, model_vocab, data);
  const int64_t unknown = unknown_token_id(tokenizer.json);
  std::map<std::vector<int64_t>, std::string> spelled;  // answer tokens -> the passkey they spell
  std::vector<NeedlePrompt> out;
  for (int64_t t = 0; t < trials; ++t) {
    NeedlePrompt p;
    p.passkey = keys[static_cast<size_t>(t)];
    p.needle = tokens[static_cast<size_t>(1 + 2 * t)];
    // [question][answer] as the tokenizer encodes them together: the question is the part it shares
    // with the question encoded alone (all of it, unless a token merges across the two), the rest
    // the answer
    const std::vector<int64_t>& alone = tokens[0];
    const std::vector<int64_t>& joined = tokens[static_cast<size_t>(2 + 2 * t)];
    const size_t shared = static_cast<size_t>(
        std::mismatch(alone.begin(), alone.end(), joined.begin(), joined.end()).first - alone.begin());
    p.question.assign(joined.begin(), joined.begin() + static_cast<std::ptrdiff_t>(shared));
    p.answer.assign(joined.begin() + static_cast<std::ptrdiff_t>(shared), joined.end());
    if (p.answer.empty()) throw BadInput(tokenizer.label + ": the passkey " + p.passkey + " gives no token");
    if (unknown >= 0 && std::find(p.answer.begin(), p.answer.end(), unknown) != p.answer.end())
      throw BadInput(tokenizer.label + ": the passkey " + p.passkey + " (its answer \" " + p.passkey +
                     "\") encodes to " + tokens_text(p.answer) + ", which holds the unknown token (id " +
                     std::to_string(unknown) +
                     "): the tokenizer cannot spell a passkey, so no trial could be answered (a tokenizer with "
                     "the digits in its vocabulary, or --no-needle)");
    const auto [other, first] = spelled.emplace(p.answer, p.passkey);
    if (!first && other->second != p.passkey)
      throw BadInput(tokenizer.label + ": the passkeys " + other->second + " and " + p.passkey + " both encode to " +
                     tokens_text(p.answer) +
                     ": the tokenizer cannot tell passkeys apart, so the grid would score nothing meaningful "
                     "(a tokenizer that spells digits, or --no-needle)");
    out.push_back(std::move(p));
  }
  return out;
}

/// The fewest and the most tokens of the passkeys' answers (a tokenizer may spell two passkeys in
/// different counts: "12" and "1", "3" merged or not); {0, 0} without passkeys.
std::pair<int64_t, int64_t> answer_token_range(const std::vector<NeedlePrompt>& prompts) {
  if (prompts.empty()) return {0, 0};
  const auto [fewest, most] = std::minmax_element(
      prompts.begin(), prompts.end(), [](const auto& a, const auto& b) { return a.answer.size() < b.answer.size(); });
  return {static_cast<int64_t>(fewest->answer.size()), static_cast<int64_t>(most->answer.size())};
}

/// "1 rank" / "4 ranks: Ulysses 2 x data 2, FSDP": the layout the forward ran on.
std::string ranks_text(const RunConfig& cfg) {
  const ParallelConfig& p = cfg.parallel;
  if (p.world_size == 1) return "1 rank";
  return std::to_string(p.world_size) + " ranks: Ulysses " + std::to_string(p.ulysses_degree) + " x data " +
         std::to_string(p.world_size / p.ulysses_degree) + (p.fsdp ? ", FSDP" : "");
}

std::string fixed(double v, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

/// The exit status of what ended an evaluation: 2 for bad input (the arguments, the text inputs,
/// and what training classes as the input's: is_bad_input), 1 for the run's failure.
/// Writes `bytes` to `path`, which must not exist: through a temporary beside it published with
/// publish_new_file, which fails where a file appeared since the checks (another eval into this
/// --out) rather than replace it. Throws BadInput for that, FileWriteError for a failed write.
void write_new_file(const std::string& path, const std::string& bytes, const std::string& out_dir) {
  std::string temporary = path + ".XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) throw FileWriteError("cannot create " + temporary + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);  // mkstemp's 0600, widened to what creating the file would give
  const bool written = done == bytes.size() && ::fsync(fd) == 0;
  const int write_error = errno;
  ::close(fd);
  if (!written) {
    ::unlink(temporary.c_str());
    throw FileWriteError("cannot write " + temporary + ": " + std::strerror(write_error));
  }
  if (!publish_new_file(temporary, path))
    throw BadInput("--out " + out_dir + ": " + path +
                   " was written by another eval meanwhile (it was not there when this eval began): it is left as "
                   "it is; pass --overwrite to replace it");
}

/// What this eval process runs, for JobStart::expect_same: the config its ranks run, the options
/// that shape the numbers, and the identity of what it read from its own node (the weights, --data,
/// and the needle prompts its tokenizer made). --out is rank 0's alone, and the paths of RUN_DIR
/// and --data may differ between nodes while their files agree.
std::string eval_job_text(const EvalArgs& a, const Source& source, const RunConfig& cfg,
                          const std::vector<NeedlePrompt>& prompts, const std::vector<int64_t>& lengths) {
  std::string needle = "off (--no-needle)";
  if (a.needle) {
    uint32_t crc = 0;
    for (const NeedlePrompt& p : prompts)
      for (const std::vector<int64_t>* tokens : {&p.needle, &p.question, &p.answer})
        crc = crc32_update(crc, tokens->data(), tokens->size() * sizeof(int64_t));
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%08x", crc);
    needle = std::to_string(lengths.size()) + " lengths from " + std::to_string(lengths.front()) + ", " +
             std::to_string(a.trials) + " trials, seed " + std::to_string(a.seed) + ", prompt tokens' CRC-32 " + hex;
  }
  const std::string weights = source.run
                                  ? "step " + std::to_string(source.info->step) + ": " +
                                        files_identity(source.info->path, [](const std::string&) { return true; })
                                  : files_identity(a.source, hf_weights_file);
  RunConfig shown = cfg;
  shown.training.dataset_path.clear();  // --data and the weights, whose paths may differ between
  shown.model.hf_path.clear();          // nodes: their files' identities below
  return job_text(shown, {{"the weights", weights},
                          {"--data", file_identity(a.data)},
                          {"--first-bucket", std::to_string(a.first_bucket)},
                          {"--max-sequences", std::to_string(a.max_sequences)},
                          {"the needle grid", needle}});
}

/// How rank `other`'s eval job text differs from rank 0's `lead`.
std::string eval_job_difference(const std::string& lead, const std::string& other) {
  return job_difference(lead, other,
                        "every process of a torchrun eval reads the same weights and --data, with the same --set, "
                        "--seq-len and needle options");
}

int eval_exit_code(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const BadInput&) {
    return kExitBadInput;
  } catch (const PrepareError& e) {
    return e.exit_code;
  } catch (...) {
    return is_bad_input(error) ? kExitBadInput : kExitRuntime;
  }
}

int run_eval(int argc, char** argv, int first) {
  EvalArgs a;
  try {
    a = parse(argc, argv, first);
  } catch (const BadInput& e) {
    std::cerr << "odyssey eval: " << e.what() << "\nusage: odyssey " << kSynopsis << "\n";
    return kExitBadInput;
  }
  // Under torchrun: the processes agree before the forward, so a refusal of one process (a file
  // another node lacks) ends every process at once with its reason (JobStart).
  std::optional<JobStart> start;
  bool agreed = false;
  auto tell_peers = [&](const std::string& reason, int code) {
    if (agreed) return;
    if (start)
      start->refuse(reason, code == kExitBadInput);
    else  // refused before the config was known (RUN_DIR or its checkpoint unreadable here)
      refuse_torchrun_start(reason, code == kExitBadInput);
  };
  std::vector<std::string> made_folders;  // the folders of --out this eval made, innermost first
  std::optional<EvalStopSignals> stop_signals(std::in_place);
  try {
    const Source source = open_source(a);
    // The config the forward runs: the run's ranks and memory stack, the data and length asked.
    const LoadedPreset evaluated = apply_overrides(eval_config(source.run_config, a.data, a.seq_len), {}, "--seq-len");
    if (!evaluated.ok()) {
      std::string text = "--seq-len " + std::to_string(a.seq_len) + " with --data " + a.data + ":";
      for (const ConfigIssue& issue : evaluated.issues) text += "\n  " + issue_of_eval_config(issue);
      throw BadInput(text);
    }
    const RunConfig& cfg = evaluated.config;
    start.emplace(cfg);
    struct stat data_st {};
    if (::stat(a.data.c_str(), &data_st) == 0 && !S_ISREG(data_st.st_mode))
      throw BadInput("--data " + a.data + ": " +
                     (S_ISDIR(data_st.st_mode) ? "a directory" : "not a regular file (a FIFO, socket or device)") +
                     ", not a documents file (`odyssey prepare ... --out FILE` writes one)");
    std::optional<DocumentsFile> data;
    try {
      data.emplace(a.data, cfg.model.vocab_size);
    } catch (const DataError& e) {
      throw BadInput(std::string("--data: ") + e.what());
    }
    if (data->token_count() < a.seq_len + 1)
      throw BadInput("--data " + a.data + " holds " + std::to_string(data->token_count()) +
                     " tokens, fewer than --seq-len " + std::to_string(a.seq_len) +
                     " + 1: evaluate a shorter --seq-len or give more held-out text");
    // The sequences as the ranks will pack them: one without a target inside a document (its loss
    // 0 / 0) is skipped, and a file of nothing else is bad input.
    try {
      const auto packed = make_documents_dataset(cfg.training, cfg.model, UntargetedSequences::Skip);
      if (packed->skipped() > 0 && runs_rank_zero())  // under torchrun, rank 0's process says it
        std::cerr << "odyssey eval: note: " << packed->skipped() << " of the "
                  << packed->skipped() + packed->sequences() << " sequences of " << a.seq_len + 1
                  << " tokens of --data " << a.data
                  << " hold no target inside a document (one-token documents in a row) and are skipped\n";
    } catch (const DataError& e) {
      throw BadInput(std::string("--data: ") + e.what());
    }
    // The needle's tokenizer: --tokenizer, else the model directory's own.
    NeedleTokenizer tokenizer;
    std::vector<int64_t> lengths;
    if (a.needle) {
      if (!a.tokenizer.empty()) {
        tokenizer.json = find_tokenizer_json(a.tokenizer);
        tokenizer.label = "--tokenizer " + tokenizer.json;
      } else {
        // HF_DIR's own; for a run, a --set model.hf_path's, else the one its checkpoint carries
        // (the model directory's, copied into every checkpoint of a run trained from one).
        const bool named = !source.run || !cfg.model.hf_path.empty();
        const std::string dir = !source.run ? a.source : named ? cfg.model.hf_path : source.info->path;
        const std::string where = !source.run ? "HF_DIR " + dir
                                  : named     ? "model.hf_path " + dir
                                              : "the checkpoint " + dir;
        try {
          tokenizer.json = find_tokenizer_json(dir, where);
        } catch (const PrepareError& e) {
          // A tokenizer.json that is there and cannot be used (a folder, unreadable) is named as it is.
          if (path_exists(join_path(dir, "tokenizer.json")))
            throw BadInput(std::string("the needle grid's tokenizer: ") + e.what() +
                           ": pass --tokenizer PATH (a tokenizer.json or a directory holding one), or --no-needle");
          throw BadInput(
              "the needle grid needs a tokenizer: none was given (--tokenizer), and it was looked for in " + where +
              ", which holds no tokenizer.json" +
              (named ? "" : " (a run trained from a model.hf_path directory that has one carries it there)") +
              ": pass --tokenizer PATH (a tokenizer.json or a directory holding one), or --no-needle");
        }
        tokenizer.label = "the tokenizer " + tokenizer.json + " (" + where + "'s own)";
      }
      lengths = needle_lengths(std::min(a.needle_min, a.seq_len), a.seq_len);
      // Each context length runs on the ranks as --seq-len does: the validator's rules for it.
      for (int64_t length : lengths) {
        const LoadedPreset at_length =
            apply_overrides(eval_config(source.run_config, a.data, length), {}, "--needle-min");
        if (at_length.ok()) continue;
        std::string text = "--needle-min " + std::to_string(a.needle_min) + ": the needle grid's context of " +
                           std::to_string(length) +
                           " tokens (--needle-min doubled up to --seq-len) runs as "
                           "training.seq_len = " +
                           std::to_string(length) + ":";
        for (const ConfigIssue& issue : at_length.issues) text += "\n  " + issue_of_eval_config(issue);
        throw BadInput(text);
      }
    }
    const std::string out_dir = !a.out.empty() ? a.out
                                : source.run   ? join_path(a.source, "eval")
                                             : "eval-" + base_name(resolve_path(a.source));  // "." by its folder's name
    const std::string json_path = join_path(out_dir, "eval.json"), png_path = join_path(out_dir, "needle.png");
    for (const std::string& path : {json_path, png_path}) {
      if (!exists(path)) continue;
      // --data, the tokenizer or the preset where eval writes: --overwrite replaced the input.
      for (const auto& [flag, input] :
           {std::pair{"--data", a.data}, {"--tokenizer", a.tokenizer}, {"--preset", a.preset}})
        if (!input.empty() && same_path(input, path))
          throw BadInput(std::string(flag) + " " + input + " is the file eval writes as " + path + " (--out " +
                         out_dir + "): choose another --out (nothing was written)");
      if (!a.overwrite)
        throw BadInput("--out " + out_dir + ": " + path +
                       " exists; pass --overwrite to replace it (nothing was written)");
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        throw BadInput("--out " + out_dir + ": " + path + " is " +
                       (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
                       ", and eval writes a file there (--overwrite replaces files only): remove it, or "
                       "choose another --out (nothing was written)");
    }
    std::vector<NeedlePrompt> prompts;
    if (a.needle) {
      prompts = needle_prompts(tokenizer, a.trials, a.seed, cfg.model.vocab_size, *data);
      for (const NeedlePrompt& q : prompts)  // the passkeys' prompts may differ in length: each checked
        if (const int64_t fixed_tokens = static_cast<int64_t>(q.needle.size() + q.question.size() + q.answer.size());
            fixed_tokens >= lengths.front() + 1)
          throw BadInput("--needle-min " + std::to_string(lengths.front()) + ": the needle, question and answer take " +
                         std::to_string(fixed_tokens) + " tokens (passkey " + q.passkey +
                         "), which leave no filler: give --needle-min " + std::to_string(fixed_tokens) +
                         " or more (and a --seq-len at least that)");
    }
    std::string error;
    int error_number = 0;
    for (std::string folder = clean_path(out_dir); !folder.empty() && folder != "." && !path_exists(folder);
         folder = folder_of(folder))
      made_folders.push_back(folder);
    g_made_folders.store(&made_folders);  // complete: the stop handler may read it from here
    if (!make_dirs(out_dir, &error, &error_number)) throw BadInput("--out " + out_dir + ": " + error);
    {  // the outputs can be written there, known before the evaluation rather than after it
      const std::string probe = join_path(out_dir, ".eval-write-check-XXXXXX");
      if (probe.size() >= sizeof(g_write_probe))
        throw BadInput("--out " + out_dir + ": a path of " + std::to_string(probe.size()) + " bytes, longer than " +
                       std::to_string(sizeof(g_write_probe) - 1) + " (nothing was written)");
      std::memcpy(g_write_probe, probe.c_str(), probe.size() + 1);
      const int fd = ::mkstemp(g_write_probe);  // the handler unlinks the name it fills in
      if (fd < 0) {
        g_write_probe[0] = '\0';
        throw BadInput("--out " + out_dir + ": cannot write there (" + std::strerror(errno) + "; nothing was written)");
      }
      ::close(fd);
      ::unlink(g_write_probe);
      g_write_probe[0] = '\0';
    }

    // The weights, read here once for every rank of this process: a run's checkpoint whole (each
    // rank copies its FSDP slice; host memory: the model's fp32 parameters once), or the Hugging
    // Face files, of which each rank reads its slice.
    std::map<std::string, at::Tensor> masters;
    std::optional<HfWeights> hf;
    std::string weights;
    if (source.run) {
      masters = read_full_masters(*source.info, source.saved);  // the layout it was saved with
      weights = "step " + std::to_string(source.info->step) + " of " + a.source;
    } else {
      hf.emplace(a.source, cfg.model);
      weights = hf->describe();  // "DIR (1 file, 21 tensors, F32)"
    }
    const bool tty = ::isatty(STDERR_FILENO) && !a.quiet;
    auto progress = [&](const char* what) {
      return [&, what](int64_t done, int64_t total) {
        if (tty)
          std::cerr << "\r\033[K" << what << " " << done << "/" << total << (done == total ? "\r\033[K" : "")
                    << std::flush;
      };
    };
    EvalRequest request;
    request.first_bucket = a.first_bucket;
    request.max_sequences = a.max_sequences;
    request.prompts = prompts;
    request.needle_lengths = lengths;
    request.load_weights = [&](Trainer& trainer) {
      if (hf)
        hf->load(trainer.model().groups());  // this rank's slice of every parameter
      else
        load_full_masters(masters, trainer.model().groups());
    };
    request.bucket_progress = progress("sequences");
    request.needle_progress = progress("needle forwards");
    // Each torchrun process reads its own node's weights, --data and tokenizer: copies of other
    // contents evaluated other numbers under rank 0's report in silence.
    start->expect_same(eval_job_text(a, source, cfg, prompts, lengths), eval_job_difference);
    // Every rank of the run (threads here, or this process's rank under torchrun).
    agreed = true;  // from here a refusal is the agreement's own, or a rank's in the forward
    start->agree(nullptr, false);
    request.start = &*start;
    const EvalReport report = evaluate_on_ranks(cfg, request);
    if (!report.lead) return kExitOk;  // a torchrun process of another rank: rank 0's process reports
    const BucketEval& buckets = report.buckets;
    const std::vector<NeedleCell>& cells = report.cells;

    // The heatmap: lengths down, depths across.
    std::optional<std::string> png;
    HeatmapImage image;
    if (a.needle) {
      std::vector<double> accuracy;
      for (const NeedleCell& c : cells) accuracy.push_back(c.accuracy());
      image = render_heatmap(static_cast<int>(lengths.size()), static_cast<int>(kNeedleDepths.size()), accuracy);
      png = encode_png(image);
    }

    std::string text;
    JsonWriter w(text);
    w.begin_object()
        .key("ok")
        .value(true)
        .key("source")
        .begin_object()
        .key("kind")
        .value(source.run ? "run" : "hf")
        .key("path")
        .value(a.source)
        .key("step");
    if (source.run)
      w.value(source.info->step);
    else
      w.null();
    w.end_object()
        .key("data")
        .value(a.data)
        .key("seq_len")
        .value(a.seq_len)
        .key("device")
        .value(report.device)
        .key("memory")
        .value(report.memory)
        .key("document_positions")
        .value(to_string(cfg.training.document_positions))
        .key("sequences")
        .value(buckets.sequences)
        .key("tokens")
        .value(buckets.tokens)
        .key("loss")
        .value(buckets.loss)
        .key("unused_tokens")
        .value(buckets.unused_tokens)
        .key("buckets")
        .begin_array();
    for (const PositionBucket& b : buckets.buckets) {
      w.begin_object().key("from").value(b.from).key("to").value(b.to).key("tokens").value(b.tokens).key("loss");
      if (b.tokens > 0)
        w.value(b.loss());
      else
        w.null();
      w.end_object();
    }
    w.end_array().key("needle");
    if (a.needle) {
      w.begin_object()
          .key("tokenizer")
          .value(tokenizer.json)
          .key("trials")
          .value(a.trials)
          .key("seed")
          .value(a.seed)
          .key("passkeys")
          .begin_array();
      for (const NeedlePrompt& p : prompts) w.value(p.passkey);
      w.end_array()
          .key("answer_tokens")  // the most of any passkey's answer
          .value(answer_token_range(prompts).second)
          .key("answer_tokens_each")  // in the order of passkeys
          .begin_array();
      for (const NeedlePrompt& p : prompts) w.value(static_cast<int64_t>(p.answer.size()));
      w.end_array().key("lengths").begin_array();
      for (int64_t l : lengths) w.value(l);
      w.end_array().key("depths").begin_array();
      for (int64_t d : kNeedleDepths) w.value(d);
      w.end_array().key("cells").begin_array();
      int64_t correct = 0, trials = 0;
      for (const NeedleCell& c : cells) {
        w.begin_object()
            .key("length")
            .value(c.length)
            .key("depth")
            .value(c.depth)
            .key("trials")
            .value(c.trials)
            .key("correct")
            .value(c.correct)
            .key("accuracy")
            .value(c.accuracy())
            .end_object();
        correct += c.correct;
        trials += c.trials;
      }
      w.end_array()
          .key("accuracy")
          .value(trials > 0 ? static_cast<double>(correct) / static_cast<double>(trials) : 0.0)
          .key("heatmap");
      if (png)
        w.value(png_path);
      else
        w.null();
      w.end_object();
    } else {
      w.null();
    }
    w.end_object();
    g_publishing = 1;  // a signal from here waits until both files are whole
    if (a.overwrite) {
      write_file_atomically(json_path, text + "\n");
      if (png) write_file_atomically(png_path, *png);
      // an earlier eval's heatmap would describe another evaluation than this eval.json
      struct stat old_png {};
      if (!png && ::lstat(png_path.c_str(), &old_png) == 0 && S_ISREG(old_png.st_mode)) ::unlink(png_path.c_str());
    } else {  // never over a file another eval into this --out wrote meanwhile
      write_new_file(json_path, text + "\n", out_dir);
      if (png) write_new_file(png_path, *png, out_dir);
    }
    stop_signals.reset();                     // whole results: a signal from here ends the process as it would anywhere
    if (const int sig = g_deferred_signal) {  // the results are whole; the stop is still honoured
      std::cerr << "odyssey eval: stopped by " << (sig == SIGINT ? "Ctrl-C" : "SIGTERM") << " after writing "
                << json_path << (png ? " and " + png_path : std::string()) << "\n";
      return 128 + sig;
    }

    if (a.json) {
      std::cout << text << "\n";
      return kExitOk;
    }
    std::cout << "odyssey eval " << weights << " on " << a.data << " (" << report.device << ", " << ranks_text(cfg)
              << ", " << report.memory << ")\n"
              << "loss by position in document: " << buckets.sequences << " sequences of " << a.seq_len << " tokens, "
              << buckets.tokens << " tokens scored, mean loss " << fixed(buckets.loss, 4)
              << (buckets.skipped > 0
                      ? " (" + std::to_string(buckets.skipped) + " without a target inside a document skipped)"
                      : std::string())
              << "\n";
    std::printf("  %-17s %10s %9s\n", "positions", "tokens", "loss");
    std::fflush(stdout);
    for (const PositionBucket& b : buckets.buckets) {
      const std::string range = format_size(b.from) + "-" + format_size(b.to);
      std::printf("  %-17s %10lld %9s\n", range.c_str(), static_cast<long long>(b.tokens),
                  b.tokens > 0 ? fixed(b.loss(), 4).c_str() : "-");
    }
    if (a.needle) {
      const auto [fewest, most] = answer_token_range(prompts);
      const std::string counted =
          fewest == most ? std::to_string(most) : std::to_string(fewest) + " to " + std::to_string(most);
      std::printf("needle in a haystack: passkey of %s token(s), %lld trial(s) a cell, exact match (correct/trials)\n",
                  counted.c_str(), static_cast<long long>(a.trials));
      std::printf("  tokenized by %s\n", tokenizer.json.c_str());
      std::printf("  %-8s", "length");
      for (int64_t d : kNeedleDepths) std::printf(" %7lld%%", static_cast<long long>(d));
      std::printf("\n");
      for (size_t r = 0; r < lengths.size(); ++r) {
        std::printf("  %-8s", format_size(lengths[r]).c_str());
        for (size_t c = 0; c < kNeedleDepths.size(); ++c) {
          const NeedleCell& cell = cells[r * kNeedleDepths.size() + c];
          const std::string v = std::to_string(cell.correct) + "/" + std::to_string(cell.trials);
          std::printf(" %8s", v.c_str());
        }
        std::printf("\n");
      }
    }
    std::fflush(stdout);
    std::cout << "wrote " << json_path;
    if (png)
      std::cout << " and " << png_path << " (" << image.width << "x" << image.height << ")";
    else if (a.needle)
      std::cout << " (no heatmap: this build has no PNG encoder, libstb)";
    std::cout << "\n";
    return kExitOk;
  } catch (const std::exception& e) {
    g_publishing = 0;  // a failed write: a signal from here ends the process at once
    const int code = eval_exit_code(std::current_exception());
    // A refused or failed eval leaves no folder behind that it made and wrote nothing into
    // (rmdir removes only an empty one).
    for (const std::string& folder : made_folders) ::rmdir(folder.c_str());
    tell_peers(e.what(), code);
    std::cerr << "odyssey eval: " << e.what() << "\n";
    return code;
  }
}

const CommandRegistration registration{
    Command{74, "eval", kSynopsis,
            "loss by position bucket and a needle grid on held-out documents, forward only, on the run's ranks (--set "
            "parallel.*)",
            run_eval, kHelp}};

}  // namespace
}  // namespace odyssey::cli
