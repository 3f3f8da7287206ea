// A whole training run, as `odyssey train` and the studio's Session drive it: the one step loop of
// every launch mode (rank threads, torchrun processes, emulation; engine/parallel/job.h), resume,
// stop/pause/live toggles at step boundaries, metrics, trace, summary and checkpoints.
// defines: RunControl, RunOptions, RunOutcome, FullState, run_training, export_full_state,
// import_full_state
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/parallel/job.h"
#include "engine/telemetry/samples.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/trainer.h"

namespace odyssey {

class Timeline;

/// Shared by a run's rank threads and its controller (CLI signal handler, Session). Every request
/// takes effect at the next step boundary. Thread-safe.
class RunControl {
 public:
  void request_stop();
  /// Async-signal-safe form (a SIGINT handler): sets the flag and the signal only; the run sees it
  /// at the next step boundary.
  void request_stop_from_signal(int signal) {
    signal_.store(signal);
    stop_.store(true);
  }
  bool stop_requested() const { return stop_.load(); }
  /// The signal that asked this process's run to stop (0: none, or a stop not from a signal).
  int stop_signal() const { return signal_.load(); }
  /// Every rank has loaded its weights and reached the step loop: from here a stop waits for the
  /// next step boundary (and its checkpoint); before it, there is nothing to save, and a signal
  /// handler may end the process at once (`odyssey train` does).
  void mark_stepping() { stepping_.store(true); }
  bool stepping() const { return stepping_.load(); }
  void pause();
  void resume();
  bool paused() const { return paused_.load(); }
  /// Memory toggles for the following steps; `version` (increasing) is reported in StepMetrics.
  void set_memory(const MemoryConfig& memory, int64_t version);
  /// The newest version set (0: none).
  int64_t memory_version() const;
  /// The toggles of `version` (every rank applies the version rank 0 broadcast).
  MemoryConfig memory_of(int64_t version) const;
  /// Blocks while paused; false when a stop arrives. `notify` calls on_pause_change (one rank).
  bool wait_while_paused(bool notify = true);
  /// Called with true when the run enters a pause and false when it leaves it.
  std::function<void(bool)> on_pause_change;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> signal_{0};
  std::atomic<bool> stepping_{false};
  std::atomic<bool> paused_{false};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int64_t, MemoryConfig> memory_history_;
  int64_t memory_version_ = 0;
};

/// The unsharded fp32 state of a model (a restart hands it to the new run): per group, master and
/// AdamW moments over all N elements, and the step counters. Memory: held in plain host vectors,
/// outside the memory tracker: it is the session's (kept for the next restart, 12 B a parameter),
/// not a run's; as tensors it was counted in rank 0's bytes through the whole next run on the CPU.
struct FullState {
  std::map<std::string, std::vector<std::vector<float>>> groups;  ///< name -> {master, exp_avg, exp_avg_sq} [N]
  int64_t next_step = 0;
  int64_t optimizer_steps = 0;
  ModelConfig model;
};
/// Gathers every group's shards over ctx.world (collective). Rank-local result on every rank.
FullState export_full_state(Trainer& trainer);
/// Takes this rank's shards of `state`. The model shapes must match (std::invalid_argument).
void import_full_state(Trainer& trainer, const FullState& state);

struct RunOptions {
  std::string preset;  ///< preset path or name (summary.json)
  /// metrics.jsonl, trace.json, summary.json (the process running rank 0 writes them, from every
  /// rank's gathered peaks and phase records; trace: one process per rank) and checkpoints (every
  /// rank its shard); "" = none.
  std::string out_dir;
  std::string resume_dir;  ///< continue from this directory's latest checkpoint; "" = fresh
  /// The checkpoint of resume_dir as the caller read it (`odyssey train` reads it once for its
  /// banner): every rank of this process resumes from exactly this one. Unset: read here, once.
  std::optional<CheckpointInfo> resume_info;
  int64_t steps = -1;  ///< run until this many steps are done (default training.steps)
  /// out_dir may hold an earlier run (metrics.jsonl, summary.json or a checkpoint): replace its
  /// files. Without it such a directory is refused (RunDirHoldsRun), unless it is resume_dir itself.
  bool overwrite = false;
  /// Start even where the planner predicts the run does not fit its device or host memory (or,
  /// on the CPU, this machine's memory). Without it such a run is refused (PlannedOutOfMemory).
  bool force = false;
  bool checkpoints = true;  ///< write checkpoints (every output.checkpoint_every, and at the end)
  /// CUDA: record the caching allocator's history from the first step and write it here at the
  /// end (PyTorch's memory_viz pickle, Odyssey's phases as annotations); "" = none.
  std::string memory_snapshot;
  /// Profile the run's last step with Kineto (operators; on CUDA every kernel, copy and fill) and
  /// write its Chrome trace here (the process running rank 0); "" = none.
  std::string kernel_profile;
  RunControl* control = nullptr;
  Timeline* timeline = nullptr;  ///< the studio's live feed
  /// Phase times count from here (telemetry_now_s clock); < 0: the clock's zero, or under torchrun
  /// the end of a barrier of all ranks (processes do not share a clock).
  double epoch_s = -1;
  const FullState* initial_state = nullptr;           ///< start from these weights (restart)
  std::shared_ptr<FullState>* final_state = nullptr;  ///< receives the weights at the end (restart)
  /// After each step on rank 0: the metrics (step counted from 1) and rank 0's view of the step.
  std::function<void(const StepMetrics&, const StepResult&)> on_step;
  /// Log lines (rank 0): dispatch notes, data, resume, checkpoints, failures.
  std::function<void(const std::string&)> log;
  /// Whether `log` gets the failure's "error: ..." line (the studio's log does; `odyssey train`
  /// prints RunOutcome::error itself, once, on stderr).
  bool log_failure = true;
};

struct RunOutcome {
  enum class Status { Finished, Stopped, Failed };
  Status status = Status::Finished;
  bool bad_input = false;  ///< the failure is the input's (exit code 2), not the run's
  std::string error;       ///< why it failed
  int64_t next_step = 0;   ///< steps completed when it ended
  /// Stopped by a signal in any process of the job (under torchrun, another rank's): its number,
  /// the highest when several came (SIGTERM over SIGINT); 0 otherwise.
  int stop_signal = 0;
  std::vector<StepMetrics> metrics;
  std::vector<StepResult> results;  ///< rank 0's step results
};
const char* to_string(RunOutcome::Status status);

/// `--out DIR` holds another run's outputs and neither --resume DIR nor --overwrite was given:
/// bad input (exit 2); nothing was touched. The message names what is there.
class RunDirHoldsRun : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The planner predicts that the run does not fit (device, host or this machine's memory) and it
/// was not forced: bad input (exit 2), before anything is allocated. The message gives the
/// numbers and the advisor's suggestions (planned_out_of_memory, engine/planner/planner.h).
class PlannedOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Ranks whose memory this process holds: every rank thread, or one torchrun process's own rank
/// (planned_out_of_memory's second argument).
int64_t ranks_in_process(const RunConfig& cfg);

/// The run outputs in `dir` that a new run would replace ("metrics.jsonl (40 steps)", "a
/// checkpoint at step 40", "summary.json"); empty when it holds none.
std::vector<std::string> run_outputs_in(const std::string& dir);

/// Whether a refusal or failure is the input's fault (exit 2: the preset, a data file, a
/// checkpoint, the run directory, a plan that does not fit) or the run's (exit 1: a step, a
/// write, a collective). The one list for train's outcome, the refusals torchrun processes agree
/// on, and `odyssey eval`'s exit status.
bool is_bad_input(const std::exception_ptr& error);

/// Runs training for `cfg` (which must be valid) on the ranks run_on_ranks starts here. Never
/// throws: failures come back in the outcome (OOM and NaN with step and phase; bad data /
/// checkpoint files as bad_input; a peer's failure under torchrun naming the rank and the
/// collective). Under torchrun the processes agree to start (JobStart): a refusal of one process,
/// such as rank 0's of --out, is every process's, with its reason and class. A torchrun process
/// with RANK != 0 gets next_step and status only (no metrics).
/// A pause is for in-process ranks (the Session): torchrun processes other than rank 0 would wait
/// in the next boundary's collective and time out after parallel.timeout_s.
RunOutcome run_training(const RunConfig& cfg, const RunOptions& options);

}  // namespace odyssey
