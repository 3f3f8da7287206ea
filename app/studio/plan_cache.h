// The plan panel's cache: the planner's prediction for one config, recomputed only when the config
// changes. The memory plan itself (well under a millisecond) is computed in the frame of the edit;
// the ladder, the max-context solve, the advisor and the tuner (tens of milliseconds for 32-64-layer
// models) run on a worker thread, latest config wins, so the UI never waits for them; the tune
// button applies the tuner's choice. A documents file's lengths reach the planner through the
// reader the executable sets (set_document_lengths_reader). defines: PlanResult, PlanCache,
// apply_tuned_memory, DocumentLengthsReader, set_document_lengths_reader
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/layout/documents.h"
#include "engine/planner/planner.h"

namespace odyssey::studio {

/// Everything the plan panel shows for one config.
struct PlanResult {
  bool ok = false;    ///< false when the config is invalid or the planner threw
  std::string error;  ///< why not
  MemoryPlan plan;
  double compute_ms = 0;  ///< plan_memory's time (in the frame)
  // Computed in the background; valid for this config once extras_ready.
  bool extras_ready = false;
  std::string extras_error;
  std::vector<LadderRung> ladder;
  int64_t max_seq_len = 0;           ///< for the config as edited
  MaxSeqLenLimit max_seq_len_limit;  ///< what stops it (max_seq_len_limit)
  std::vector<Advice> advice;        ///< only when the plan does not fit
  TuneResult tune;                   ///< the fastest memory table that fits, and the runner-up
  double extras_ms = 0;
};

/// The plan panel's "Tune: fastest that fits": `edited` with its [memory] table replaced by the
/// tuner's choice (tune(), engine/planner/planner.h), every other table as it was, so a running
/// engine gets it like any memory edit (RunDriver::sync: at the next step). `tuned` must be the
/// tune of `edited` itself. *message says what changed; false, and `edited` untouched, when the
/// tune is of another config, nothing fits, or the memory already is the choice.
bool apply_tuned_memory(RunConfig& edited, const TuneResult& tuned, std::string* message);
/// Why the tune has no choice: nothing fits even with the most memory techniques, or what fits by
/// the plan leaves less than the tuner's headroom free (its lowest peak and verdict).
std::string tune_refusal(const TuneResult& tuned);

/// Reads a documents file's lengths (engine/train's read_document_lengths: PATH, the model's
/// vocabulary), throwing a std::exception that names what is wrong with the file.
using DocumentLengthsReader =
    std::function<std::shared_ptr<const DocumentLengthProfile>(const std::string& path, int64_t vocab_size)>;
/// The reader every PlanCache uses for a config with training.document_mask over training.dataset
/// = "documents", as `odyssey plan` reads the file (again at an edit when the file changed since;
/// the read runs in the frame of the edit): the planner then counts each document's
/// attention and the longest segment's buffers. The studio's executable sets it at start-up
/// (studio_core links no engine/train); without one such a config is not planned, and the plan's
/// error says why.
void set_document_lengths_reader(DocumentLengthsReader reader);

class PlanCache {
 public:
  /// `with_extras` = false: only the memory plan (the timeline's planned overlay needs no ladder).
  explicit PlanCache(bool with_extras = true) : with_extras_(with_extras) {}
  ~PlanCache();
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  /// The result for `cfg`: the plan is fresh; the extras are fresh once `extras_ready`, until
  /// then they are the previous config's (the panel says so).
  const PlanResult& get(const RunConfig& cfg);
  /// Forgets the cached result (the next get() recomputes).
  void invalidate() { valid_ = false; }
  /// Number of plan computations so far (tests, the panel's footer).
  uint64_t computations() const { return computations_; }
  /// True while the background work for the current config is not yet in the result.
  bool extras_pending() const { return valid_ && result_.ok && with_extras_ && !result_.extras_ready; }
  /// Blocks until the extras for the current config are in (tests, screenshots).
  void wait_for_extras();

 private:
  struct Extras {
    uint64_t generation = 0;
    std::string error;
    std::vector<LadderRung> ladder;
    int64_t max_seq_len = 0;
    MaxSeqLenLimit max_seq_len_limit;
    std::vector<Advice> advice;
    TuneResult tune;
    double ms = 0;
  };
  void worker_loop();
  void collect();  // moves finished extras into result_
  /// `cfg` with its documents file's lengths where the planner needs them; false with
  /// result_.error set when the file cannot be read.
  bool with_document_lengths(RunConfig& cfg);

  const bool with_extras_;
  bool valid_ = false;
  RunConfig key_;
  PlanResult result_;
  uint64_t computations_ = 0;
  uint64_t generation_ = 0;
  // The last documents file read: its path, vocabulary, size and modification time, and lengths
  // (each edit replans; the file is read again only when it changed).
  std::string lengths_key_;
  std::shared_ptr<const DocumentLengthProfile> lengths_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<std::pair<uint64_t, RunConfig>> job_;  // latest request
  std::optional<Extras> done_;                         // latest finished
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace odyssey::studio
