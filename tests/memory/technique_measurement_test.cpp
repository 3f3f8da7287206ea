// Measurement of each memory technique on an 8-layer model with the memory tracker, printed beside
// the planner's prediction for the same config and asserted within 15% of it: checkpointing cuts
// the activation peak >= 3x, offload moves the checkpointed inputs to the host pool, tiled loss
// and tiled MLP cut their phase's workspace by at least half the tile count; to the byte where a
// walk's rule is the point (the offload's hold, one rank's Untied backward buffers).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "measure_util.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

constexpr double kPlannerTolerance = 0.15;

int64_t planned_states(const MemoryPlan& plan) {
  return plan.category_bytes[0] + plan.category_bytes[1] + plan.category_bytes[2];
}

void report(const char* what, int64_t measured, int64_t planned) {
  std::printf("  %-44s measured %10lld B   planner %10lld B   planner/measured %.3f\n", what,
              static_cast<long long>(measured), static_cast<long long>(planned),
              measured ? static_cast<double>(planned) / measured : 0.0);
}

void check_close_to_planner(int64_t measured, int64_t planned) {
  INFO("measured " << measured << " planned " << planned);
  CHECK(measured > 0);
  CHECK(std::abs(static_cast<double>(planned - measured)) <= kPlannerTolerance * measured);
}

bool is_phase_of(const std::string& path, const std::string& part) {
  return path.size() >= part.size() && path.compare(path.size() - part.size(), part.size(), part) == 0;
}

// Largest bytes of `category` at the peak of any phase whose path ends with one of `parts`.
int64_t measured_category_peak(const Measured& m, MemCategory category, const std::vector<std::string>& parts) {
  int64_t best = 0;
  for (const auto& [path, rec] : m.phases)
    for (const auto& part : parts)
      if (is_phase_of(path, part)) best = std::max(best, rec.category_at_peak[static_cast<int>(category)]);
  return best;
}

int64_t planned_category_peak(const MemoryPlan& plan, MemCategory category, const std::vector<std::string>& parts) {
  int64_t best = 0;
  for (const auto& p : plan.phases)
    for (const auto& part : parts)
      if (is_phase_of(p.name, part)) best = std::max(best, p.category_bytes[static_cast<int>(category)]);
  return best;
}

}  // namespace

TEST_CASE("measurement: checkpointing cuts the activation peak at least 3x (planner within 15%)",
          "[engine][memory][measure]") {
  RunConfig plain = measurement_config();
  RunConfig ckpt = plain;
  ckpt.memory.activation_checkpointing = true;
  const Measured mp = measure_step(plain), mc = measure_step(ckpt);
  const MemoryPlan pp = plan_memory(plain), pc = plan_memory(ckpt);
  const int64_t act_plain = mp.device_peak - mp.model_state_bytes();
  const int64_t act_ckpt = mc.device_peak - mc.model_state_bytes();
  std::printf("checkpointing (8 layers, 256 tokens, d 64):\n");
  report("activation peak, plain", act_plain, pp.peak_bytes - planned_states(pp));
  report("activation peak, checkpointing", act_ckpt, pc.peak_bytes - planned_states(pc));
  std::printf("  reduction %.2fx measured, %.2fx planned\n", double(act_plain) / act_ckpt,
              double(pp.peak_bytes - planned_states(pp)) / (pc.peak_bytes - planned_states(pc)));
  CHECK(act_plain >= 3 * act_ckpt);
  check_close_to_planner(act_plain, pp.peak_bytes - planned_states(pp));
  check_close_to_planner(act_ckpt, pc.peak_bytes - planned_states(pc));
  check_close_to_planner(mp.device_peak, pp.peak_bytes);
  check_close_to_planner(mc.device_peak, pc.peak_bytes);
}

TEST_CASE("measurement: offload moves the checkpointed inputs to the host pool (planner within 15%)",
          "[engine][memory][measure]") {
  RunConfig ckpt = measurement_config();
  ckpt.memory.activation_checkpointing = true;
  RunConfig offload = ckpt;
  offload.memory.offload_activations = true;
  const Measured mc = measure_step(ckpt), mo = measure_step(offload);
  const MemoryPlan pc = plan_memory(ckpt), po = plan_memory(offload);
  const int64_t L = ckpt.model.n_layers;
  const int64_t input_bytes = ckpt.training.batch_size * ckpt.training.seq_len * ckpt.model.d_model * 4;
  std::printf("offload (8 layers, one checkpointed input = %lld B):\n", static_cast<long long>(input_bytes));
  report("host pool peak", mo.host_peak, po.host_bytes);
  const int64_t fall_after_forward = mc.phases.at("fwd/loss").device_begin - mo.phases.at("fwd/loss").device_begin;
  report("device bytes after the forward, fall", fall_after_forward, (L - 1) * input_bytes);
  report("device peak, fall", mc.device_peak - mo.device_peak, pc.peak_bytes - po.peak_bytes);
  // Exactly the inputs of blocks 1..L-2 live in the host pool; without offload nothing does.
  const int64_t offloaded = offloaded_blocks(L).count;
  CHECK(mo.host_peak == offloaded * input_bytes);
  CHECK(mc.host_peak == 0);
  CHECK(mo.phases.at("fwd/loss").host_begin == offloaded * input_bytes);
  // Device bytes fall by what moved and by block 0's input (looked up again in its backward):
  // after the forward and through the loss's backward; in the top block's backward by one input
  // less (block L-2's input is prefetched while block L-1 recomputes). The step's peak lies in one
  // of those phases (in the loss's backward for this model), so it falls by one of the two.
  auto fall_in = [&](const std::string& phase) {
    return mc.phases.at(phase).device_peak - mo.phases.at(phase).device_peak;
  };
  const std::string top_block = "bwd/block." + std::to_string(L - 1) + "/mlp";
  CHECK(fall_after_forward == (L - 1) * input_bytes);
  CHECK(fall_in("bwd/loss") == (L - 1) * input_bytes);
  CHECK(fall_in(top_block) == (L - 2) * input_bytes);
  const int64_t peak_fall = mc.device_peak - mo.device_peak;
  CHECK((peak_fall == (L - 1) * input_bytes || peak_fall == (L - 2) * input_bytes));
  check_close_to_planner(mo.host_peak, po.host_bytes);
  check_close_to_planner(mc.device_peak - mo.device_peak, pc.peak_bytes - po.peak_bytes);
  check_close_to_planner(mo.device_peak, po.peak_bytes);
}

TEST_CASE(
    "measurement: an offloaded input stays on the device through the next block's attention, and the "
    "planner holds it there to the byte",
    "[engine][memory][measure][offload]") {
  RunConfig cfg = measurement_config();
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
  const Measured m = measure_step(cfg);
  const MemoryPlan plan = plan_memory(cfg);
  const int64_t input_bytes = cfg.training.batch_size * cfg.training.seq_len * cfg.model.d_model * 4;  // fp32
  auto measured = [&](const std::string& phase) { return m.phases.at(phase).device_peak; };
  auto planned = [&](const std::string& phase) {
    for (const auto& p : plan.phases)
      if (p.name == phase) return p.resident_bytes;
    FAIL("the plan has no phase " << phase);
    return int64_t{0};
  };
  // Block 1 is the first whose input is copied (block 0's is looked up again): block 2's attention
  // holds block 1's input beside its own, block 2's MLP no longer (OffloadStore::put). Every block
  // computes the same buffers and leaves the same residue behind (the engine: the CPU generator's
  // state each checkpointed block saves for its recompute, 5056 B, which the planner leaves out),
  // so past that residue the differences are that input exactly, measured and planned.
  for (const auto& peak :
       {std::function<int64_t(const std::string&)>(measured), std::function<int64_t(const std::string&)>(planned)}) {
    const int64_t residue = peak("fwd/block.2/mlp") - peak("fwd/block.1/mlp");
    INFO("one block's residue " << residue << " B");
    CHECK(residue >= 0);
    CHECK(residue < input_bytes / 8);
    CHECK(peak("fwd/block.2/attn") - peak("fwd/block.1/attn") - residue == input_bytes);
    CHECK(peak("fwd/block.7/attn") - peak("fwd/block.2/attn") == 5 * residue);  // block 7 releases block 6's
  }
  CHECK(planned("fwd/block.2/mlp") == planned("fwd/block.1/mlp"));
}

/// `category`'s peak in the phases of one config, measured and planned.
struct CategoryPeaks {
  int64_t measured = 0, planned = 0;
};

/// A tiled technique against its untiled config: `category` in the phases ending with `phases`
/// shrinks by at least half the tile count, and each side (and the tiled step peak) lies within
/// 15% of the planner's prediction. `header` says which technique (printed above the figures).
/// Returns the untiled and the tiled peaks.
static std::pair<CategoryPeaks, CategoryPeaks> check_tiling_cut(const std::string& header, const RunConfig& plain,
                                                                const RunConfig& tiled, int64_t tiles,
                                                                MemCategory category,
                                                                const std::vector<std::string>& phases) {
  const Measured mp = measure_step(plain), mt = measure_step(tiled);
  const MemoryPlan pp = plan_memory(plain), pt = plan_memory(tiled);
  const int64_t m_plain = measured_category_peak(mp, category, phases);
  const int64_t m_tiled = measured_category_peak(mt, category, phases);
  const int64_t p_plain = planned_category_peak(pp, category, phases);
  const int64_t p_tiled = planned_category_peak(pt, category, phases);
  const std::string what = std::string(to_string(category)) + " in its phases, ";
  std::printf("%s:\n", header.c_str());
  report((what + "untiled").c_str(), m_plain, p_plain);
  report((what + "tiled").c_str(), m_tiled, p_tiled);
  std::printf("  reduction %.2fx measured, %.2fx planned (need >= %.1f)\n", double(m_plain) / m_tiled,
              double(p_plain) / p_tiled, tiles / 2.0);
  CHECK(2 * m_plain >= tiles * m_tiled);
  check_close_to_planner(m_plain, p_plain);
  check_close_to_planner(m_tiled, p_tiled);
  check_close_to_planner(mt.device_peak, pt.peak_bytes);
  return {{m_plain, p_plain}, {m_tiled, p_tiled}};
}

TEST_CASE("measurement: tiled loss cuts the loss-phase workspace by half the tile count (planner within 15%)",
          "[engine][memory][measure]") {
  RunConfig plain = long_measurement_config();
  RunConfig tiled = plain;
  tiled.memory.tiled_loss = true;
  const int64_t tiles = loss_tile(tiled.memory, tiled.model, tiled.training.batch_size, tiled.training.seq_len).count;
  check_tiling_cut("tiled loss (" + std::to_string(tiles) + " tiles of " +
                       std::to_string(plain.memory.loss_tile_tokens) + " tokens, vocab " +
                       std::to_string(plain.model.vocab_size) + ")",
                   plain, tiled, tiles, MemCategory::LossWorkspace, {"fwd/loss", "bwd/loss"});
}

TEST_CASE(
    "measurement: tiled MLP cuts the MLP workspace by half the tile count (planner within 15%, its MLP "
    "workspace, tiled or not, to the byte)",
    "[engine][memory][measure]") {
  RunConfig plain = long_measurement_config();
  plain.memory.activation_checkpointing = true;  // the MLP phases then hold only their workspace
  RunConfig tiled = plain;
  tiled.memory.tiled_mlp = true;
  const int64_t tiles = mlp_tile(tiled.memory, tiled.model, tiled.training.batch_size, tiled.training.seq_len).count;
  const auto [untiled_peaks, tiled_peaks] = check_tiling_cut(
      "tiled MLP (" + std::to_string(tiles) + " tiles of " + std::to_string(plain.memory.mlp_tile_tokens) +
          " tokens, d_ffn " + std::to_string(plain.model.d_ffn) + ", checkpointing on)",
      plain, tiled, tiles, MemCategory::MlpWorkspace, {"/mlp", "/recompute"});
  // The walk's rule is the engine's to the byte: untiled, each weight gradient appears with its
  // autograd node (the down projection's at the backward's start, the gate's and up's, [512, 64]
  // fp32 = 131072 B each, with their input-gradient products after the peak, the norm's [64] last;
  // a walk holding all of them from the start plans 262400 B more); tiled, the Function's three
  // at its start and the norm's last (256 B).
  CHECK(untiled_peaks.measured == untiled_peaks.planned);
  CHECK(tiled_peaks.measured == tiled_peaks.planned);
}

TEST_CASE(
    "measurement: the Untied stages' backward on one rank holds the saved output and its gradient in head "
    "layout, the weight rows of its stage and KV range and, below fp32, fp32 sums of the q/k/v weight "
    "gradients, and the planner walks them there",
    "[engine][memory][measure][untied]") {
  // One rank (P = 1), 2 stages of 2 query heads, each reading 1 KV head (GQA): the backward copies
  // the stage's slice of the saved output and of its gradient into the head-layout buffers the
  // kernel reads (StageBuffers::o_h, do_h). On an H200 the plan left both out: the 1B's backward
  // attention at 128K measured 2 x [S, 16, 64] bf16 (0.5 GiB) above it. Here at two lengths the
  // per-token growth of the backward attention's workspace, measured and planned, is equal to the
  // byte; a buffer of [S, 2, 16] fp32 missing from the walk would move the planned growth by 128 B
  // a token (131072 B from 1024 to 2048 tokens).
  //
  // What does not grow with the tokens: the rows of wq the stage projects with ([2, 16, 64]) and of
  // wk and wv for its KV range ([1, 16, 64] each), and in bf16 the fp32 sums of the q/k/v weight
  // gradients (8192 params, 16384 B beyond their bf16 gradients); the same H200 run measured the
  // 1B's 18 MiB of them. The walk now holds them, so what it leaves out (small index tensors and
  // [d]-sized statistics, 1048 B here in both dtypes) is less than the smallest of them, one KV
  // range's wk rows: a walk without any of them fails.
  auto bwd_attention_workspace = [](const RunConfig& cfg) {
    std::vector<std::string> phases;  // every block's backward attention
    for (int64_t i = 0; i < cfg.model.n_layers; ++i) phases.push_back("bwd/block." + std::to_string(i) + "/attn");
    return std::pair{measured_category_peak(measure_step(cfg), MemCategory::AttentionWorkspace, phases),
                     planned_category_peak(plan_memory(cfg), MemCategory::AttentionWorkspace, phases)};
  };
  for (const DType dtype : {DType::Float32, DType::BFloat16}) {
    RunConfig cfg = long_measurement_config();  // 4 query heads, 2 KV heads of 16, d 64
    cfg.training.dtype = dtype;
    cfg.memory.activation_checkpointing = true;
    cfg.memory.untied_ulysses = true;
    cfg.memory.heads_per_stage = 2;
    RunConfig twice = cfg;
    twice.training.seq_len = 2 * cfg.training.seq_len;
    const auto [m1, p1] = bwd_attention_workspace(cfg);
    const auto [m2, p2] = bwd_attention_workspace(twice);
    const int64_t c = dtype == DType::Float32 ? 4 : 2;
    const int64_t kv_range_rows = 1 * cfg.model.head_dim * cfg.model.d_model * c;  // [1, 16, 64]
    INFO((c == 4 ? "fp32" : "bf16") << ": backward attention workspace at " << cfg.training.seq_len
                                    << " tokens: measured " << m1 << " B, planned " << p1
                                    << " B; at twice the tokens: " << m2 << " B, " << p2 << " B");
    CHECK(m2 - m1 == p2 - p1);
    CHECK(std::abs(m1 - p1) < kv_range_rows);
  }
}
