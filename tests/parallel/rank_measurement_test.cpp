// Per-rank memory of real multi-rank training steps (memory tracker, rank threads) against the
// planner: FSDP divides params/grads/optimizer by the world size, Ulysses divides the attention
// working set by the degree, Untied Ulysses (one head per rank per stage, 8 stages) cuts it >= 1.25x
// against plain Ulysses; every rank's step peak within 15% of plan_memory's. defines: [measure]
#include <catch2/catch.hpp>

#include <mutex>

#include "../common/engine_test_util.h"
#include "engine/parallel/rank_launch.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/phase.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

constexpr double kPlanTolerance = 0.15;  ///< measured step peaks against plan_memory (the done-when)
/// Measured reduction ratios against the planner's ratios. Looser: the attention working set is a
/// few MiB here and the rmsnorm output's lifetime differs from the planner's walk by about 1 [s, d]
/// (docs/parallel.md).
constexpr double kRatioTolerance = 0.25;

/// d_model 256, 2 layers, 2048 tokens, 16 heads of 16, checkpointing + tiled MLP/loss: attention
/// dominates the transient memory; CPU hardware profile (no runtime overhead term).
RunConfig measured_config() {
  RunConfig c = tiny_config(/*layers=*/2, /*seq=*/2048);
  c.model.d_model = 256;
  c.model.n_heads = c.model.n_kv_heads = 16;
  c.model.head_dim = 16;
  c.model.d_ffn = 512;
  c.model.vocab_size = 256;
  c.memory.activation_checkpointing = true;
  c.memory.tiled_mlp = c.memory.tiled_loss = true;
  c.memory.mlp_tile_tokens = c.memory.loss_tile_tokens = 256;
  c.hardware = *find_hardware_profile("cpu");
  c.parallel.timeout_s = 120;
  return c;
}

int64_t attention_bytes(const std::array<int64_t, kMemCategoryCount>& c) {
  return c[static_cast<int>(MemCategory::AttentionWorkspace)] + c[static_cast<int>(MemCategory::CommBuffers)];
}

/// What one rank measured over three steps after a first (which warms up nothing persistent, but
/// keeps every rank on the same schedule): each peak the smallest of the three. Reason: Gloo's
/// worker thread drops its reference to a finished all-to-all's staging buffer a moment after the
/// waiting rank resumes (phase_compare.h), so now and then a released buffer (1 MiB here) lands in
/// the next phase's peak; with RoPE one node since 2026-11-26 the forward attention's peak sits
/// beside the all-to-alls, where that happened in one run of two (P=2: 6291456 B against
/// 5242880).
struct RankMeasure {
  int64_t step_peak = 0;
  std::array<int64_t, kMemCategoryCount> persistent{};  ///< category bytes after the step
  int64_t fwd_attention = 0;  ///< attention_workspace + comm_buffers at the fwd attention phases' peak
};

struct Measured {
  std::vector<RankMeasure> ranks;
  MemoryPlan plan;
  int64_t planned_fwd_attention = 0;
};

Measured measure(const RunConfig& cfg) {
  Measured m;
  m.plan = plan_memory(cfg);
  for (const auto& ph : m.plan.phases)
    if (ph.name.rfind("fwd/block.", 0) == 0 && ph.name.find("/attn") != std::string::npos) {
      std::array<int64_t, kMemCategoryCount> c{};
      for (int i = 0; i < kMemCategoryCount; ++i) c[i] = ph.category_bytes[i];
      m.planned_fwd_attention = std::max(m.planned_fwd_attention, attention_bytes(c));
    }
  m.ranks.resize(cfg.parallel.world_size);
  configure_threads(static_cast<int>(cfg.parallel.world_size));
  run_rank_threads(cfg.parallel, at::kCPU, [&](RankContext& ctx) {
    Trainer t(cfg, ctx);
    t.step();
    t.recorder().take_records();
    RankMeasure& out = m.ranks[ctx.rank];
    for (int k = 0; k < 3; ++k) {
      const StepResult r = t.step();
      int64_t fwd_attention = 0;
      for (const auto& rec : t.recorder().take_records())
        if (rec.path.rfind("fwd/block.", 0) == 0 && rec.path.find("/attn") != std::string::npos)
          fwd_attention = std::max(fwd_attention, attention_bytes(rec.category_at_peak));
      out.step_peak = k == 0 ? r.device_peak : std::min(out.step_peak, r.device_peak);
      out.fwd_attention = k == 0 ? fwd_attention : std::min(out.fwd_attention, fwd_attention);
    }
    out.persistent = MemoryTracker::instance().snapshot(ctx.rank).category_bytes;
  });
  configure_threads(1);
  return m;
}

void require_peaks_match_plan(const Measured& m, const std::string& label) {
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    const double ratio = static_cast<double>(m.ranks[r].step_peak) / static_cast<double>(m.plan.peak_bytes);
    INFO(label << ", rank " << r << ": measured step peak " << m.ranks[r].step_peak << " B, planned "
               << m.plan.peak_bytes << " B (ratio " << ratio << ")");
    CHECK(std::abs(ratio - 1.0) <= kPlanTolerance);
  }
}

int64_t persistent(const RankMeasure& r, MemCategory c) { return r.persistent[static_cast<int>(c)]; }

}  // namespace

TEST_CASE("measure: FSDP divides params, grads and optimizer state by the world size", "[measure]") {
  RunConfig base = measured_config();
  base.training.seq_len = 512;        // model states are the point here
  const Measured w1 = measure(base);  // one rank, nothing sharded
  require_peaks_match_plan(w1, "W=1");
  for (int W : {2, 4}) {
    RunConfig cfg = base;
    cfg.parallel.world_size = W;  // data parallel x FSDP
    cfg.parallel.fsdp = true;
    const Measured mw = measure(cfg);
    require_peaks_match_plan(mw, "FSDP W=" + std::to_string(W));
    for (MemCategory c : {MemCategory::Params, MemCategory::Grads, MemCategory::Optimizer}) {
      const double planned = static_cast<double>(mw.plan.category_bytes[static_cast<int>(c)]);
      for (const RankMeasure& r : mw.ranks) {
        const double divided = static_cast<double>(persistent(w1.ranks[0], c)) / persistent(r, c);
        INFO("W=" << W << " " << to_string(c) << ": W=1 " << persistent(w1.ranks[0], c) << " B, this rank "
                  << persistent(r, c) << " B (/" << divided << "), planned " << planned << " B");
        CHECK(divided >= 0.95 * W);  // padding of each group to a multiple of W only
        CHECK(divided <= 1.0 * W + 1e-9);
        CHECK(std::abs(persistent(r, c) / planned - 1.0) <= kPlanTolerance);
      }
    }
  }
}

TEST_CASE("measure: Ulysses divides the attention working set by about the degree", "[measure]") {
  std::vector<Measured> by_degree;
  for (int P : {1, 2, 4}) {
    RunConfig cfg = measured_config();
    cfg.parallel.world_size = P;
    cfg.parallel.ulysses_degree = P;
    cfg.parallel.fsdp = true;
    by_degree.push_back(measure(cfg));
    require_peaks_match_plan(by_degree.back(), "Ulysses P=" + std::to_string(P));
  }
  const int64_t p1 = by_degree[0].ranks[0].fwd_attention;
  for (size_t i = 1; i < by_degree.size(); ++i) {
    const int P = i == 1 ? 2 : 4;
    const double planned = static_cast<double>(by_degree[0].planned_fwd_attention) / by_degree[i].planned_fwd_attention;
    for (const RankMeasure& r : by_degree[i].ranks) {
      const double divided = static_cast<double>(p1) / r.fwd_attention;
      INFO("P=" << P << ": attention working set " << r.fwd_attention << " B vs " << p1 << " B at P=1 (/" << divided
                << "); planner /" << planned);
      CHECK(divided >= 0.75 * P);
      CHECK(std::abs(divided / planned - 1.0) <= kRatioTolerance);
    }
  }
  WARN("attention working set per rank (fwd, attention_workspace + comm_buffers): P=1 "
       << p1 << " B, P=2 " << by_degree[1].ranks[0].fwd_attention << " B, P=4 " << by_degree[2].ranks[0].fwd_attention
       << " B");
}

TEST_CASE("measure: Untied Ulysses, one head per rank per stage (8 stages), cuts attention >= 1.25x", "[measure]") {
  RunConfig cfg = measured_config();
  cfg.parallel.world_size = cfg.parallel.ulysses_degree = 2;  // 16 heads: 8 per rank -> 8 stages
  cfg.parallel.fsdp = true;
  const Measured plain = measure(cfg);
  require_peaks_match_plan(plain, "plain Ulysses");
  cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = 2;
  const Measured untied = measure(cfg);
  require_peaks_match_plan(untied, "Untied Ulysses");
  const double planned = static_cast<double>(plain.planned_fwd_attention) / untied.planned_fwd_attention;
  for (size_t r = 0; r < plain.ranks.size(); ++r) {
    const double cut = static_cast<double>(plain.ranks[r].fwd_attention) / untied.ranks[r].fwd_attention;
    INFO("rank " << r << ": attention working set plain " << plain.ranks[r].fwd_attention << " B, untied "
                 << untied.ranks[r].fwd_attention << " B (/" << cut << "), planner /" << planned);
    // A sanity floor, not a fit: eight stages take at least a fifth off the attention working set;
    // the size of the cut is the planner's ratio, checked next within kRatioTolerance. (The floor
    // was 2x while plain Ulysses also carried RoPE's composite, four q-sized fp32 temporaries that
    // Untied's per-stage rotation never had at full size; apply_rope is one node in x's dtype since
    // 2026-11-26: measured /1.56 here, planner /1.62.)
    CHECK(cut >= 1.25);
    CHECK(std::abs(cut / planned - 1.0) <= kRatioTolerance);
    CHECK(untied.ranks[r].step_peak < plain.ranks[r].step_peak);
  }
  WARN("attention working set, rank 0: plain Ulysses "
       << plain.ranks[0].fwd_attention << " B, Untied (1 head/rank/stage) " << untied.ranks[0].fwd_attention << " B (/"
       << static_cast<double>(plain.ranks[0].fwd_attention) / untied.ranks[0].fwd_attention << ", planner /" << planned
       << "); step peaks " << plain.ranks[0].step_peak << " -> " << untied.ranks[0].step_peak << " B");
}
