// The rooms of one rank's step loop (train_rank in run.cpp): the step boundary every rank decides
// together, the step's report to rank 0's outputs, and the checkpoint cadence. Internal to engine/train.
// defines: RunShared, describe_memory, StepBoundary, StepReporter, CheckpointCadence
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/telemetry/metrics_jsonl.h"
#include "engine/telemetry/phase_peaks.h"
#include "engine/telemetry/summary.h"
#include "engine/telemetry/trace_writer.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/run.h"
#include "engine/train/step_records.h"

namespace odyssey {

/// What one run shares between the ranks of this process. The outputs exist only in the process
/// that runs rank 0 (a torchrun process with RANK != 0 writes checkpoints only).
struct RunShared {
  bool reports = true;              ///< rank 0 runs here: outputs, log, RunOutcome's metrics
  bool separate_processes = false;  ///< torchrun: each rank's RunOutcome is its own process's
  /// The checkpoint this run resumes from, read once for every rank of this process (unset: fresh).
  std::optional<CheckpointInfo> resume;
  /// The tokenizer files every checkpoint carries (rank 0 writes them): model.hf_path's, or on a
  /// resume without one the resumed checkpoint's. Read once before any output is written.
  std::vector<CarriedFile> tokenizer_files;
  std::unique_ptr<MetricsJsonlWriter> metrics;
  std::unique_ptr<TraceWriter> trace;
  /// summary.json: every rank's phases (gathered to rank 0; a failed step's from each rank of this
  /// process that could not report it). Thread-safe.
  PhasePeakTable run_peaks;
  std::string collective_backend;  ///< summary.json: rank 0's world group's (Comm::backend), set by rank 0
  /// summary.json's "ranks": the run peak of each rank of this process, with the categories at
  /// it (every rank under rank threads; a torchrun process its own), appended as each rank ends.
  std::mutex rank_peaks_mutex;
  std::vector<RankPeak> rank_peaks;
  /// When run_training began, and summary.json's "setup_s": the seconds from then to the start of
  /// this process's first step (set by rank 0's thread; negative until a step starts).
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  double setup_s = -1;
  /// A resume in its own directory: the earlier process's summary.json, removed by rank 0 as the
  /// first step starts (stale from then on; a resume refused later puts it back). Empty: none.
  std::string stale_summary;
};

using RunLog = std::function<void(const std::string&)>;

/// The memory techniques `memory` turns on for `cfg`'s run, as the registry names them.
std::string describe_memory(const RunConfig& cfg, const MemoryConfig& memory);

/// The step boundary, decided for all ranks at once by a max all-reduce of {stop, pause, version}:
/// any rank's stop request counts (each torchrun process has its own Ctrl-C); pause and the live
/// toggles' version come from rank 0 (the Session's control).
class StepBoundary {
 public:
  StepBoundary(const RankContext& ctx, RunControl* control, RunLog log);
  /// Waits out pauses and applies newer live memory toggles to `trainer`; false when the run stops.
  bool next(Trainer& trainer, const RunConfig& cfg);
  /// The version of the live toggles the next step runs with (0: the config's own).
  int64_t config_version() const { return config_version_; }
  /// Once next() returned false: the signal that stopped the job, in whichever process it came
  /// (the highest of those that came at this boundary); 0 for a stop not from a signal.
  int stop_signal() const { return stop_signal_; }

 private:
  const RankContext& ctx_;
  RunControl* control_;
  RunLog log_;
  at::Tensor decision_;  ///< [3] int64: stop (1, or the stopping signal's number + 1), pause, version
  int64_t config_version_ = 0;
  int stop_signal_ = 0;
};

/// After each step: every rank's device and host peaks and phase records go to rank 0, which
/// builds the step's StepMetrics and writes metrics.jsonl, the trace, the Timeline and the outcome.
class StepReporter {
 public:
  StepReporter(const RunConfig& cfg, const RankContext& ctx, const RunOptions& opt, RunShared& shared,
               PhaseRecorder& recorder);
  /// Whether the next step is traced (the first output.trace_steps of this process); starts
  /// capturing its memory edges when it is.
  bool begin_step();
  /// The step's report (a collective: every rank calls it after every step).
  void report(const StepResult& r, int64_t config_version, RunOutcome& out);
  /// A step that threw, here or on another rank (report() calls it when its collective fails):
  /// this rank's phases of it (those closed by the exception marked "unwound") go to the trace,
  /// also past output.trace_steps, and to summary.json's phase table, without a collective (the
  /// other ranks may be failing or waiting); the trace is flushed. Only where this process writes
  /// the outputs (under torchrun: rank 0's). Never throws.
  void report_failed_step() noexcept;

 private:
  /// report_failed_step's writing, also for records report() took before its gather failed.
  void write_unreported(RankStepRecords own) noexcept;

  const RunConfig& cfg_;
  const RankContext& ctx_;
  const RunOptions& opt_;
  RunShared& shared_;
  PhaseRecorder& recorder_;
  bool collect_ = false;  ///< every rank's records go to rank 0 (there are outputs to write)
  bool trace_ = false;
  bool traced_ = false;  ///< the step in flight is traced
  int64_t steps_run_ = 0;
  double flops_per_token_ = 0, peak_flops_ = 0;
  int reported_ranks_ = 1;
  EdgeBuffer edges_;
  at::Tensor peaks_;  ///< [W x 2] double: device and host peak per rank
};

/// Checkpoints every output.checkpoint_every steps and at the end (every rank its shard).
class CheckpointCadence {
 public:
  CheckpointCadence(const RunConfig& cfg, const RunOptions& opt, const RunShared& shared, RunLog log);
  /// After a step: a checkpoint when the cadence falls here (not on the last step: at_end writes it).
  void after_step(Trainer& trainer, int64_t total_steps);
  /// At the run's end (its last step, or a stop): a checkpoint unless the cadence
  /// wrote this very step (a stop right after one), which would write the same state again.
  void at_end(Trainer& trainer);

 private:
  int64_t every_ = 0;
  int64_t saved_step_ = -1;  ///< the step after_step last saved
  bool enabled_ = false;
  std::string dir_;
  const std::vector<CarriedFile>& carried_;
  TraceWriter* trace_ = nullptr;           ///< flushed at each checkpoint (null: no trace)
  MetricsJsonlWriter* metrics_ = nullptr;  ///< synced to the disk before each checkpoint (null: none)
  RunLog log_;
};

}  // namespace odyssey
