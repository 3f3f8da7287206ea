// run_bench: interleaved rounds of one step per technique variant on one model (see bench.h).
// defines: bench_variants, run_bench, BenchVariant/BenchResult statistics
#include "engine/train/bench.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "engine/train/run.h"
#include "engine/train/trainer.h"

namespace odyssey {

double BenchVariant::median_s() const {
  if (step_s.empty()) return 0;
  std::vector<double> v = step_s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double BenchVariant::min_s() const { return step_s.empty() ? 0 : *std::min_element(step_s.begin(), step_s.end()); }
double BenchVariant::max_s() const { return step_s.empty() ? 0 : *std::max_element(step_s.begin(), step_s.end()); }

const BenchVariant* BenchResult::find(const std::string& name) const {
  for (const auto& v : variants)
    if (v.name == name) return &v;
  return nullptr;
}

double BenchResult::ratio(const BenchVariant& v) const {
  const BenchVariant* base = v.baseline.empty() ? nullptr : find(v.baseline);
  return base && base->median_s() > 0 ? v.median_s() / base->median_s() : 1.0;
}

std::pair<double, double> BenchResult::ratio_range(const BenchVariant& v) const {
  const BenchVariant* base = v.baseline.empty() ? nullptr : find(v.baseline);
  if (!base) return {1.0, 1.0};
  double lo = 1e30, hi = 0;
  for (size_t i = 0; i < std::min(v.step_s.size(), base->step_s.size()); ++i) {
    const double r = v.step_s[i] / base->step_s[i];
    lo = std::min(lo, r);
    hi = std::max(hi, r);
  }
  return {lo, hi};
}

std::vector<BenchVariant> bench_variants(const MemoryConfig& base) {
  MemoryConfig none = base;
  none.activation_checkpointing = none.offload_activations = none.tiled_mlp = none.tiled_loss = false;
  std::vector<BenchVariant> v(6);
  v[0].name = "plain";
  v[0].memory = none;
  v[1].name = "checkpointing";
  v[1].baseline = "plain";
  v[1].memory = none;
  v[1].memory.activation_checkpointing = true;
  v[2].name = "offload";
  v[2].baseline = "checkpointing";
  v[2].memory = v[1].memory;
  v[2].memory.offload_activations = true;
  v[3].name = "tiled_mlp";
  v[3].baseline = "plain";
  v[3].memory = none;
  v[3].memory.tiled_mlp = true;
  v[4].name = "tiled_loss";
  v[4].baseline = "plain";
  v[4].memory = none;
  v[4].memory.tiled_loss = true;
  v[5].name = "all";
  v[5].baseline = "plain";
  v[5].memory = v[2].memory;
  v[5].memory.tiled_mlp = v[5].memory.tiled_loss = true;
  return v;
}

BenchResult run_bench(const RunConfig& cfg, int rounds, const std::function<void(const std::string&)>& log) {
  BenchResult result;
  result.variants = bench_variants(cfg.memory);
  result.rounds = rounds;
  run_on_ranks(cfg, [&](RankContext& ctx) {
    Trainer trainer(cfg, ctx);
    const bool lead = ctx.rank == 0;  // rank 0 records; every rank steps in lockstep
    if (lead) result.threads = at::get_num_threads();
    for (int round = -1; round < rounds; ++round) {  // round -1 warms every variant up
      for (auto& v : result.variants) {
        trainer.set_memory(v.memory);
        const StepResult r = trainer.step();
        trainer.recorder().take_records();
        if (round < 0 || !lead) continue;
        v.step_s.push_back(r.step_time_s);
        v.device_peak = std::max(v.device_peak, r.device_peak);
        v.host_peak = std::max(v.host_peak, r.host_peak);
      }
      if (log && round >= 0 && lead) log("round " + std::to_string(round + 1) + "/" + std::to_string(rounds));
    }
    trainer.take_notes();
  });
  return result;
}

}  // namespace odyssey
