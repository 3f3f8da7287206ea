// Reading odyssey eval's eval.json for the Eval panel (see eval_results.h): the parser with its
// rules, the run directory's scan, the command that makes an eval, the heatmap colours.
// [SECTION] parsing  [SECTION] the run directory  [SECTION] command and colours
// defines: same_buckets, parse_eval_json, find_eval_files, EvalLibrary, eval_command, accuracy_color
#include "app/studio/eval_results.h"

#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "app/cli/eval_heatmap.h"  // accuracy_rgb, the needle.png colours (inline)
#include "engine/config/sizes.h"
#include "engine/util/files.h"
#include "engine/util/json_read.h"

namespace odyssey::studio {

// [SECTION] parsing -------------------------------------------------------------------------------

namespace {

std::string short_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

/// A broken rule of the format: the message is complete ("FILE: key = value: rule").
struct BadEval : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Reads typed fields out of one file's objects; every refusal names the file, the key, the value
/// and the rule.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& key, const Json* value, const std::string& rule) const {
    std::string text = path_ + ": ";
    if (!key.empty()) text += key + (value ? " = " + json_value_text(*value) : std::string()) + ": ";
    throw BadEval(text + rule);
  }

  static std::string key_of(const std::string& where, const char* key) {
    return where.empty() ? key : where + "." + key;
  }

  const Json& field(const Json& object, const std::string& where, const char* key) const {
    const auto it = object.find(key);
    if (it == object.end()) fail(key_of(where, key), nullptr, "missing (every eval.json of odyssey eval has it)");
    return *it;
  }
  const Json& object(const Json& parent, const std::string& where, const char* key) const {
    const Json& v = field(parent, where, key);
    if (!v.is_object()) fail(key_of(where, key), &v, "must be an object");
    return v;
  }
  const Json& array(const Json& parent, const std::string& where, const char* key, bool non_empty) const {
    const Json& v = field(parent, where, key);
    if (!v.is_array()) fail(key_of(where, key), &v, "must be an array");
    if (non_empty && v.empty()) fail(key_of(where, key), &v, "must not be empty");
    return v;
  }
  int64_t integer(const Json& v, const std::string& key, int64_t min) const {
    if (!v.is_number_integer()) fail(key, &v, "must be a whole number");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(key, &v, "is too large");
    const int64_t n = v.get<int64_t>();
    if (n < min) fail(key, &v, "must be at least " + std::to_string(min));
    return n;
  }
  int64_t integer(const Json& parent, const std::string& where, const char* key, int64_t min) const {
    return integer(field(parent, where, key), key_of(where, key), min);
  }
  double number(const Json& v, const std::string& key, double min, double max) const {
    if (!v.is_number()) fail(key, &v, "must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < min || x > max)
      fail(key, &v, "must be a number in [" + short_number(min) + ", " + short_number(max) + "]");
    return x;
  }
  double number(const Json& parent, const std::string& where, const char* key, double min, double max) const {
    return number(field(parent, where, key), key_of(where, key), min, max);
  }
  std::string text(const Json& parent, const std::string& where, const char* key) const {
    const Json& v = field(parent, where, key);
    if (!v.is_string()) fail(key_of(where, key), &v, "must be a string");
    return v.get<std::string>();
  }

 private:
  const std::string& path_;
};

constexpr double kMaxLoss = 1e9;  // a mean CE in nats is finite and non-negative; any bound above every real one

std::vector<EvalBucket> read_buckets(const Reader& r, const Json& root) {
  const Json& list = r.array(root, "", "buckets", true);
  std::vector<EvalBucket> buckets;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "buckets[" + std::to_string(i) + "]";
    if (!list[i].is_object()) r.fail(where, &list[i], "must be an object {from, to, tokens, loss}");
    EvalBucket b;
    b.from = r.integer(list[i], where, "from", 0);
    if (b.from == std::numeric_limits<int64_t>::max())  // no position follows it: no `to` above it
      r.fail(where + ".from", &list[i].at("from"), "leaves no position for the bucket");
    b.to = r.integer(list[i], where, "to", b.from + 1);
    b.tokens = r.integer(list[i], where, "tokens", 0);
    if (i == 0 && b.from != 0) r.fail(where + ".from", &list[i].at("from"), "the first bucket begins at position 0");
    if (i > 0 && b.from != buckets.back().to)
      r.fail(
          where + ".from", &list[i].at("from"),
          "must equal the previous bucket's end, " + std::to_string(buckets.back().to) + " (buckets are contiguous)");
    const Json& loss = r.field(list[i], where, "loss");
    if (!loss.is_null())
      b.loss = r.number(loss, where + ".loss", 0, kMaxLoss);
    else if (b.tokens > 0)
      r.fail(where + ".loss", &loss, "null, but the bucket scored " + std::to_string(b.tokens) + " tokens");
    buckets.push_back(b);
  }
  return buckets;
}

/// Ascending whole numbers in [min, max].
std::vector<int64_t> read_axis(const Reader& r, const Json& needle, const char* key, int64_t min, int64_t max) {
  const Json& list = r.array(needle, "needle", key, true);
  std::vector<int64_t> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "needle." + std::string(key) + "[" + std::to_string(i) + "]";
    const int64_t v = r.integer(list[i], where, min);
    if (v > max) r.fail(where, &list[i], "must be at most " + std::to_string(max));
    if (!out.empty() && v <= out.back()) r.fail(where, &list[i], "must be larger than the one before (ascending)");
    out.push_back(v);
  }
  return out;
}

EvalNeedle read_needle(const Reader& r, const Json& v) {
  if (!v.is_object()) r.fail("needle", &v, "must be an object, or null (odyssey eval --no-needle)");
  EvalNeedle n;
  n.trials = r.integer(v, "needle", "trials", 1);
  const Json& seed = r.field(v, "needle", "seed");
  if (!seed.is_number_integer() || (!seed.is_number_unsigned() && seed.get<int64_t>() < 0))
    r.fail("needle.seed", &seed, "must be a whole number, 0 or more");
  n.seed = seed.get<uint64_t>();
  const Json& keys = r.array(v, "needle", "passkeys", true);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].is_string()) r.fail("needle.passkeys[" + std::to_string(i) + "]", &keys[i], "must be a string");
    n.passkeys.push_back(keys[i].get<std::string>());
  }
  if (static_cast<int64_t>(n.passkeys.size()) != n.trials)
    r.fail("needle.passkeys", &keys, "must hold one passkey per trial, " + std::to_string(n.trials));
  n.answer_tokens = r.integer(v, "needle", "answer_tokens", 1);
  n.lengths = read_axis(r, v, "lengths", 1, INT64_MAX);
  n.depths = read_axis(r, v, "depths", 0, 100);
  const Json& cells = r.array(v, "needle", "cells", false);
  const size_t expected = n.lengths.size() * n.depths.size();
  if (cells.size() != expected)
    r.fail("needle.cells", nullptr,
           "holds " + std::to_string(cells.size()) + " cells; the grid of " + std::to_string(n.lengths.size()) +
               " lengths x " + std::to_string(n.depths.size()) + " depths needs " + std::to_string(expected));
  for (size_t i = 0; i < cells.size(); ++i) {
    const std::string where = "needle.cells[" + std::to_string(i) + "]";
    if (!cells[i].is_object()) r.fail(where, &cells[i], "must be an object {length, depth, trials, correct, accuracy}");
    EvalNeedleCell c;
    c.length = r.integer(cells[i], where, "length", 1);
    c.depth = r.integer(cells[i], where, "depth", 0);
    const int64_t want_length = n.lengths[i / n.depths.size()], want_depth = n.depths[i % n.depths.size()];
    if (c.length != want_length)
      r.fail(where + ".length", &cells[i].at("length"),
             "must be " + std::to_string(want_length) + " (cells run lengths outer, depths inner)");
    if (c.depth != want_depth)
      r.fail(where + ".depth", &cells[i].at("depth"),
             "must be " + std::to_string(want_depth) + " (cells run lengths outer, depths inner)");
    c.trials = r.integer(cells[i], where, "trials", 1);
    c.correct = r.integer(cells[i], where, "correct", 0);
    if (c.correct > c.trials)
      r.fail(where + ".correct", &cells[i].at("correct"), "more than the cell's trials, " + std::to_string(c.trials));
    c.accuracy = r.number(cells[i], where, "accuracy", 0, 1);
    // odyssey eval writes correct / trials, which JSON carries exactly.
    const double ratio = static_cast<double>(c.correct) / static_cast<double>(c.trials);
    if (std::abs(c.accuracy - ratio) > 1e-12)
      r.fail(where + ".accuracy", &cells[i].at("accuracy"),
             "must equal correct / trials = " + std::to_string(c.correct) + "/" + std::to_string(c.trials));
    n.cells.push_back(c);
  }
  n.accuracy = r.number(v, "needle", "accuracy", 0, 1);
  const Json& heatmap = r.field(v, "needle", "heatmap");
  if (heatmap.is_string())
    n.heatmap = heatmap.get<std::string>();
  else if (!heatmap.is_null())
    r.fail("needle.heatmap", &heatmap, "must be the PNG's path, or null");
  return n;
}

EvalResult read_eval(const Reader& r, const Json& root) {
  if (!root.is_object()) r.fail("", nullptr, "not an eval.json of odyssey eval (the document is not a JSON object)");
  const Json& ok = r.field(root, "", "ok");
  if (ok != Json(true)) r.fail("ok", &ok, "must be true (odyssey eval writes the file only when it finished)");
  EvalResult e;
  const Json& source = r.object(root, "", "source");
  e.source_kind = r.text(source, "source", "kind");
  if (e.source_kind != "run" && e.source_kind != "hf")
    r.fail("source.kind", &source.at("kind"), "must be \"run\" (a run directory) or \"hf\" (a Hugging Face directory)");
  e.source_path = r.text(source, "source", "path");
  const Json& step = r.field(source, "source", "step");
  if (e.source_kind == "run")
    e.step = r.integer(step, "source.step", 0);
  else if (!step.is_null())
    r.fail("source.step", &step, "must be null for a Hugging Face directory (it has no step)");
  e.data = r.text(root, "", "data");
  e.seq_len = r.integer(root, "", "seq_len", 1);
  e.device = r.text(root, "", "device");
  e.memory = r.text(root, "", "memory");
  e.document_positions = r.text(root, "", "document_positions");
  e.sequences = r.integer(root, "", "sequences", 0);
  e.tokens = r.integer(root, "", "tokens", 0);
  e.loss = r.number(root, "", "loss", 0, kMaxLoss);
  e.unused_tokens = r.integer(root, "", "unused_tokens", 0);
  e.buckets = read_buckets(r, root);
  if (e.buckets.back().to != e.seq_len)
    r.fail("buckets[" + std::to_string(e.buckets.size() - 1) + "].to", &root.at("buckets").back().at("to"),
           "the last bucket ends at seq_len, " + std::to_string(e.seq_len));
  int64_t scored = 0;
  for (const EvalBucket& b : e.buckets) scored += b.tokens;
  if (scored != e.tokens)
    r.fail("tokens", &root.at("tokens"), "must be the buckets' tokens summed, " + std::to_string(scored));
  const Json& needle = r.field(root, "", "needle");
  if (!needle.is_null()) e.needle = read_needle(r, needle);
  return e;
}

}  // namespace

bool same_buckets(const EvalResult& a, const EvalResult& b) {
  if (a.buckets.size() != b.buckets.size()) return false;
  for (size_t i = 0; i < a.buckets.size(); ++i)
    if (a.buckets[i].from != b.buckets[i].from || a.buckets[i].to != b.buckets[i].to) return false;
  return true;
}

bool parse_eval_json(const std::string& text, const std::string& path, EvalResult* out, std::string* error) {
  try {
    std::string json_error;
    const std::optional<Json> root = parse_json(text, &json_error);
    if (!root) throw BadEval(path + ": not JSON (" + json_error + ")");
    const Reader reader(path);
    *out = read_eval(reader, *root);
    return true;
  } catch (const std::exception& e) {  // BadEval, or nlohmann's own on a value it cannot convert
    if (error) *error = dynamic_cast<const BadEval*>(&e) ? e.what() : path + ": " + e.what();
    return false;
  }
}

// [SECTION] the run directory ---------------------------------------------------------------------

std::vector<std::string> find_eval_files(const std::string& run_dir) {
  std::vector<std::string> names;
  if (run_dir.empty() || !is_directory(run_dir)) return names;
  std::vector<std::string> entries = list_dir(run_dir);
  std::sort(entries.begin(), entries.end());
  for (const std::string& entry : entries) {
    if (entry.empty() || entry[0] == '.') continue;
    if (entry == "eval.json") {
      names.push_back(entry);
    } else if (struct stat st{};  // a dangling link counts: it is listed, unreadable, not skipped
               is_directory(join_path(run_dir, entry)) &&
               ::lstat(join_path(run_dir, entry + "/eval.json").c_str(), &st) == 0) {
      names.push_back(entry + "/eval.json");
    }
  }
  return names;
}

bool EvalLibrary::refresh(const std::string& run_dir, double now_s, bool force) {
  const bool other_dir = !scanned_ || run_dir != run_dir_;
  if (!other_dir && !force && now_s - scanned_at_ < kRescanS) return false;
  const std::string kept = !other_dir && selected_file() ? selected_file()->path : std::string();
  std::vector<EvalFile> before = other_dir ? std::vector<EvalFile>{} : std::move(files_);
  files_.clear();
  run_dir_ = run_dir;
  scanned_ = true;
  scanned_at_ = now_s;
  dir_exists_ = !run_dir.empty() && is_directory(run_dir);
  has_checkpoint_ = dir_exists_ && path_exists(join_path(run_dir, "checkpoints/latest.json"));
  for (const std::string& name : find_eval_files(run_dir)) {
    EvalFile f;
    f.name = name;
    f.path = join_path(run_dir, name);
    struct stat st {};
    if (::stat(f.path.c_str(), &st) != 0) continue;  // gone between the listing and now
    f.modified_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    f.size = static_cast<int64_t>(st.st_size);
    const auto same = std::find_if(before.begin(), before.end(), [&](const EvalFile& b) {
      return b.path == f.path && b.modified_ns == f.modified_ns && b.size == f.size;
    });
    if (same != before.end()) {
      files_.push_back(std::move(*same));
      continue;
    }
    try {
      EvalResult result;
      if (parse_eval_json(read_file_bounded(f.path, kMaxFileBytes, "eval.json"), f.path, &result, &f.error))
        f.result = std::move(result);
    } catch (const std::exception& e) {  // FileReadError: not a regular file, too large, unreadable
      f.error = e.what();
    }
    files_.push_back(std::move(f));
  }
  std::stable_sort(files_.begin(), files_.end(), [](const EvalFile& a, const EvalFile& b) {
    return a.modified_ns != b.modified_ns ? a.modified_ns > b.modified_ns : a.name < b.name;
  });
  selected_ = files_.empty() ? -1 : 0;
  for (size_t i = 0; i < files_.size(); ++i)
    if (files_[i].path == kept) selected_ = static_cast<int>(i);
  return true;
}

void EvalLibrary::select(int index) {
  if (index >= 0 && index < static_cast<int>(files_.size())) selected_ = index;
}

int EvalLibrary::older_alike(int index) const {
  if (index < 0 || index >= static_cast<int>(files_.size()) || !files_[static_cast<size_t>(index)].result) return -1;
  const EvalFile& f = files_[static_cast<size_t>(index)];
  for (size_t i = static_cast<size_t>(index) + 1; i < files_.size(); ++i)  // newest first: later entries are older
    if (files_[i].result && files_[i].modified_ns < f.modified_ns && same_buckets(*f.result, *files_[i].result))
      return static_cast<int>(i);
  return -1;
}

// [SECTION] command and colours ---------------------------------------------------------------------

namespace {
/// `text` as a POSIX shell reads it back: unchanged when every character is safe, else in single
/// quotes ('\'' for a quote inside).
std::string shell_quote(const std::string& text) {
  const bool safe = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string("_./-+:=,@%").find(c) != std::string::npos;
  });
  if (safe) return text;
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

std::string eval_command(const RunConfig& cfg, const std::string& preset_path, const std::string& run_dir,
                         bool has_checkpoint) {
  const std::string dir = shell_quote(run_dir.empty() ? "RUN_DIR" : run_dir);
  std::string out;
  if (!has_checkpoint)
    out += "odyssey train " + (preset_path.empty() ? "PRESET" : shell_quote(preset_path)) + " --out " + dir + "\n";
  out += "odyssey eval " + dir + " --data HELDOUT.odoc --seq-len " + format_size(cfg.training.seq_len);
  if (cfg.model.hf_path.empty()) out += " --tokenizer TOKENIZER.json";
  return out;
}

uint32_t accuracy_color(double accuracy) {
  uint8_t rgb[3];
  cli::accuracy_rgb(accuracy, rgb);
  return uint32_t{rgb[0]} | uint32_t{rgb[1]} << 8 | uint32_t{rgb[2]} << 16 | uint32_t{255} << 24;
}

}  // namespace odyssey::studio
