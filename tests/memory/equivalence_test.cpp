// Equivalence of the memory techniques (fp32, CPU): for every valid combination of checkpointing,
// offload, tiled MLP and tiled loss (12 of 16: offload needs checkpointing, and the 4 without it
// are refused), the loss and every parameter gradient of the first step equal
// the plain run's, and every parameter after three optimizer steps on the plain run's gradients,
// within the tolerances derived in engine_test_util.h.
#include <catch2/catch.hpp>

#include <cmath>

#include "../common/engine_test_util.h"
#include "engine/config/techniques.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

MemoryConfig combination(int bits) {
  MemoryConfig m;
  m.activation_checkpointing = bits & 1;
  m.offload_activations = bits & 2;
  m.tiled_mlp = bits & 4;
  m.tiled_loss = bits & 8;
  m.mlp_tile_tokens = 24;   // 64 tokens: tiles of 24, 24, 16
  m.loss_tile_tokens = 20;  // 64 tokens: tiles of 20, 20, 20, 4
  return m;
}

std::string describe(const MemoryConfig& m) {
  std::string s;
  if (m.activation_checkpointing) s += "checkpointing ";
  if (m.offload_activations) s += "offload ";
  if (m.tiled_mlp) s += "tiled-mlp ";
  if (m.tiled_loss) s += "tiled-loss ";
  return s.empty() ? "plain" : s;
}

constexpr int kSteps = 3;

/// One combination's trajectory: step 1's loss and gradients, and the parameters after kSteps
/// steps on `drive`'s gradients (the plain run's); `offloaded`: block inputs moved in step 1.
struct Outcome {
  Trajectory trajectory;
  int64_t offloaded = 0;
};

Outcome run(RunConfig cfg, const MemoryConfig& memory, const std::vector<std::vector<at::Tensor>>* drive) {
  cfg.memory = memory;
  Trainer t(cfg, cpu_rank());
  Outcome o;
  o.trajectory = run_trajectory(t, kSteps, drive);
  o.offloaded = t.offload_store().total_offloaded();
  return o;
}

void check_all_combinations(const RunConfig& cfg) {
  const Outcome plain = run(cfg, combination(0), nullptr);
  const Trajectory& ref = plain.trajectory;
  Trainer layout(cfg, cpu_rank());
  int64_t elements = 0;
  for (auto* g : layout.model().groups()) elements += g->numel();
  // From the arithmetic of this model and batch (engine_test_util.h): the techniques compute the
  // same sums in other tiles; the parameters follow AdamW on the plain run's gradients.
  const int64_t B = cfg.training.batch_size;
  const double loss_tol = loss_tolerance(cfg, B), grad_tol = gradient_tolerance(cfg, B);
  const double param_tol = optimizer_tolerance(cfg, kSteps, elements);
  int valid = 0;
  for (int bits = 1; bits < 16; ++bits) {
    const MemoryConfig m = combination(bits);
    RunConfig with = cfg;
    with.memory = m;
    INFO("techniques: " << describe(m));
    if (!technique_requirement_issues(with).empty()) {
      // Refused with the validator's words, never run with the technique quietly off.
      CHECK_THROWS_WITH(run(cfg, m, &ref.grads),
                        Catch::Contains("memory.offload_activations needs memory.activation_checkpointing = true"));
      continue;
    }
    ++valid;
    const Outcome o = run(cfg, m, &ref.grads);
    const Trajectory& got = o.trajectory;
    CHECK(std::abs(got.losses.front() - ref.losses.front()) <= loss_tol * std::abs(ref.losses.front()));
    std::string worst;
    const double grad_diff = per_param_max_relative_diff(layout, got.grads.front(), ref.grads.front(), &worst);
    INFO("worst gradient " << worst << ": " << grad_diff << " (tolerance " << grad_tol << ")");
    CHECK(grad_diff <= grad_tol);
    const double param_diff = per_param_max_relative_diff(layout, got.params, ref.params, &worst);
    INFO("worst parameter after " << kSteps << " steps " << worst << ": " << param_diff << " (tolerance " << param_tol
                                  << ")");
    CHECK(param_diff <= param_tol);
    // Offload really moved the inputs of blocks 1..L-2 (block 0's is looked up again).
    CHECK(o.offloaded == (m.offload_activations ? offloaded_blocks(cfg.model.n_layers).count : 0));
  }
  CHECK(valid == 11);  // the 12 valid combinations less plain
}

}  // namespace

TEST_CASE("equivalence: every valid technique combination matches the plain run (fp32, CPU)",
          "[engine][memory][equivalence]") {
  RunConfig cfg = tiny_config(3, 64);
  cfg.training.batch_size = 2;
  check_all_combinations(cfg);
}

TEST_CASE("equivalence: every valid combination with tied embeddings and QK-norm", "[engine][memory][equivalence]") {
  RunConfig cfg = tiny_config(2, 64);
  cfg.model.tie_embeddings = true;
  cfg.model.qk_norm = true;
  check_all_combinations(cfg);
}
