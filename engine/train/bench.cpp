// run_bench: interleaved rounds of one step per technique variant on one model (see bench.h).
// The FSDP variant steps a second, sharded trainer beside the unsharded one.
// defines: bench_variants, variant_config, run_bench, BenchVariant/BenchResult statistics
#include "engine/train/bench.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <memory>

#include "engine/config/techniques.h"
#include "engine/config/validate.h"
#include "engine/parallel/job.h"
#include "engine/model/llama.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/memory_tracker.h"
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

double BenchResult::planned_ratio(const BenchVariant& v) const {
  const BenchVariant* base = v.baseline.empty() ? nullptr : find(v.baseline);
  if (!base) return 1.0;
  return v.planned_step_s > 0 && base->planned_step_s > 0 ? v.planned_step_s / base->planned_step_s : 0.0;
}

RunConfig variant_config(const RunConfig& cfg, const BenchVariant& v) {
  RunConfig out = cfg;
  out.memory = v.memory;
  out.parallel.fsdp = v.fsdp;
  return out;
}

std::vector<BenchVariant> bench_variants(const RunConfig& cfg) {
  // From the registry (engine/config/techniques.h): "plain" with every memory toggle off, then one
  // variant per memory toggle measured against what it requires ("offload" against
  // "checkpointing") or plain, "all" of them, FSDP when there are ranks to shard over, and Untied
  // Ulysses at each valid stage size.
  auto memory_toggle = [](const Technique& t) { return t.toggle && t.id != TechniqueId::Fsdp; };
  RunConfig none = cfg;
  for (const Technique& t : kTechniques)
    if (memory_toggle(t)) *technique_flag(none, t.id) = false;
  // Keeping attention is a choice within checkpointing, not a technique of its own: every variant
  // checkpoints plainly, and a preset that keeps attention gets the row "keep_attention" against
  // "checkpointing" (its kept attention offloaded too where the preset offloads it).
  none.memory.keep_attention = none.memory.offload_kept_attention = false;
  auto variant = [&](std::string name, std::string baseline, const RunConfig& with, bool fsdp = false) {
    BenchVariant v;
    v.name = std::move(name);
    v.baseline = std::move(baseline);
    v.memory = with.memory;
    v.fsdp = fsdp;
    return v;
  };
  std::vector<BenchVariant> v{variant("plain", "", none)};
  RunConfig all = none;
  for (const Technique& t : kTechniques) {
    if (!memory_toggle(t) || t.id == TechniqueId::UntiedUlysses) continue;
    RunConfig with = none;
    *technique_flag(with, t.id) = true;
    std::string baseline = "plain";
    if (t.requires_on) {
      *technique_flag(with, *t.requires_on) = true;
      baseline = technique(*t.requires_on).name;
    }
    v.push_back(variant(t.name, baseline, with));
    *technique_flag(all, t.id) = true;
  }
  v.push_back(variant("all", "plain", all));
  if (cfg.memory.keep_attention && cfg.memory.activation_checkpointing) {
    RunConfig kept = none;
    kept.memory.activation_checkpointing = kept.memory.keep_attention = true;
    kept.memory.offload_activations = kept.memory.offload_kept_attention = cfg.memory.offload_kept_attention;
    v.push_back(variant("keep_attention", technique(TechniqueId::Checkpointing).name, kept));
  }
  if (cfg.parallel.world_size > 1)
    v.push_back(variant(technique(TechniqueId::Fsdp).name, "plain", none, /*fsdp=*/true));
  if (cfg.parallel.ulysses_degree > 1 || cfg.memory.untied_ulysses) {
    for (int64_t hps : valid_heads_per_stage(cfg)) {
      RunConfig untied = none;
      untied.memory.untied_ulysses = true;
      untied.memory.heads_per_stage = hps;
      v.push_back(variant("untied_hps=" + std::to_string(hps), "plain", untied));
    }
  }
  return v;
}

BenchResult run_bench(const RunConfig& cfg, int rounds, const std::function<void(const std::string&)>& log,
                      bool force) {
  BenchResult result;
  result.variants = bench_variants(cfg);
  // The planner's word for each variant, beside what it measures (a config the planner refuses
  // keeps 0, printed as "-": the measurement stands without it).
  for (auto& v : result.variants) {
    try {
      v.planned_step_s = plan_step_time(variant_config(cfg, v)).step_s;
    } catch (const std::exception& e) {
      v.planned_step_s = 0;
      v.planned_error = e.what();
    }
  }
  // Nothing is started that the planner says cannot fit, as `odyssey train` refuses it: the OOM
  // killer or LibTorch's raw allocation failure mid-step would be the only answer otherwise. Every
  // variant runs, "plain" (no memory technique: the most memory) included. A variant the planner
  // cannot plan is measured as it is (its planned_error). A layout this process cannot launch (more
  // rank threads than it runs) is said first: no memory would make it run.
  check_launchable(cfg, "odyssey bench PRESET");
  for (const auto& v : result.variants) {  // each variant is a config `odyssey check` would pass
    const std::vector<ConfigIssue> issues = validate(variant_config(cfg, v));
    if (!issues.empty())
      throw std::invalid_argument("the variant \"" + v.name + "\" of this preset breaks a rule: " +
                                  issues.front().format() + " (bench sets each variant's memory techniques itself)");
  }
  for (const auto& v : result.variants) {
    if (force) break;
    std::string why;
    try {
      why = planned_out_of_memory(as_run_here(variant_config(cfg, v)), ranks_in_process(cfg), /*with_advice=*/false);
    } catch (const std::exception&) {
      continue;
    }
    // No [memory] key helps: bench sets each variant's techniques itself, plain's to none.
    if (!why.empty())
      throw PlannedOutOfMemory("the variant \"" + v.name + "\" (bench measures every technique against \"plain\", " +
                               "which has none): " + why +
                               " No [memory] setting changes it (bench sets each variant's own): a shorter "
                               "training.seq_len or fewer model.n_layers make it fit.");
  }
  result.rounds = rounds;
  result.world_size = cfg.parallel.world_size;
  result.ulysses_degree = cfg.parallel.ulysses_degree;
  result.emulated = cfg.parallel.emulate;
  bool any_fsdp = false;
  for (const auto& v : result.variants) any_fsdp = any_fsdp || v.fsdp;
  run_on_ranks(cfg, "odyssey bench PRESET", [&](RankContext& ctx) {
    // A variant's peak leaves out the other trainer's persistent bytes: its groups' fp32 master,
    // gradient and AdamW shards, in the device pool or, offloaded, the host pool with a compute-dtype
    // copy on the device (their `full` buffers are resharded, 0 bytes, between steps).
    struct Persistent {
      int64_t device = 0, host = 0;
    };
    auto persistent_bytes = [](Trainer* t) {
      Persistent bytes;
      if (t == nullptr) return bytes;
      for (auto* g : t->model().groups()) {
        bytes.device += g->device_state_bytes();
        bytes.host += g->host_state_bytes();
      }
      return bytes;
    };
    RunConfig replicated_cfg = cfg, sharded_cfg = cfg;
    replicated_cfg.parallel.fsdp = false;
    sharded_cfg.parallel.fsdp = true;
    Trainer replicated(replicated_cfg, ctx);
    std::unique_ptr<Trainer> sharded;
    if (any_fsdp) sharded = std::make_unique<Trainer>(sharded_cfg, ctx);
    // Variants alternate step by step on these trainers, and a toggle waits for a pipelined host
    // AdamW outside any step's time: each step ends whole here (the passes after backward, timed
    // in it). `odyssey train` pipelines them on a GPU (bench/gpu/optimizer_offload.py measures that).
    replicated.set_overlap_host_optimizer(false);
    if (sharded) sharded->set_overlap_host_optimizer(false);
    const bool lead = ctx.rank == 0;  // rank 0 records; every rank steps in lockstep
    if (lead) result.threads = at::get_num_threads();
    at::Tensor peaks;
    {
      CategoryScope category(MemCategory::Other);
      peaks = at::zeros({2}, at::TensorOptions().dtype(at::kDouble).device(ctx.device));  // [device, host]
    }
    for (int round = -1; round < rounds; ++round) {  // round -1 warms every variant up
      for (auto& v : result.variants) {
        Trainer& trainer = v.fsdp ? *sharded : replicated;
        trainer.set_memory(v.memory);
        const StepResult r = trainer.step();
        trainer.recorder().take_records();
        const Persistent others = persistent_bytes(v.fsdp ? &replicated : sharded.get());
        peaks[0] = static_cast<double>(r.device_peak - others.device);
        peaks[1] = static_cast<double>(r.host_peak - others.host);
        ctx.world->all_reduce_max(peaks);  // max over ranks; also lines the ranks up for the next step
        if (round < 0 || !lead) continue;
        const at::Tensor host = peaks.cpu();
        v.step_s.push_back(r.step_time_s);
        v.device_peak = std::max(v.device_peak, static_cast<int64_t>(host[0].item<double>()));
        v.host_peak = std::max(v.host_peak, static_cast<int64_t>(host[1].item<double>()));
      }
      if (log && round >= 0 && lead) log("round " + std::to_string(round + 1) + "/" + std::to_string(rounds));
    }
    replicated.take_notes();
    if (sharded) sharded->take_notes();
  });
  return result;
}

}  // namespace odyssey
