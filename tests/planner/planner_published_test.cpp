// The planner against the published results (../shared/reference/published-results.md): the
// Llama3-8B / 3M / 8xH100 memory ladder rung by rung, the maximum contexts of the ALST stack and
// of the full stack with Untied Ulysses, and tokens/s per GPU at 128K and 3M. The tolerances are
// the issue's; docs/planner.md explains every remaining difference.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "engine/config/preset.h"
#include "engine/config/sizes.h"
#include "engine/planner/plan_shapes.h"
#include "engine/planner/planner.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

RunConfig preset(const std::string& name) {
  const LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/" + name + ".toml");
  REQUIRE(loaded.ok());
  return loaded.config;
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

double cat_gib(const MemoryPlan& p, PlanCategory c) { return gib(p.category_bytes[static_cast<int>(c)]); }

/// Bytes of the plan's terms named `name` at its peak.
int64_t term_bytes(const MemoryPlan& plan, const std::string& name) {
  int64_t sum = 0;
  for (const auto& t : plan.terms)
    if (t.name == name) sum += t.bytes;
  return sum;
}

double model_states(const MemoryPlan& p) {
  return cat_gib(p, PlanCategory::Params) + cat_gib(p, PlanCategory::Grads) + cat_gib(p, PlanCategory::Optimizer);
}

/// The published "attention activations" column as the planner splits it: the attention phase's
/// workspace and its all-to-all buffers.
double attention_activations(const MemoryPlan& p) {
  return cat_gib(p, PlanCategory::AttentionWorkspace) + cat_gib(p, PlanCategory::CommBuffers);
}

constexpr int64_t kM = int64_t{1} << 20;

}  // namespace

TEST_CASE("ladder on Llama3-8B 3M 8xH100: the published verdicts rung by rung", "[planner][published]") {
  const auto rungs = plan_ladder(preset("llama3-8b-3m-8xh100"));
  REQUIRE(rungs.size() == 8);
  const char* names[] = {"default", "fsdp",   "ulysses",        "checkpointing",
                         "offload", "tiling", "untied_ulysses", "offload_optimizer"};
  const bool fits[] = {false, false, false, false, false, true, true, true};
  for (int i = 0; i < 8; ++i) {
    INFO("rung " << names[i] << ": peak " << gib(rungs[i].plan.peak_bytes) << " GiB");
    CHECK(rungs[i].name == names[i]);
    CHECK(rungs[i].plan.fits() == fits[i]);
  }
  // Model states: 119 GiB unsharded, 15.0 GiB with FSDP over 8 ranks, on every later rung.
  CHECK(model_states(rungs[0].plan) == Approx(119.7).margin(0.1));
  for (int i = 1; i < 7; ++i) CHECK(model_states(rungs[i].plan) == Approx(15.0).margin(0.1));
  // Totals within 15% of the published 64.6 GiB (ALST) and 51.1 GiB (Untied Ulysses). The
  // published Untied stack keeps the attention's normed input [s, d], which this engine folds into
  // the Function's projections (docs/planner.md section 4): the comparison adds it back, and
  // Odyssey's own total is below the published one.
  const double alst = gib(rungs[5].plan.peak_bytes), untied = gib(rungs[6].plan.peak_bytes);
  const double normed_input =
      gib(term_bytes(rungs[6].plan, "gradient between blocks (dy; dh, dx in place)"));  // one [s, d]
  REQUIRE(normed_input > 0);
  CHECK(std::abs(alst / 64.6 - 1) < 0.15);
  CHECK(std::abs((untied + normed_input) / 51.1 - 1) < 0.15);
  CHECK(untied < 51.1);
  // Untied Ulysses fits with a smaller attention term (published 33.0 -> 19.5 GiB).
  CHECK(attention_activations(rungs[6].plan) < attention_activations(rungs[5].plan));
  CHECK(cat_gib(rungs[6].plan, PlanCategory::AttentionWorkspace) <
        cat_gib(rungs[5].plan, PlanCategory::AttentionWorkspace));
  CHECK(std::abs(attention_activations(rungs[5].plan) / 33.0 - 1) < 0.15);
  // Both fitting rungs peak in an attention backward (the attention stage is what Untied shrinks).
  CHECK(rungs[5].plan.peak_phase.find("/attn") != std::string::npos);
  CHECK(rungs[6].plan.peak_phase.find("/attn") != std::string::npos);
  // Offload without tiling: OOM because of the non-attention part (the untiled loss).
  CHECK(rungs[4].plan.dominant_term.rfind("loss_workspace", 0) == 0);
  CHECK(rungs[4].plan.fits_host);
  // Optimizer offload: of the 16 bytes a parameter, the device keeps the 2 of bf16 parameters
  // (8.03 B params x 2 B / 8 ranks = 1.87 GiB); the node's host holds all 16 (119.7 GiB) on top
  // of the offloaded block inputs (the fused host AdamW takes no temporary).
  CHECK(model_states(rungs[7].plan) == Approx(1.87).margin(0.01));
  CHECK(gib(rungs[7].plan.host_bytes) - gib(rungs[6].plan.host_bytes) == Approx(119.7).margin(0.1));
  CHECK(rungs[7].plan.peak_bytes < rungs[6].plan.peak_bytes);
}

TEST_CASE("max context on Llama3-8B 8xH100: >= 5M with the full stack, less without head chunking",
          "[planner][published]") {
  const RunConfig full = preset("llama3-8b-5m-8xh100-untied");
  const int64_t full_max = solve_max_seq_len(full);
  CHECK(full_max >= 5 * kM);  // published: 5M fits
  RunConfig alst = full;
  alst.memory.untied_ulysses = false;
  const int64_t alst_max = solve_max_seq_len(alst);
  // Published: the ALST stack fits 3M and runs out at 4M (Untied Ulysses paper); ALST's own paper
  // reports 3.7M. This engine keeps about 3.5 [s, d] per local token less than those stacks at the
  // ALST peak (docs/planner.md §10), so the engine-faithful answer is above that bracket; what it
  // rests on, the bytes per token, is checked against the engine by parallel_tests "[maxlen]".
  // Here: it fits what the published stack fits, and head chunking still buys at least a third more.
  CHECK(alst_max >= 3 * kM);
  CHECK(full_max >= 4 * alst_max / 3);
  // The 5M preset itself fits.
  CHECK(plan_memory(full).fits());
}

TEST_CASE("optimizer offload: Llama3-8B on one H100 past ALST's 500K, its cost under 10% of the step",
          "[planner][published]") {
  const RunConfig one = preset("llama3-8b-1xh100");
  CHECK(plan_memory(one).fits());
  CHECK(solve_max_seq_len(one) >= 500 * 1024);  // ALST: 500K tokens on a single H100
  RunConfig on_device = one;
  on_device.memory.offload_optimizer = false;  // 119.7 GiB of states: no context fits at all
  CHECK(solve_max_seq_len(on_device) == 0);
  // Step time at the preset's 512K: the host AdamW and the PCIe copies are at most 10% of it,
  // even if none of it were hidden.
  const StepTimePlan t = plan_memory(one).time;
  CHECK(t.host_optimizer_s > 0);
  CHECK(t.optimizer_pcie_s > 0);
  CHECK((t.host_optimizer_s + t.optimizer_pcie_s) / t.step_s <= 0.10);
  // Pipelined under the next forward (a GPU target, engine/layout/schedule_rules.h): a block's
  // pass (218M parameters) is far shorter than its forward at 512K, so the step waits for the
  // embedding's and block 0's passes and the uploads only: more than those two passes' share of
  // the host AdamW, less than the whole.
  const planner_detail::PlanShapes shapes = planner_detail::make_shapes(one);
  const double first_share =
      static_cast<double>(shapes.embed_layout.shard_numel + shapes.block_layout.shard_numel) /
      static_cast<double>(shapes.embed_layout.shard_numel + shapes.L * shapes.block_layout.shard_numel +
                          shapes.head_layout.shard_numel);
  CHECK(t.optimizer_exposed_s >= first_share * t.host_optimizer_s);
  CHECK(t.optimizer_exposed_s < 0.5 * t.host_optimizer_s);
  // On 8xH100 the rung adds context on top of the full stack, to issue 15's 8M (8 x 2^20 tokens).
  // At 8M the node's host binds: 30 offloaded block inputs of 8 GiB per rank (block 0's is looked
  // up again) and the host optimizer's 15 GiB per rank, 2039.7 of 2048 GiB (docs/planner.md).
  RunConfig eight = preset("llama3-8b-5m-8xh100-untied");
  const int64_t without = solve_max_seq_len(eight);
  eight.memory.offload_optimizer = true;
  CHECK(solve_max_seq_len(eight) > without);
  CHECK(solve_max_seq_len(eight) >= 8 * kM);
}

TEST_CASE("throughput within 25% of the published Untied Ulysses tokens/s per GPU", "[planner][published]") {
  RunConfig c = preset("llama3-8b-5m-8xh100-untied");
  c.training.seq_len = 128 * 1024;
  const double at_128k = plan_memory(c).time.tokens_per_s_per_device;
  CHECK(std::abs(at_128k / 2281.05 - 1) < 0.25);
  c.training.seq_len = 3 * kM;
  const double at_3m = plan_memory(c).time.tokens_per_s_per_device;
  CHECK(std::abs(at_3m / 166.32 - 1) < 0.25);
  // The published 5M point too (98.25), a check on the attention-dominated end.
  c.training.seq_len = 5 * kM;
  CHECK(std::abs(plan_memory(c).time.tokens_per_s_per_device / 98.25 - 1) < 0.25);
}
