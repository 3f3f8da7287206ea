// Equivalence of the memory techniques (fp32, CPU): for all 16 combinations of checkpointing,
// offload, tiled MLP and tiled loss, the loss and every parameter gradient equal the plain run
// within 1e-5 relative, and three optimizer steps later every parameter within 1e-4.
#include <catch2/catch.hpp>

#include <cmath>

#include "../engine_test_util.h"

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

struct Outcome {
  double loss = 0;
  std::vector<at::Tensor> grads;
  std::vector<at::Tensor> params_after_3;
  int64_t offloaded = 0;
};

Outcome run(RunConfig cfg, const MemoryConfig& memory) {
  cfg.memory = memory;
  Outcome o;
  {
    Trainer t(cfg, cpu_rank());
    o.loss = t.forward_backward(0);
    o.grads = group_grads(t);
    o.offloaded = t.offload_store().total_offloaded();
  }
  Trainer t(cfg, cpu_rank());
  for (int i = 0; i < 3; ++i) t.step();
  o.params_after_3 = group_params(t);
  return o;
}

void check_all_combinations(const RunConfig& cfg) {
  const Outcome plain = run(cfg, combination(0));
  Trainer layout(cfg, cpu_rank());
  for (int bits = 1; bits < 16; ++bits) {
    const MemoryConfig m = combination(bits);
    const Outcome o = run(cfg, m);
    INFO("techniques: " << describe(m));
    CHECK(std::abs(o.loss - plain.loss) <= 1e-5 * std::abs(plain.loss));
    std::string worst;
    const double grad_diff = per_param_max_relative_diff(layout, o.grads, plain.grads, &worst);
    INFO("worst gradient " << worst << ": " << grad_diff);
    CHECK(grad_diff <= 1e-5);
    const double param_diff = per_param_max_relative_diff(layout, o.params_after_3, plain.params_after_3, &worst);
    INFO("worst parameter after 3 steps " << worst << ": " << param_diff);
    CHECK(param_diff <= 1e-4);
    // Offload really moved the inputs of blocks 0..L-2 (only together with checkpointing).
    const bool offloads = m.activation_checkpointing && m.offload_activations;
    CHECK(o.offloaded == (offloads ? cfg.model.n_layers - 1 : 0));
  }
}

}  // namespace

TEST_CASE("equivalence: all 16 technique combinations match the plain run (fp32, CPU)", "[engine][memory]") {
  RunConfig cfg = tiny_config(3, 64);
  cfg.training.batch_size = 2;
  check_all_combinations(cfg);
}

TEST_CASE("equivalence: all 16 combinations with tied embeddings and QK-norm", "[engine][memory]") {
  RunConfig cfg = tiny_config(2, 64);
  cfg.model.tie_embeddings = true;
  cfg.model.qk_norm = true;
  check_all_combinations(cfg);
}
