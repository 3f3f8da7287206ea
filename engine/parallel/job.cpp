// The rank-launch seam: threads, torchrun (with the peer watch) or emulation, with the first
// failing rank's exception kept with its type. defines: job_mode, runs_rank_zero, run_on_ranks
#include "engine/parallel/job.h"

#include <exception>
#include <mutex>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "engine/parallel/devices.h"
#include "engine/parallel/peer_watch.h"
#include "engine/parallel/rank_launch.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {
namespace {

// This process's rank of a torchrun job, its peers watched through the job's store.
void run_torchrun_rank(const RunConfig& cfg, const TorchrunEnv& env, const std::function<void(RankContext&)>& fn) {
  configure_threads(1);
  TorchrunRank joined = join_torchrun_rank(env, cfg.parallel, resolve_device(cfg.training.device, env.local_rank));
  RankScope rank(joined.ctx.slot);  // slot 0: the one rank of this process, whatever its global rank
  std::unique_ptr<PeerWatch> watch;
  if (joined.store)
    watch = std::make_unique<PeerWatch>(joined.store, env.rank, env.world_size, joined.abort,
                                        env.master_addr + ":" + std::to_string(env.master_port));
  try {
    fn(joined.ctx);
  } catch (const CommError& e) {
    // A collective failed here: some other rank caused it. Name it (this may wait kSilence).
    const PeerWatch::Culprit culprit = watch ? watch->diagnose() : PeerWatch::Culprit{};
    const std::string what = e.what();
    if (culprit.rank < 0 ||
        what.find("abandoned: rank " + std::to_string(culprit.rank) + " failed") != std::string::npos)
      throw;  // nobody else to blame, or the message already names the rank
    throw CommError(what + "; cause: " + culprit.text);
  } catch (const std::exception& e) {
    if (watch) watch->declare_failure(e.what());  // before this process's groups go away
    throw;
  }
}

}  // namespace

JobMode job_mode(const ParallelConfig& parallel) {
  if (torchrun_env().has_value()) return JobMode::Torchrun;
  return parallel.emulate ? JobMode::Emulated : JobMode::Threads;
}

const char* to_string(JobMode mode) {
  switch (mode) {
    case JobMode::Threads:
      return "threads";
    case JobMode::Torchrun:
      return "torchrun";
    case JobMode::Emulated:
      return "emulated";
  }
  return "?";
}

void check_launchable(const RunConfig& cfg, const std::string& command) {
  if (job_mode(cfg.parallel) != JobMode::Threads) return;
  if (cfg.parallel.world_size > 1 && cfg.training.device != DeviceKind::Cpu) {
    const at::Device device = resolve_device(cfg.training.device, 0);
    const int gpus = device.is_cuda() ? prepare_cuda().device_count : 0;
    if (device.is_cuda() && cfg.parallel.world_size > gpus)
      throw std::invalid_argument(
          "parallel.world_size = " + std::to_string(cfg.parallel.world_size) + " rank threads on " +
          std::to_string(gpus) + " GPU" + (gpus == 1 ? "" : "s") +
          ": rank threads of one process cannot share a GPU (autograd runs every rank's backward on the "
          "GPU's one worker thread, where one rank's collective would wait for another's forever); run "
          "the ranks as processes, which share it over Gloo: torchrun --nproc-per-node " +
          std::to_string(cfg.parallel.world_size) + " --no-python " + command);
  }
  if (cfg.parallel.world_size <= kMaxTrackedRanks) return;
  throw std::invalid_argument("parallel.world_size = " + std::to_string(cfg.parallel.world_size) +
                              ": one process runs at most " + std::to_string(kMaxTrackedRanks) +
                              " rank threads (the memory tracker's counters per process); run more ranks "
                              "under torchrun (one process each) or measure rank 0 with parallel.emulate = true");
}

bool runs_rank_zero() {
  const auto env = torchrun_env();
  return !env || env->rank == 0;
}

void run_on_ranks(const RunConfig& cfg, const std::string& command, const std::function<void(RankContext&)>& fn) {
  const JobMode mode = job_mode(cfg.parallel);
  if (mode == JobMode::Torchrun) return run_torchrun_rank(cfg, *torchrun_env(), fn);
  check_launchable(cfg, command);
  // The first failing rank's exception, kept with its type (run_rank_threads reports text only).
  std::mutex mutex;
  std::exception_ptr first;
  auto guarded = [&](RankContext& ctx) {
    try {
      fn(ctx);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!first) first = std::current_exception();
      throw;  // the launcher abandons the other ranks' collectives at once
    }
  };
  configure_threads(static_cast<int>(cfg.parallel.world_size));  // also under emulation: a real rank's share
  try {
    if (mode == JobMode::Emulated) {
      ParallelConfig one;  // one thread bound to rank 0, like a real rank thread
      run_rank_threads(one, at::kCPU, [&](RankContext&) {
        RankContext ctx = make_emulated_rank_context(cfg.parallel, resolve_device(cfg.training.device, 0));
        guarded(ctx);
      });
    } else {
      run_rank_threads(cfg.parallel, resolve_device(cfg.training.device, 0), guarded);
    }
  } catch (const RankError&) {
    if (first) std::rethrow_exception(first);
    throw;
  }
}

}  // namespace odyssey
