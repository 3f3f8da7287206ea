// parallel_bench: interleaved step timing of plain Ulysses, Ulysses + FSDP and Untied Ulysses at
// each stage size on one set of rank threads. defines: parallel_bench
#include "engine/parallel/parallel_bench.h"

#include <algorithm>
#include <mutex>

#include "engine/config/validate.h"
#include "engine/parallel/rank_launch.h"
#include "engine/train/trainer.h"

namespace odyssey {

std::vector<ParallelBenchRow> parallel_bench(RunConfig cfg, int rounds) {
  if (cfg.parallel.ulysses_degree == 1) cfg.parallel.ulysses_degree = cfg.parallel.world_size;
  cfg.parallel.emulate = false;
  struct Variant {
    std::string name;
    bool fsdp = false;
    MemoryConfig memory;
  };
  std::vector<Variant> variants;
  MemoryConfig plain = cfg.memory;
  plain.untied_ulysses = false;
  variants.push_back({"ulysses", false, plain});
  variants.push_back({"ulysses+fsdp", true, plain});
  for (int64_t hps : valid_heads_per_stage(cfg)) {
    MemoryConfig m = cfg.memory;
    m.untied_ulysses = true;
    m.heads_per_stage = hps;
    variants.push_back({"untied hps=" + std::to_string(hps), false, m});
  }
  const int W = static_cast<int>(cfg.parallel.world_size);
  std::vector<std::vector<double>> times(variants.size());
  std::mutex mutex;
  configure_threads(W);
  run_rank_threads(cfg.parallel, resolve_device(cfg.training.device, 0), [&](RankContext& ctx) {
    RunConfig with_fsdp = cfg, without = cfg;
    with_fsdp.parallel.fsdp = true;
    without.parallel.fsdp = false;
    Trainer sharded(with_fsdp, ctx), replicated(without, ctx);
    for (int round = 0; round <= rounds; ++round) {
      for (size_t v = 0; v < variants.size(); ++v) {
        Trainer& t = variants[v].fsdp ? sharded : replicated;
        t.set_memory(variants[v].memory);
        ctx.world->barrier();  // every variant starts together on every rank
        const StepResult r = t.step();
        std::lock_guard<std::mutex> lock(mutex);
        if (round > 0 && ctx.rank == 0) times[v].push_back(r.step_time_s);  // round 0 warms up
      }
    }
  });
  std::vector<ParallelBenchRow> rows;
  for (size_t v = 0; v < variants.size(); ++v) {
    std::vector<double> t = times[v];
    std::sort(t.begin(), t.end());
    ParallelBenchRow row;
    row.name = variants[v].name;
    row.median_step_s = t.empty() ? 0 : t[t.size() / 2];
    rows.push_back(row);
  }
  for (auto& row : rows) row.ratio = rows[0].median_step_s > 0 ? row.median_step_s / rows[0].median_step_s : 1;
  return rows;
}

}  // namespace odyssey
