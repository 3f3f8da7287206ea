// The evaluations of a run as the studio's Eval panel shows them, without rendering: the
// eval.json files `odyssey eval` wrote into a run directory (docs/eval.md), each parsed into the
// loss by position bucket and the needle grid or refused with the file, key, value and rule, and
// rescanned when the files change. Also the command that makes one, and the heatmap's colours.
// defines: EvalBucket, EvalNeedleCell, EvalNeedle, EvalResult, same_buckets, parse_eval_json, EvalFile,
// find_eval_files, EvalLibrary, eval_command, accuracy_color
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey::studio {

/// Labels whose input sits at positions [from, to) of their document: how many were scored and
/// their mean cross-entropy (nats); no loss for an empty bucket.
struct EvalBucket {
  int64_t from = 0, to = 0, tokens = 0;
  std::optional<double> loss;
};

/// One (context length, needle depth) cell of the needle grid: correct of trials, exact match.
struct EvalNeedleCell {
  int64_t length = 0, depth = 0;  ///< tokens, percent of the filler before the needle
  int64_t trials = 0, correct = 0;
  double accuracy = 0;  ///< correct / trials
};

struct EvalNeedle {
  int64_t trials = 0, answer_tokens = 0;
  uint64_t seed = 0;
  std::vector<std::string> passkeys;
  std::vector<int64_t> lengths;        ///< ascending: the grid's rows
  std::vector<int64_t> depths;         ///< percent, ascending: the grid's columns
  std::vector<EvalNeedleCell> cells;   ///< lengths outer, depths inner (lengths x depths of them)
  double accuracy = 0;                 ///< over every trial
  std::optional<std::string> heatmap;  ///< the PNG odyssey eval wrote (none without libstb)
  const EvalNeedleCell& cell(size_t length_index, size_t depth_index) const {
    return cells[length_index * depths.size() + depth_index];
  }
};

/// One eval.json: what was evaluated, on what, and the two results.
struct EvalResult {
  std::string source_kind;  ///< "run" or "hf"
  std::string source_path;
  std::optional<int64_t> step;  ///< the run's checkpoint step (none for a Hugging Face directory)
  std::string data, device, memory, document_positions;
  int64_t seq_len = 0, sequences = 0, tokens = 0, unused_tokens = 0;
  double loss = 0;                   ///< mean CE over every scored label
  std::vector<EvalBucket> buckets;   ///< ascending, each `to` the next `from`
  std::optional<EvalNeedle> needle;  ///< none with --no-needle
};

/// True when both have the same buckets (from and to), so their losses compare bucket by bucket.
bool same_buckets(const EvalResult& a, const EvalResult& b);

/// Parses the text of an eval.json named `path` (for messages). False with *error naming the
/// file, the key (`needle.cells[3].correct`), its value and the rule it breaks; never throws.
bool parse_eval_json(const std::string& text, const std::string& path, EvalResult* out, std::string* error);

/// An eval.json found in a run directory, parsed or with the reason it could not be.
struct EvalFile {
  std::string path;         ///< "runs/tiny/eval/eval.json"
  std::string name;         ///< relative to the run directory: "eval/eval.json"
  int64_t modified_ns = 0;  ///< its modification time (ns since the epoch)
  int64_t size = 0;
  std::optional<EvalResult> result;
  std::string error;  ///< why there is no result
};

/// The eval.json files of `run_dir`, named relative to it: "eval.json" (a directory that is itself
/// an --out) and "NAME/eval.json" for each folder NAME ("eval", odyssey eval's default, or any
/// `--out run_dir/NAME`), sorted by name; hidden entries skipped. POSIX calls, not std::filesystem
/// (libtorch.so's copies of it crash the executable: engine/util/files.h).
std::vector<std::string> find_eval_files(const std::string& run_dir);

/// The eval files of one run directory, read again only when they change, and which is selected.
class EvalLibrary {
 public:
  /// Seconds between looks at the directory (a new or rewritten eval.json shows up within them).
  static constexpr double kRescanS = 2.0;
  /// An eval.json is a few KB; a larger file is refused rather than read.
  static constexpr int64_t kMaxFileBytes = 16 << 20;

  /// Looks at `run_dir` when it is another directory than last time, when kRescanS passed since
  /// the last look, or when `force`: lists its eval files, newest first, and parses the new or
  /// changed ones (modification time or size). The selection stays on its file while it exists,
  /// else moves to the newest. True when it looked.
  bool refresh(const std::string& run_dir, double now_s, bool force = false);

  const std::string& run_dir() const { return run_dir_; }
  const std::vector<EvalFile>& files() const { return files_; }
  /// `run_dir/checkpoints/latest.json` exists: odyssey eval can evaluate the directory as a run.
  bool has_checkpoint() const { return has_checkpoint_; }
  bool dir_exists() const { return dir_exists_; }
  /// Index into files() (-1 when there are none).
  int selected() const { return selected_; }
  const EvalFile* selected_file() const { return selected_ >= 0 ? &files_[static_cast<size_t>(selected_)] : nullptr; }
  void select(int index);
  /// The newest evaluation older than files()[index] that parsed and has the same position buckets
  /// (the one before it, to compare losses with), or -1.
  int older_alike(int index) const;
  /// now_s of the last look.
  double scanned_at() const { return scanned_at_; }

 private:
  std::string run_dir_;
  bool scanned_ = false, has_checkpoint_ = false, dir_exists_ = false;
  double scanned_at_ = 0;
  std::vector<EvalFile> files_;
  int selected_ = -1;
};

/// The commands that give `run_dir` an evaluation of `cfg`'s model, one a line: `odyssey train
/// PRESET --out RUN_DIR` first when the directory holds no checkpoint, then `odyssey eval RUN_DIR
/// --data HELDOUT.odoc --seq-len N` (N the config's training.seq_len), with `--tokenizer
/// TOKENIZER.json` when the model names no model.hf_path to take the tokenizer from. HELDOUT.odoc
/// and TOKENIZER.json are the user's to fill in; paths are shell-quoted where they need it.
std::string eval_command(const RunConfig& cfg, const std::string& preset_path, const std::string& run_dir,
                         bool has_checkpoint);

/// The needle heatmap's colour for an accuracy in [0, 1], as odyssey eval's needle.png draws it
/// (red 0 -> yellow 0.5 -> green 1): 0xAABBGGRR, opaque (ImGui's IM_COL32 layout).
uint32_t accuracy_color(double accuracy);

}  // namespace odyssey::studio
