// A training job over all its ranks, however they run: in-process rank threads, one process of a
// torchrun job, or rank 0 alone under rank emulation. One Trainer per rank; per step, rank 0 sees
// the global loss and every rank's device and host peaks. What `odyssey train` and the Session
// call. defines: JobMode, job_mode, JobStep, JobHooks, run_job
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/train/trainer.h"

namespace odyssey {

enum class JobMode {
  Threads,   ///< parallel.world_size rank threads in this process (HashStore, Gloo/NCCL)
  Torchrun,  ///< this process is one rank of a torchrun job (RANK, WORLD_SIZE, ... in the env)
  Emulated,  ///< parallel.emulate: rank 0 of the job alone, collectives are stand-ins
};
/// Torchrun when RANK/WORLD_SIZE are set, else Emulated when parallel.emulate, else Threads.
JobMode job_mode(const ParallelConfig& parallel);
const char* to_string(JobMode mode);

/// One finished step of the job, as rank 0 reports it.
struct JobStep {
  StepResult result;                      ///< rank 0's StepResult (loss and grad norm are global)
  std::vector<int64_t> rank_peak_bytes;   ///< device peak of every rank (emulated: rank 0 only)
  std::vector<int64_t> rank_host_peak_bytes;
  bool loss_meaningful = true;            ///< false under rank emulation
};

struct JobHooks {
  /// Every rank, once its Trainer exists (attach trace sinks, read notes). Runs on the rank's thread.
  std::function<void(int rank, Trainer& trainer)> on_rank_start;
  /// Rank 0 of the job (in this process, or the torchrun process with RANK=0), after each step.
  std::function<void(const JobStep& step)> on_step;
  /// Asked by rank 0 before each step; the answer reaches every rank (a max all-reduce), so all
  /// ranks stop at the same step boundary.
  std::function<bool()> should_stop;
  /// Every rank, after its last step, before its Trainer goes away (checkpointing, final records).
  std::function<void(int rank, Trainer& trainer)> on_rank_end;
};

/// Runs `steps` optimizer steps of `cfg` over all ranks (mode from job_mode). Threads: the first
/// failing rank's error is rethrown as RankError ("rank R: ..."), the other ranks abandoned at
/// once. Torchrun: this process's rank only; a peer's failure surfaces as a CommError naming the
/// collective. Throws std::invalid_argument for a config the ranks cannot run (world size vs
/// WORLD_SIZE, degrees).
void run_job(const RunConfig& cfg, int64_t steps, const JobHooks& hooks);

}  // namespace odyssey
