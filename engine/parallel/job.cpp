// run_job: one Trainer per rank over threads, torchrun or emulation, with per-step peaks of every
// rank gathered to rank 0 and a collective stop flag. defines: job_mode, run_job
#include "engine/parallel/job.h"

#include <memory>

#include "engine/parallel/rank_launch.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {
namespace {

/// The loop of one rank: steps, the collective stop decision, the peaks gathered to rank 0.
void run_rank(const RunConfig& cfg, const RankContext& ctx, int64_t steps, const JobHooks& hooks) {
  Trainer trainer(cfg, ctx);
  if (hooks.on_rank_start) hooks.on_rank_start(ctx.rank, trainer);
  at::Tensor flag, peaks;
  {
    CategoryScope category(MemCategory::Other);
    flag = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(ctx.device));
    peaks = at::zeros({2LL * ctx.world_size}, at::TensorOptions().dtype(at::kDouble).device(ctx.device));
  }
  for (int64_t i = 0; i < steps; ++i) {
    flag.fill_(ctx.rank == 0 && hooks.should_stop && hooks.should_stop() ? 1.0 : 0.0);
    ctx.world->all_reduce_max(flag);
    if (flag.item<float>() > 0) break;
    const StepResult r = trainer.step();
    // Every rank's peaks to rank 0 (an all-gather: two doubles per rank, exact below 2^53 bytes).
    at::Tensor mine = at::tensor({static_cast<double>(r.device_peak), static_cast<double>(r.host_peak)},
                                 at::TensorOptions().dtype(at::kDouble).device(ctx.device));
    ctx.world->all_gather(peaks, mine);
    if (ctx.rank != 0 || !hooks.on_step) continue;
    JobStep step;
    step.result = r;
    step.loss_meaningful = !ctx.emulated;
    const at::Tensor host = peaks.cpu();
    const int reported = ctx.emulated ? 1 : ctx.world_size;  // emulation: the other ranks do not exist
    for (int k = 0; k < reported; ++k) {
      step.rank_peak_bytes.push_back(static_cast<int64_t>(host[2 * k].item<double>()));
      step.rank_host_peak_bytes.push_back(static_cast<int64_t>(host[2 * k + 1].item<double>()));
    }
    hooks.on_step(step);
  }
  if (hooks.on_rank_end) hooks.on_rank_end(ctx.rank, trainer);
}

}  // namespace

JobMode job_mode(const ParallelConfig& parallel) {
  if (torchrun_env().has_value()) return JobMode::Torchrun;
  return parallel.emulate ? JobMode::Emulated : JobMode::Threads;
}

const char* to_string(JobMode mode) {
  switch (mode) {
    case JobMode::Threads: return "threads";
    case JobMode::Torchrun: return "torchrun";
    case JobMode::Emulated: return "emulated";
  }
  return "?";
}

void run_job(const RunConfig& cfg, int64_t steps, const JobHooks& hooks) {
  const JobMode mode = job_mode(cfg.parallel);
  if (mode == JobMode::Torchrun) {
    const TorchrunEnv env = *torchrun_env();
    configure_threads(1);
    const at::Device device = resolve_device(cfg.training.device, env.local_rank);
    RankContext ctx = join_torchrun(env, cfg.parallel, device);
    RankScope rank(ctx.rank);
    run_rank(cfg, ctx, steps, hooks);
    return;
  }
  if (mode == JobMode::Emulated) {
    // The intra-op threads one rank of the real job gets here (CPU kernels size scratch per thread).
    configure_threads(static_cast<int>(cfg.parallel.world_size));
    ParallelConfig one;  // a single thread, bound to rank 0 like a real rank thread
    run_rank_threads(one, at::kCPU, [&](RankContext&) {
      const RankContext ctx = make_emulated_rank_context(cfg.parallel, resolve_device(cfg.training.device, 0));
      run_rank(cfg, ctx, steps, hooks);
    });
    return;
  }
  configure_threads(static_cast<int>(cfg.parallel.world_size));
  const at::Device device = resolve_device(cfg.training.device, 0);
  run_rank_threads(cfg.parallel, device, [&](RankContext& ctx) { run_rank(cfg, ctx, steps, hooks); });
}

}  // namespace odyssey
