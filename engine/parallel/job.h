// Where a job's ranks start, however they run: parallel.world_size rank threads in this process,
// this process's rank of a torchrun job (one rank per process, peers watched through the job's
// store), or rank 0 alone under rank emulation. The one training loop (engine/train/run.h's
// run_training) and odyssey bench run on it. defines: JobMode, job_mode, runs_rank_zero, RankRefused,
// JobStart, refuse_torchrun_start, run_on_ranks, RankFailedOnInput, check_launchable
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "engine/config/run_config.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/rank_launch.h"

namespace c10d {
class Store;
}

namespace odyssey {

enum class JobMode {
  Threads,   ///< parallel.world_size rank threads in this process (HashStore, Gloo/NCCL)
  Torchrun,  ///< this process is one rank of a torchrun job (RANK, WORLD_SIZE, ... in the env)
  Emulated,  ///< parallel.emulate: rank 0 of the job alone, collectives are stand-ins
};
/// Torchrun when RANK/WORLD_SIZE are set, else Emulated when parallel.emulate, else Threads.
/// Throws std::invalid_argument naming a malformed torchrun variable.
JobMode job_mode(const ParallelConfig& parallel);
const char* to_string(JobMode mode);

/// Throws std::invalid_argument (naming the key, its value and the way out) when this process
/// cannot start cfg's ranks: training.device = "cuda" without a CUDA device (in every mode), or
/// more rank threads than the memory tracker counts per process (kMaxTrackedRanks) or than there
/// are GPUs. Called before any output is written, so a refused run leaves nothing behind.
/// `command` is the odyssey command the message tells the user to run under torchrun instead
/// ("odyssey train PRESET", "odyssey eval RUN_DIR ...").
void check_launchable(const RunConfig& cfg, const std::string& command);

/// True when rank 0 of the job runs in this process (every mode but a torchrun process with
/// RANK != 0): the process that reports the run and writes its outputs.
bool runs_rank_zero();

/// Another process of this torchrun job refused to start (JobStart::agree): its rank, its reason,
/// and whether that process classed it as the input's fault (exit 2) or the run's (exit 1).
class RankRefused : public std::runtime_error {
 public:
  RankRefused(int rank, const std::string& reason, bool bad_input)
      : std::runtime_error("rank " + std::to_string(rank) + " refused to start: " + reason),
        rank(rank),
        bad_input(bad_input) {}
  int rank;
  bool bad_input;
};

/// The processes of a torchrun job (WORLD_SIZE > 1) agreeing, before any of them writes or starts,
/// that every one can: at the same points, in the same order, each posts its verdict in the job's
/// store and reads everyone's. A refusal that only one process can see (rank 0's checks of --out
/// and its lock, a file that another node lacks) then ends every process at once with that
/// reason, where the others used to wait for the refusing process on the store or in a collective
/// until parallel.timeout_s. Outside torchrun (rank threads, emulation, one process) it holds
/// nothing, and `agree` returns or rethrows at once.
///   JobStart start(cfg);                       // connects this process to the job's store
///   start.agree(own_refusal, bad_input);       // every process, at the same points
///   run_on_ranks(cfg, command, fn, &start);    // joins the job over the same store
class JobStart {
 public:
  /// Under torchrun with WORLD_SIZE > 1, the job this process belongs to; its store is connected
  /// at the first agreement point. Throws std::invalid_argument for a malformed torchrun variable,
  /// a WORLD_SIZE other than parallel.world_size or a bad parallel.timeout_s: every process alike.
  explicit JobStart(const RunConfig& cfg);
  /// The process of rank env.rank in a job of env.world_size (nothing when 1).
  JobStart(const TorchrunEnv& env, std::chrono::milliseconds timeout);

  /// How long a refusing process waits for the job's store before it gives up telling the others.
  static constexpr std::chrono::milliseconds kRefusalWait{30000};
  ~JobStart();
  JobStart(const JobStart&) = delete;
  JobStart& operator=(const JobStart&) = delete;

  /// `refusal`: this process's own (null: it can start), `bad_input` its class. A refusal is
  /// posted (refuse) and rethrown. Otherwise connects the store if not yet (CommError when it
  /// cannot), and returns once every process posted and none refused, or throws RankRefused for
  /// the lowest rank that refused. Every wait is bounded by parallel.timeout_s; a process that
  /// never posts (it ended before this point) is named in the CommError. A process whose RANK
  /// another process of the job claimed first throws std::invalid_argument naming it, and posts
  /// nothing: the job goes on with the first.
  void agree(const std::exception_ptr& refusal, bool bad_input);

  /// What this process runs, which every process of the job must run alike (its config as a
  /// preset, and the options of its command line that shape the job: --out, --steps, --resume),
  /// compared at the next agreement point where no process refused: the lowest rank whose text
  /// differs from rank 0's is refused as bad input, in every process alike, with
  /// `describe(rank 0's text, that rank's text)` as the reason. Ranks running other shapes crashed
  /// in Gloo (a size mismatch), other values trained in silence, other --out folders split a
  /// checkpoint between them.
  void expect_same(std::string text, std::function<std::string(const std::string&, const std::string&)> describe);

  /// This process refuses at the next agreement point, with `reason` and its class, for a caller
  /// whose refusal is caught later than the point where it would call agree. Rank 0 returns once
  /// every process has read it (its process may serve the store), at most parallel.timeout_s; a
  /// store not reached within kRefusalWait is given up. Never throws.
  void refuse(const std::string& reason, bool bad_input) noexcept;

  /// The job's store once an agreement point connected it; null before, and outside a torchrun
  /// job of several processes.
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

 private:
  void join(const TorchrunEnv& env, std::chrono::milliseconds timeout);
  /// Connects the store (once, waiting at most `wait`) and claims this process's rank in it; false
  /// when another process claimed the rank first (a duplicate RANK).
  bool connect(std::chrono::milliseconds wait);
  std::string duplicate_message() const;
  std::string store_address() const;           ///< "MASTER_ADDR:MASTER_PORT", for messages
  std::string next_round();                    ///< "odyssey/start/<n>/", n counting the points
  void acknowledge(const std::string& round);  ///< a refusal was seen: count this process out

  std::optional<TorchrunEnv> env_;  ///< set for a torchrun job of several processes
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_ = 0, world_size_ = 1, round_ = 0;
  bool duplicate_ = false;  ///< another process of the job claimed this rank first
  std::string same_text_;   ///< expect_same's text, until an agreement point compared it
  std::function<std::string(const std::string&, const std::string&)> describe_difference_;
  std::chrono::milliseconds timeout_{0};
};

/// For a refusal found before the job's config is known (a command's own reading of its inputs):
/// tells the other processes of this torchrun job at their first agreement point, as
/// JobStart::refuse does, waiting at most JobStart::kRefusalWait. Nothing outside torchrun; never
/// throws.
void refuse_torchrun_start(const std::string& reason, bool bad_input) noexcept;

/// Runs `fn` once per rank of `cfg` that lives in this process, with that rank's context (device,
/// groups, the memory tracker's RankScope bound):
///  - Threads: one thread per rank; a failing rank ends the others' collectives at once and its
///    exception is rethrown here with its type (the first rank that failed).
///  - Torchrun: this process's rank. A rank whose `fn` throws declares its failure in the job's
///    store, which ends the other processes' pending collectives ("abandoned: rank R failed: ...").
///    A collective that fails here (CommError) is rethrown with its cause appended: the rank that
///    declared a failure, the rank whose process went silent (killed, crashed, hung), or rank 0
///    when the store it serves is gone. No hang: every wait is bounded by parallel.timeout_s.
///  - Emulated: rank 0 alone (one thread) over EmulatedComm groups.
/// Intra-op threads are set for the ranks sharing this machine (configure_threads). `command`: as
/// check_launchable's. `start`: the JobStart this process agreed through, whose store a torchrun
/// process joins the job over (null: it connects its own).
/// `bad_input` classes a rank's failure as the input's fault (exit 2) or the run's (exit 1): under
/// torchrun the failing process declares its class, and the others' collectives that failed for
/// it end in RankFailedOnInput where it was the input's, so every process exits alike.
void run_on_ranks(const RunConfig& cfg, const std::string& command, const std::function<void(RankContext&)>& fn,
                  const JobStart* start = nullptr,
                  const std::function<bool(const std::exception_ptr&)>& bad_input = nullptr);

/// A collective of this torchrun process failed because another process failed on bad input (a
/// corrupt checkpoint shard of its rank, a data file that only its host reads): the job's exit
/// class is that process's, the input's (2).
class RankFailedOnInput : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace odyssey
