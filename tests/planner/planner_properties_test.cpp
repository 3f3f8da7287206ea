// Properties of the planner that must hold for every config: more ranks never raise a per-rank
// term, each technique never raises the peak, the solver's answer fits and one step more does
// not, the plan's pieces add up (terms = peak, phases' maximum = peak, plan_peak = plan_memory).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/config/preset.h"
#include "engine/config/validate.h"
#include "engine/planner/planner.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

RunConfig preset(const std::string& name) {
  const LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/" + name + ".toml");
  REQUIRE(loaded.ok());
  return loaded.config;
}

RunConfig small_fp32() {
  RunConfig c;
  c.model.flavor = "custom";
  c.model.n_layers = 3;
  c.model.d_model = 64;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 8;
  c.model.d_ffn = 176;
  c.model.vocab_size = 128;
  c.training.seq_len = 4096;
  c.parallel.world_size = 4;
  c.parallel.ulysses_degree = 4;
  c.hardware = *find_hardware_profile("cpu");
  return c;
}

/// Configs the properties are checked on: the shipped presets (8B, 32B over two nodes, tied 1B,
/// the tiny CPU one, 8B on one GPU with optimizer offload) and a small fp32 model with KV heads
/// fewer than the degree.
std::vector<RunConfig> base_configs() {
  std::vector<RunConfig> out = {preset("llama3-8b-3m-8xh100"),
                                preset("qwen3-32b-16xh100"),
                                preset("llama3.2-1b-1xh100"),
                                preset("tiny-cpu"),
                                small_fp32(),
                                preset("llama3-8b-1xh100")};
  out[0].training.seq_len = 256 * 1024;  // fits at some rungs, so the properties bite on both sides
  return out;
}

/// The registry's toggles (engine/config/techniques.h): FSDP and the memory techniques.
std::vector<Technique> toggles() {
  std::vector<Technique> out;
  for (const Technique& t : kTechniques)
    if (t.toggle) out.push_back(t);
  return out;
}

}  // namespace

TEST_CASE("each technique never raises the device peak, from any combination of the others", "[planner][properties]") {
  for (RunConfig base : base_configs()) {
    const std::vector<Technique> list = toggles();
    for (unsigned mask = 0; mask < (1u << list.size()); ++mask) {
      RunConfig from = base;
      for (size_t i = 0; i < list.size(); ++i) *technique_flag(from, list[i].id) = mask & (1u << i);
      if (!technique_requirement_issues(from).empty()) continue;
      REQUIRE(validate(from).empty());
      const int64_t before = plan_peak(from).peak_bytes;
      for (size_t i = 0; i < list.size(); ++i) {
        if (mask & (1u << i)) continue;
        const Technique& t = list[i];
        RunConfig to = from;
        *technique_flag(to, t.id) = true;
        const int64_t local = to.training.seq_len / to.parallel.ulysses_degree;
        if (t.id == TechniqueId::TiledLoss && loss_tile(to.memory, to.model, to.training.batch_size, local).count == 1)
          continue;  // one loss tile: the documented exception, tested below
        INFO(base.model.flavor << " mask " << mask << " + " << t.name);
        if (t.requires_on && !technique_on(from, *t.requires_on)) {
          // offload arrives with checkpointing: compare against checkpointing alone as well
          RunConfig required = from;
          *technique_flag(required, *t.requires_on) = true;
          *technique_flag(to, *t.requires_on) = true;
          CHECK(plan_peak(to).peak_bytes <= plan_peak(required).peak_bytes);
        }
        if (t.id == TechniqueId::UntiedUlysses && to.hardware.profile == "cpu") {
          // The one CPU exception: PyTorch's CPU flash backward has none of FA-2's buffers (the fp32
          // dq accumulator, dK/dV at query-head count) that head stages shrink, so with few heads
          // per rank Untied Ulysses can cost up to its preallocated output [B, s, H*hd] more.
          const int64_t output = local * to.model.n_heads * to.model.head_dim * dtype_bytes(to.training.dtype);
          CHECK(plan_peak(to).peak_bytes <= before + output);
          continue;
        }
        CHECK(plan_peak(to).peak_bytes <= before);
      }
      // Ulysses: the degree from 1 to the preset's never raises the peak either.
      if (base.parallel.ulysses_degree > 1) {
        RunConfig one = from;
        one.parallel.ulysses_degree = 1;
        one.memory.heads_per_stage = 0;
        INFO(base.model.flavor << " mask " << mask << " + ulysses");
        CHECK(plan_peak(from).peak_bytes <= plan_peak(one).peak_bytes);
      }
    }
  }
}

TEST_CASE("more ranks never raise a per-rank term", "[planner][properties]") {
  SECTION("world size with FSDP (fixed Ulysses degree)") {
    RunConfig c = preset("llama3-8b-3m-8xh100");
    c.training.seq_len = 512 * 1024;
    MemoryPlan previous = plan_memory(c);
    for (int64_t w : {16, 32, 64}) {
      c.parallel.world_size = w;
      REQUIRE(validate(c).empty());
      const MemoryPlan plan = plan_memory(c);
      INFO("world size " << w);
      CHECK(plan.peak_bytes <= previous.peak_bytes);
      for (int k = 0; k < kPlanCategoryCount; ++k) {
        INFO("category " << plan_category_names()[k]);
        CHECK(plan.category_bytes[k] <= previous.category_bytes[k]);
      }
      previous = plan;
    }
  }
  SECTION("Ulysses degree (KV heads replicated beyond the KV-head count)") {
    for (RunConfig c : {preset("llama3-8b-3m-8xh100"), small_fp32()}) {
      c.parallel.world_size = 8;
      c.training.seq_len = 64 * 1024;
      c.memory.heads_per_stage = 0;
      std::map<std::string, int64_t> previous_terms;
      int64_t previous_peak = -1;
      for (int64_t p : {1, 2, 4, 8}) {
        c.parallel.ulysses_degree = p;
        REQUIRE(validate(c).empty());
        const MemoryPlan plan = plan_memory(c);
        INFO(c.model.flavor << " degree " << p);
        if (previous_peak >= 0) CHECK(plan.peak_bytes <= previous_peak);
        previous_peak = plan.peak_bytes;
        // every term present at both degrees is no larger at the higher one
        std::map<std::string, int64_t> terms;
        for (const auto& t : plan.terms) terms[t.name] += t.bytes;
        if (p > 2)
          for (const auto& [name, bytes] : terms)
            if (previous_terms.count(name)) {
              INFO("term " << name);
              CHECK(bytes <= previous_terms[name]);
            }
        previous_terms = terms;
      }
    }
  }
}

TEST_CASE("the max-context solver's answer fits and one granularity step more does not", "[planner][properties]") {
  for (const RunConfig& base : base_configs()) {
    for (int rung = 0; rung < kLadderRungCount; ++rung) {
      RunConfig c = ladder_rung_config(base, rung);
      const int64_t best = solve_max_seq_len(c);
      const int64_t step = seq_len_granularity(c, best);
      INFO(base.model.flavor << " rung " << kLadderRungNames[rung] << " answer " << best);
      CHECK(best % step == 0);
      CHECK(step % c.parallel.ulysses_degree == 0);
      if (best > 0) {
        c.training.seq_len = best;
        CHECK(plan_peak(c).fits());
      }
      c.training.seq_len = best == 0 ? shortest_solver_seq_len(c) : best + step;
      CHECK_FALSE(plan_peak(c).fits());
    }
  }
}

TEST_CASE("the max-context solver answers below one step of P x 1K where only that fits", "[planner][properties]") {
  // tiny-cpu (P = 2, 512 tokens) on a device of 0.0095 GiB: its own 512 tokens fit, 2K (one coarse
  // step) does not. The solver answered 0 there; it now steps by P tokens below 2K.
  RunConfig c = preset("tiny-cpu");
  c.hardware.device_memory_gib = 0.0095;
  REQUIRE(plan_peak(c).fits());
  const int64_t P = c.parallel.ulysses_degree;
  const int64_t best = solve_max_seq_len(c);
  INFO("answer " << best);
  CHECK(best == 766);  // docs/planner.md, section 9, quotes it: a planner change that moves it moves the doc
  CHECK(best >= c.training.seq_len);
  CHECK(best < P * 1024);
  CHECK(seq_len_granularity(c, best) == P);
  CHECK(best % P == 0);
  c.training.seq_len = best;
  CHECK(plan_peak(c).fits());
  c.training.seq_len = best + P;
  CHECK_FALSE(plan_peak(c).fits());
  // Nothing fits at all: 0, and the first length tried is the shortest valid one.
  c.hardware.device_memory_gib = 0.0001;
  CHECK(solve_max_seq_len(c) == 0);
  CHECK(shortest_solver_seq_len(c) == 32);
  CHECK(max_seq_len_limit(c, 0).seq_len == 32);
  // Everything fits, up to the solver's ceiling: the limit is the ceiling's own plan, its bytes
  // against the machine's capacities (it said 0 of 0 bytes).
  RunConfig roomy = preset("tiny-cpu");
  roomy.hardware.device_memory_gib = 65536;
  roomy.hardware.host_memory_gib = 1048576;
  const int64_t ceiling = solve_max_seq_len(roomy);
  REQUIRE(ceiling > 0);
  REQUIRE(ceiling == kSeqLenMax);  // 16G tokens of the tiny model: under 64 Ti of device memory
  const MaxSeqLenLimit limit = max_seq_len_limit(roomy, ceiling);
  CHECK(limit.seq_len == 0);
  CHECK(limit.binds() == "the solver's ceiling");
  CHECK(limit.peak.fits());
  CHECK(limit.peak.device_capacity == int64_t{65536} << 30);
  CHECK(limit.peak.peak_bytes > 0);
}

TEST_CASE("the peak grows monotonically with the sequence", "[planner][properties]") {
  RunConfig c = preset("llama3-8b-5m-8xh100-untied");
  int64_t previous = 0;
  for (int64_t k = 1; k <= 800; k += 7) {
    c.training.seq_len = k * 8192;
    const int64_t peak = plan_peak(c).peak_bytes;
    INFO("seq_len " << c.training.seq_len);
    CHECK(peak >= previous);
    previous = peak;
  }
}

TEST_CASE("the plan adds up: terms, phases, categories and the fast path agree", "[planner][properties]") {
  for (const RunConfig& base : base_configs()) {
    for (int rung = 0; rung < kLadderRungCount; ++rung) {
      const RunConfig c = ladder_rung_config(base, rung);
      const MemoryPlan plan = plan_memory(c);
      const PlanPeak fast = plan_peak(c);
      INFO(base.model.flavor << " rung " << kLadderRungNames[rung]);
      CHECK(fast.peak_bytes == plan.peak_bytes);
      CHECK(fast.host_bytes == plan.host_bytes);
      CHECK(fast.fits() == plan.fits());
      int64_t device_terms = 0, device_categories = 0, phase_max = 0;
      for (const auto& t : plan.terms)
        if (!t.host) device_terms += t.bytes;
      for (int k = 0; k < kPlanCategoryCount; ++k)
        if (k != static_cast<int>(PlanCategory::Offloaded)) device_categories += plan.category_bytes[k];
      bool found_peak_phase = false;
      for (const auto& p : plan.phases) {
        phase_max = std::max(phase_max, p.resident_bytes);
        if (p.name == plan.peak_phase) {
          found_peak_phase = true;
          CHECK(p.resident_bytes == plan.peak_bytes);
        }
      }
      CHECK(device_terms == plan.peak_bytes);
      CHECK(device_categories == plan.peak_bytes);
      CHECK(phase_max == plan.peak_bytes);
      CHECK(found_peak_phase);
      // phases: embed, L x (attn, mlp), loss, [bwd/loss], L x ([recompute,] mlp, attn, rs), embed, optimizer
      const int64_t L = c.model.n_layers;
      const int64_t per_block_bwd = c.memory.activation_checkpointing ? 4 : 3;
      const int64_t expected = 1 + 2 * L + 1 + (c.memory.tiled_loss ? 0 : 1) + per_block_bwd * L + 2;
      CHECK(static_cast<int64_t>(plan.phases.size()) == expected);
      CHECK(plan.time.step_s > 0);
      CHECK(plan.time.mfu > 0);
      CHECK(plan.time.mfu <= plan.time.hfu);
      CHECK(plan.time.mfu <= plan.time.mfu_palm);
    }
  }
}

TEST_CASE("the advisor suggests fitting toggles, cheapest first", "[planner][advisor]") {
  SECTION("the ALST stack without tiling at 3M") {
    RunConfig c = preset("llama3-8b-3m-8xh100");
    c.memory.tiled_mlp = false;
    c.memory.tiled_loss = false;
    REQUIRE_FALSE(plan_peak(c).fits());
    const auto advice = advise(c, 3);
    REQUIRE_FALSE(advice.empty());
    double previous = 0;
    for (const auto& a : advice) {
      CHECK(a.plan.fits());
      CHECK(plan_peak(a.config).fits());
      CHECK(a.slowdown >= previous);
      previous = a.slowdown;
      bool tiles_loss = false;
      for (const auto& change : a.changes) tiles_loss = tiles_loss || change == "memory.tiled_loss = true";
      CHECK(tiles_loss);  // the untiled loss alone needs hundreds of GiB
    }
  }
  SECTION("a larger Ulysses degree is ranked by the time a token, not by the step") {
    // 32B at 2M over Ulysses 4 of 16 ranks: the advice raises the degree to 8 or 16. Each doubling
    // halves the data-parallel replicas, so the step holds half the tokens: ranked by step time,
    // degree 16 came first at x0.25 though it does less per device than degree 8.
    RunConfig c = preset("qwen3-32b-16xh100");
    c.parallel.ulysses_degree = 4;
    c.memory.heads_per_stage = kHeadsPerStageAuto;
    c.training.seq_len = int64_t{2} << 20;
    REQUIRE_FALSE(plan_peak(c).fits());
    const auto advice = advise(c, 3);
    REQUIRE(advice.size() >= 2);
    const double base = plan_step_time(c).tokens_per_s_per_device;
    bool degree_changed = false;
    double previous = 0;
    for (const auto& a : advice) {
      INFO(a.changes.front());
      degree_changed = degree_changed || a.config.parallel.ulysses_degree != c.parallel.ulysses_degree;
      // the same quotient of the same two planner figures: equal to the last bit
      CHECK(a.slowdown == base / plan_step_time(a.config).tokens_per_s_per_device);
      CHECK(a.slowdown >= previous);
      previous = a.slowdown;
    }
    CHECK(degree_changed);
  }
  SECTION("nothing to suggest when it fits or when nothing can") {
    CHECK(advise(preset("llama3-8b-3m-8xh100")).empty());
    RunConfig hopeless = preset("llama3-8b-3m-8xh100");
    hopeless.training.seq_len = int64_t{64} << 20;
    CHECK(advise(hopeless).empty());
  }
}

TEST_CASE("tiled loss with a single tile does not raise the peak either", "[planner][properties]") {
  // When the loss tile covers the whole local sequence (vocab 128: the auto tile is 2M tokens),
  // tiling keeps the hidden-state gradient [B, s, d] and the fp32 LM-head accumulator [V, d]
  // besides the tile; the tile differentiated by hand holds two fp32 [s, V] (the logits, their
  // log-softmax, d logits written over it) where the untiled loss's backward holds three
  // (log-softmax, its gradient, d logits): 2 x 512 + 256 + 32 KiB against 3 x 512 KiB here. Until
  // 2026-11-26 autograd's tile held three too, and a single tile raised the peak.
  RunConfig c = small_fp32();
  const int64_t local = c.training.seq_len / c.parallel.ulysses_degree;
  REQUIRE(loss_tile(c.memory, c.model, c.training.batch_size, local).count == 1);
  const int64_t untiled = plan_peak(c).peak_bytes;
  c.memory.tiled_loss = true;
  const int64_t tiled = plan_peak(c).peak_bytes;
  const int64_t logits = local * 128 * 4, dx = local * 64 * 4, head = 128 * 64 * 4;
  REQUIRE(dx + head < logits);  // what makes one fp32 tile fewer outweigh the two kept
  CHECK(tiled <= untiled);
  // With real tiles (8 tiles of 128 tokens) it no longer raises the peak.
  c.memory.loss_tile_tokens = 128;
  CHECK(plan_peak(c).peak_bytes <= untiled);
}

TEST_CASE("heads_per_stage \"auto\" plans the fewest stages at the lowest peak, or standard attention, at every length",
          "[planner][properties][stages]") {
  struct Case {
    const char* preset;
    std::vector<int64_t> lengths;
  };
  const int64_t K = 1024;
  int standard_runs = 0, chunked_runs = 0;  // both answers are reached below
  for (const Case& cs : {Case{"llama3.2-1b-1xh100", {32 * K, 128 * K, 2048 * K}},
                         Case{"llama3-8b-5m-8xh100-untied", {1024 * K, 5120 * K}}}) {
    RunConfig c = preset(cs.preset);
    c.memory.untied_ulysses = true;
    c.memory.heads_per_stage = kHeadsPerStageAuto;
    c.memory.mlp_tile_tokens = 0;  // the stage size alone here (d_model tiles; the tile's own test below)
    for (int64_t seq : cs.lengths) {
      c.training.seq_len = seq;
      INFO(cs.preset << " at " << seq);
      const std::vector<int64_t> sizes = valid_heads_per_stage(c);
      REQUIRE(sizes.size() >= 3);
      std::vector<int64_t> peaks;
      for (int64_t heads : sizes) {
        RunConfig fixed = c;
        fixed.memory.heads_per_stage = heads;
        peaks.push_back(plan_peak(fixed).peak_bytes);
      }
      const int64_t lowest = *std::min_element(peaks.begin(), peaks.end());
      RunConfig standard = c;
      standard.memory.untied_ulysses = false;
      standard.memory.heads_per_stage = 0;
      const int64_t standard_peak = plan_peak(standard).peak_bytes;
      const int64_t picked = planned_heads_per_stage(c);
      const RunConfig resolved = with_planned_sizes(c);
      const MemoryPlan plan = plan_memory(c);
      if (standard_peak <= lowest) {
        // no stage size lowers the peak: standard attention, which projects q, k and v once
        ++standard_runs;
        CHECK(picked == 0);
        CHECK_FALSE(planned_untied_ulysses(c));
        CHECK_FALSE(resolved.memory.untied_ulysses);
        CHECK(plan.untied_stages == 0);
        CHECK(plan.peak_bytes == standard_peak);
        CHECK(plan_peak(c).peak_bytes == standard_peak);
        continue;
      }
      ++chunked_runs;
      CHECK(planned_untied_ulysses(c));
      CHECK(resolved.memory.untied_ulysses);
      const auto at = std::find(sizes.begin(), sizes.end(), picked);
      REQUIRE(at != sizes.end());
      CHECK(peaks[at - sizes.begin()] == lowest);               // the chunking saves all it can
      for (auto later = at + 1; later != sizes.end(); ++later)  // and no coarser stage does
        CHECK(peaks[later - sizes.begin()] > lowest);
      // the planner's own entry points plan the picked size
      CHECK(plan_peak(c).peak_bytes == lowest);
      CHECK(plan.peak_bytes == lowest);
      CHECK(plan.heads_per_stage == picked);
      CHECK(plan.untied_stages == c.model.n_heads / picked);
      CHECK(resolved.memory.heads_per_stage == picked);
    }
  }
  CHECK(standard_runs > 0);
  CHECK(chunked_runs > 0);
  // The two ends on the 1B: at 32K the step's peak is the fused loss's workspace whatever the
  // attention, so standard attention; at 2M the stage buffers reach the peak and the stages are
  // finer than one of all heads.
  RunConfig one = preset("llama3.2-1b-1xh100");
  one.memory.heads_per_stage = kHeadsPerStageAuto;
  one.memory.mlp_tile_tokens = 0;
  one.training.seq_len = 32 * K;
  CHECK_FALSE(planned_untied_ulysses(one));
  CHECK(planned_heads_per_stage(one) == 0);
  one.training.seq_len = 2048 * K;
  CHECK(planned_untied_ulysses(one));
  CHECK(planned_heads_per_stage(one) > 0);
  CHECK(planned_heads_per_stage(one) < one.model.n_heads);
  // A fixed value and the other techniques are left as they are, even where standard attention
  // would plan the same peak.
  RunConfig fixed = one;
  fixed.training.seq_len = 32 * K;
  fixed.memory.heads_per_stage = 4;
  CHECK(planned_heads_per_stage(fixed) == 4);
  CHECK(planned_untied_ulysses(fixed));
  CHECK(with_planned_sizes(fixed).memory.untied_ulysses);
  fixed.memory.heads_per_stage = 0;
  CHECK(planned_heads_per_stage(fixed) == 0);
  CHECK(planned_untied_ulysses(fixed));
  RunConfig off = one;
  off.memory.untied_ulysses = false;
  CHECK(planned_heads_per_stage(off) == 0);
  CHECK_FALSE(planned_untied_ulysses(off));
  CHECK(plan_memory(off).untied_stages == 0);
}

TEST_CASE("mlp_tile_tokens \"auto\" plans the fewest tiles at the lowest peak, before the stage size",
          "[planner][properties][stages]") {
  const int64_t K = 1024;
  RunConfig c = preset("llama3.2-1b-1xh100");
  c.memory.tiled_mlp = true;
  c.memory.mlp_tile_tokens = kMlpTileTokensAuto;
  c.memory.heads_per_stage = kHeadsPerStageAuto;
  int standard_runs = 0;
  for (int64_t seq : {32 * K, 64 * K, 128 * K, 1024 * K}) {
    c.training.seq_len = seq;
    INFO("1B at " << seq);
    const std::vector<int64_t> tiles = mlp_tile_candidates(c.model.d_model, seq);
    REQUIRE(tiles.front() == c.model.d_model);  // DeepSpeed's tile first
    REQUIRE(tiles.back() == seq);               // one tile last
    // the tile is resolved with "auto" stages at their finest, or, where "auto" runs standard
    // attention, with standard attention
    const bool standard = !planned_untied_ulysses(c);
    standard_runs += standard;
    std::vector<int64_t> peaks;
    for (int64_t tokens : tiles) {
      RunConfig fixed = c;
      fixed.memory.mlp_tile_tokens = tokens;
      fixed.memory.heads_per_stage = standard ? 0 : valid_heads_per_stage(c).front();
      fixed.memory.untied_ulysses = !standard;
      peaks.push_back(plan_peak(fixed).peak_bytes);
    }
    const int64_t lowest = *std::min_element(peaks.begin(), peaks.end());
    const int64_t picked = planned_mlp_tile_tokens(c);
    const auto at = std::find(tiles.begin(), tiles.end(), picked);
    REQUIRE(at != tiles.end());
    CHECK(peaks[at - tiles.begin()] == lowest);
    for (auto later = at + 1; later != tiles.end(); ++later) CHECK(peaks[later - tiles.begin()] > lowest);
    // then the stage size with that tile; the plan's peak is still the lowest of them all
    const RunConfig resolved = with_planned_sizes(c);
    CHECK(resolved.memory.mlp_tile_tokens == picked);
    CHECK(resolved.memory.heads_per_stage == planned_heads_per_stage(c));
    CHECK(resolved.memory.untied_ulysses == !standard);
    CHECK(plan_peak(c).peak_bytes == lowest);
    CHECK(plan_peak(resolved).peak_bytes == lowest);
  }
  // at 64K standard attention runs with its own tile: 4 of 16K, where the finest stages take 32K
  // tiles (with which standard attention's MLP backward would raise the peak)
  CHECK(standard_runs >= 2);
  c.training.seq_len = 64 * K;
  CHECK_FALSE(planned_untied_ulysses(c));
  CHECK(planned_mlp_tile_tokens(c) == 16 * K);
  RunConfig finest = c;
  finest.memory.untied_ulysses = true;
  finest.memory.heads_per_stage = valid_heads_per_stage(c).front();
  CHECK(planned_mlp_tile_tokens(finest) == 32 * K);
  // at 32K the step's peak is the fused loss's workspace (whole rows of the loss tile), which the
  // MLP stays under with one tile of all 32K tokens (three [tile, f] at once on CUDA) instead of 32
  // tiles of d_model
  c.training.seq_len = 32 * K;
  CHECK(plan_memory(c).peak_phase == "fwd/loss");
  CHECK(planned_mlp_tile_tokens(c) == 32 * K);
  // a fixed tile and the tiled MLP off are left as they are
  RunConfig fixed = c;
  fixed.memory.mlp_tile_tokens = 4096;
  CHECK(planned_mlp_tile_tokens(fixed) == 4096);
  fixed.memory.tiled_mlp = false;
  fixed.memory.mlp_tile_tokens = kMlpTileTokensAuto;
  CHECK(planned_mlp_tile_tokens(fixed) == 0);
}

TEST_CASE("the device peak never falls as the MLP tile grows, whatever else runs", "[planner][properties][stages]") {
  // mlp_tile_tokens = "auto" bisects the tile candidates for the end of the lowest peak's prefix
  // (planned_sizes.cpp): exact only while the peak never falls as the tile grows. It holds by
  // construction (the tile sizes only its own [B, tile, f] and [B, tile, d] activations; the
  // walk's events are the same for every tile), and this checks it on every technique set, both
  // attentions and three lengths, then that "auto" picks what the exhaustive rule picks.
  int64_t sets = 0;
  for (RunConfig base : base_configs()) {
    const std::vector<Technique> list = toggles();
    for (unsigned mask = 0; mask < (1u << list.size()); ++mask) {
      RunConfig c = base;
      for (size_t i = 0; i < list.size(); ++i) *technique_flag(c, list[i].id) = mask & (1u << i);
      if (!c.memory.tiled_mlp || !technique_requirement_issues(c).empty()) continue;
      for (const bool keep : {false, true}) {
        c.memory.keep_attention = keep && c.memory.activation_checkpointing;
        for (const int64_t scale : {1, 4, 16}) {
          RunConfig at = c;
          at.training.seq_len = base.training.seq_len * scale / 4;
          if (!validate(at).empty()) continue;
          const std::vector<int64_t> stages =
              at.memory.untied_ulysses ? valid_heads_per_stage(at) : std::vector<int64_t>{};
          const int64_t stage = stages.empty() ? 0 : stages.front();
          at.memory.heads_per_stage = stage;
          at.memory.untied_ulysses = stage > 0;
          const int64_t local = at.training.seq_len / at.parallel.ulysses_degree;
          std::vector<int64_t> peaks;
          const std::vector<int64_t> tiles = mlp_tile_candidates(at.model.d_model, local);
          for (int64_t tokens : tiles) {
            at.memory.mlp_tile_tokens = tokens;
            peaks.push_back(plan_peak(at).peak_bytes);
          }
          INFO(base.model.flavor << " mask " << mask << (keep ? " keeping attention" : "") << " at "
                                 << at.training.seq_len << ", " << stage << " heads a stage");
          CHECK(std::is_sorted(peaks.begin(), peaks.end()));
          // the last tile at the lowest peak, found by walking them all
          const size_t last_lowest = std::upper_bound(peaks.begin(), peaks.end(), peaks.front()) - peaks.begin() - 1;
          at.memory.mlp_tile_tokens = kMlpTileTokensAuto;
          CHECK(planned_mlp_tile_tokens(at) == tiles[last_lowest]);
          ++sets;
        }
      }
    }
  }
  CHECK(sets > 500);  // the sweep ran: six configs, dozens of technique sets each
}

TEST_CASE("\"auto\" stage size and MLP tile reach the longest context of the best fixed sizes",
          "[planner][properties][stages][maxlen]") {
  // At each length "auto" plans the lowest peak of every stage size, standard attention and tile
  // (the finest stages and the d_model tile reach it), so a length fits under "auto" exactly when
  // it fits under some fixed choice: the solver's answer is the largest of theirs.
  RunConfig c = preset("llama3.2-1b-1xh100");
  c.memory.mlp_tile_tokens = 0;  // d_model
  RunConfig standard = c;
  standard.memory.untied_ulysses = false;
  standard.memory.heads_per_stage = 0;
  int64_t best_fixed = solve_max_seq_len(standard);
  for (int64_t heads : valid_heads_per_stage(c)) {
    RunConfig fixed = c;
    fixed.memory.heads_per_stage = heads;
    best_fixed = std::max(best_fixed, solve_max_seq_len(fixed));
  }
  c.memory.heads_per_stage = kHeadsPerStageAuto;
  CHECK(solve_max_seq_len(c) == best_fixed);
  c.memory.mlp_tile_tokens = kMlpTileTokensAuto;
  CHECK(solve_max_seq_len(c) == best_fixed);
  CHECK(best_fixed > 0);
}
