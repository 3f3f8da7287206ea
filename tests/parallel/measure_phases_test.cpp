// The planner against the engine phase by phase: every phase's activation peak (device peak minus
// params, grads and optimizer state) measured by the memory tracker on rank threads beside
// plan_memory's, and every category at the step peak, for plain, each technique, Ulysses P=2,
// Untied Ulysses with one head per rank per stage (each also with kept attention, on the device and
// offloaded beside the inputs), FSDP W=2, optimizer offload (the host pool holds the fp32 states),
// Qwen3's qk-norm in standard and Untied attention, and Untied stages that gather K/V.
// defines: [measure][phases]
// Print the tables: parallel_tests "[.phases-table]" -s
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "../memory/measure_util.h"
#include "../memory/phase_compare.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// Every category at the step peak (in the phase where the measured one lies), and the host peak,
/// within 15% of the step's activation peak (measured worst: 11.9%, saved activations in the
/// Ulysses P=2 case).
/// Several blocks reach nearly the same device peak, and which one the tracker records first can
/// move a gradient between categories.
constexpr double kCategoryTolerance = 0.15;

struct Case {
  std::string label;
  RunConfig cfg;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto single = [&](const std::string& label, bool ckpt, bool offload, bool mlp, bool loss) {
    RunConfig c = measurement_config();
    c.memory.activation_checkpointing = ckpt;
    c.memory.offload_activations = offload;
    c.memory.tiled_mlp = mlp;
    c.memory.tiled_loss = loss;
    out.push_back({label, c});
  };
  single("plain", false, false, false, false);
  single("checkpointing", true, false, false, false);
  single("checkpointing + offload", true, true, false, false);
  single("tiled MLP", false, false, true, false);
  single("tiled loss", false, false, false, true);
  single("all four", true, true, true, true);

  auto parallel = [&](const std::string& label, int W, int P, bool fsdp, bool ckpt, bool untied) {
    RunConfig c = parallel_measurement_config();
    c.parallel.world_size = W;
    c.parallel.ulysses_degree = P;
    c.parallel.fsdp = fsdp;
    c.memory.activation_checkpointing = ckpt;
    c.memory.untied_ulysses = untied;
    c.memory.heads_per_stage = untied ? P : 0;  // one query head per rank per stage
    out.push_back({label, c});
  };
  parallel("Ulysses P=2", 2, 2, false, false, false);
  parallel("Ulysses P=2 + checkpointing", 2, 2, false, true, false);
  parallel("Untied P=2, 1 head/rank/stage", 2, 2, false, false, true);
  parallel("Untied P=2, 1 head/rank/stage + checkpointing", 2, 2, false, true, true);
  parallel("Ulysses P=2 + checkpointing + kept attention", 2, 2, false, true, false);
  out.back().cfg.memory.keep_attention = true;
  parallel("Untied P=2, 1 head/rank/stage + checkpointing + kept attention", 2, 2, false, true, true);
  out.back().cfg.memory.keep_attention = true;
  // the kept attention packed and sent to the host beside the offloaded inputs (its own slots)
  for (const bool untied : {false, true}) {
    parallel(std::string(untied ? "Untied P=2, 1 head/rank/stage" : "Ulysses P=2") +
                 " + checkpointing + offload + kept attention on the host",
             2, 2, false, true, untied);
    out.back().cfg.memory.offload_activations = true;
    out.back().cfg.memory.keep_attention = out.back().cfg.memory.offload_kept_attention = true;
  }
  // ... by the top two blocks of four only (blocks 0 and 1 recompute their attention)
  parallel("Ulysses P=2 + checkpointing + offload + kept attention on the host in the top 2 blocks", 2, 2, false, true,
           false);
  out.back().cfg.memory.offload_activations = true;
  out.back().cfg.memory.keep_attention = out.back().cfg.memory.offload_kept_attention = true;
  out.back().cfg.memory.keep_attention_blocks = 2;
  parallel("FSDP W=2", 2, 1, true, false, false);
  parallel("FSDP W=2 + checkpointing", 2, 1, true, true, false);
  parallel("Untied P=1 (head chunks of 2)", 1, 1, false, true, true);
  out.back().cfg.memory.heads_per_stage = 2;
  {
    RunConfig c = parallel_measurement_config();
    c.parallel.world_size = c.parallel.ulysses_degree = 2;
    c.parallel.fsdp = true;
    c.memory.activation_checkpointing = c.memory.offload_activations = true;
    c.memory.tiled_mlp = c.memory.tiled_loss = true;
    out.push_back({"Ulysses P=2 + FSDP + all four", c});
    c.memory.offload_optimizer = true;  // the fp32 states in the host pool, bf16-less: fp32 copy on the device
    out.push_back({"Ulysses P=2 + FSDP + all four + optimizer offload", c});
  }
  single("all four + optimizer offload", true, true, true, true);
  out.back().cfg.memory.offload_optimizer = true;
  // Qwen3's per-head RMSNorm of q and k (model.qk_norm), in standard Ulysses and in the Untied stages
  for (const bool untied : {false, true})
    for (const bool ckpt : {false, true}) {
      parallel(std::string("qk-norm: ") + (untied ? "Untied P=2, 1 head/rank/stage" : "Ulysses P=2") +
                   (ckpt ? " + checkpointing" : ""),
               2, 2, false, ckpt, untied);
      out.back().cfg.model.qk_norm = true;
    }
  // stages whose query heads read their KV range unevenly: K/V gathered to the query heads' slots
  // (24 query / 8 KV heads, 8 per stage: 4 per rank over a range of 3 KV heads)
  parallel("Untied P=2, K/V gathered (24/8 heads, 8 per stage)", 2, 2, false, false, true);
  out.back().cfg.model.n_heads = 24;
  out.back().cfg.model.n_kv_heads = 8;
  out.back().cfg.memory.heads_per_stage = 8;
  return out;
}

PhaseComparison measure_case(const Case& c, std::vector<RankStep>* ranks = nullptr) {
  const std::vector<RankStep> m = measure_ranks(c.cfg);
  if (ranks) *ranks = m;
  return compare_phases(c.label, m[0], plan_memory(c.cfg));
}

}  // namespace

TEST_CASE("phases: every phase's activation peak and every category at the step peak agree with the planner",
          "[measure][phases]") {
  for (const Case& c : cases()) {
    std::vector<RankStep> ranks;
    const PhaseComparison cmp = measure_case(c, &ranks);
    INFO(c.label);
    CHECK(cmp.unplanned.empty());
    CHECK(cmp.unmeasured.empty());
    const double step = static_cast<double>(cmp.step.measured);
    for (const PhaseRow& r : cmp.rows) {
      const double allowed = allowed_phase_difference(r, cmp.step, c.cfg.memory.untied_ulysses);
      INFO(r.name << ": measured " << r.measured << " B, planned " << r.planned << " B (planned/measured " << r.ratio()
                  << "), allowed difference " << allowed << " B");
      CHECK(std::abs(static_cast<double>(r.planned - r.measured)) <= allowed);
    }
    INFO("step: measured " << cmp.step.measured << " B, planned " << cmp.step.planned << " B at " << cmp.step.name);
    CHECK(std::abs(cmp.step.ratio() - 1.0) <= kStepTolerance);
    // host memory (offloaded inputs) is compared at the host peak: at the device peak it depends on
    // which of several equal device peaks (block by block in backward) the tracker saw first
    INFO("host peak: measured " << ranks[0].host_peak << " B, planned " << cmp.host_planned << " B");
    CHECK(std::abs(static_cast<double>(ranks[0].host_peak - cmp.host_planned)) <= kCategoryTolerance * step);
    // the categories in the phase of the measured step peak, against the plan's in that phase;
    // the plan's peak lies in that phase too, or in one that ties it within the step tolerance
    const PhaseRow& peak = measured_peak_row(cmp);
    INFO("measured step peak in " << peak.name << ": planned there " << peak.planned << " B");
    CHECK(static_cast<double>(peak.planned) >= (1.0 - kStepTolerance) * static_cast<double>(cmp.step.planned));
    for (int k = 3; k < kMemCategoryCount; ++k) {
      if (k == static_cast<int>(MemCategory::Offloaded)) continue;
      INFO("category " << to_string(static_cast<MemCategory>(k)) << " at the step peak (" << peak.name << "): measured "
                       << peak.measured_categories[k] << " B, planned " << peak.planned_categories[k] << " B");
      CHECK(std::abs(static_cast<double>(peak.measured_categories[k] - peak.planned_categories[k])) <=
            kCategoryTolerance * step);
    }
    // ranks are symmetric: every rank's step peak equals rank 0's within 1%
    for (const RankStep& r : ranks)
      CHECK(std::abs(static_cast<double>(r.device_peak) / ranks[0].device_peak - 1.0) <= 0.01);
  }
}

TEST_CASE("phases: the per-phase table (printed)", "[.phases-table]") {
  // ODYSSEY_PHASES_CASE=<label substring> restricts the cases; ODYSSEY_PHASES_ALL=1 prints every
  // row's categories (not only the rows off by more than 10%)
  const char* only = std::getenv("ODYSSEY_PHASES_CASE");
  const bool all = std::getenv("ODYSSEY_PHASES_ALL") != nullptr;
  for (const Case& c : cases())
    if (!only || c.label.find(only) != std::string::npos)
      print_phase_table(measure_case(c), /*categories=*/true, all ? -1.0 : 0.10);
}
