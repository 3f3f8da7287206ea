// Where a job's ranks start, however they run: parallel.world_size rank threads in this process,
// this process's rank of a torchrun job (one rank per process, peers watched through the job's
// store), or rank 0 alone under rank emulation. The one training loop (engine/train/run.h's
// run_training) and odyssey bench run on it. defines: JobMode, job_mode, runs_rank_zero, run_on_ranks,
// check_launchable
#pragma once

#include <functional>
#include <string>

#include "engine/config/run_config.h"
#include "engine/parallel/comm.h"

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

/// Throws std::invalid_argument (naming parallel.world_size, its value and the way out) when
/// this process cannot start cfg's ranks: more rank threads than the memory tracker counts per
/// process (kMaxTrackedRanks). Torchrun processes and emulation run one rank each and always
/// pass. Called before any output is written, so a refused run leaves nothing behind.
/// `command` is the odyssey command the message tells the user to run under torchrun instead
/// ("odyssey train PRESET", "odyssey eval RUN_DIR ...").
void check_launchable(const RunConfig& cfg, const std::string& command);

/// True when rank 0 of the job runs in this process (every mode but a torchrun process with
/// RANK != 0): the process that reports the run and writes its outputs.
bool runs_rank_zero();

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
/// check_launchable's.
void run_on_ranks(const RunConfig& cfg, const std::string& command, const std::function<void(RankContext&)>& fn);

}  // namespace odyssey
