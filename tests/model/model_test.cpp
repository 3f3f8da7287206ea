// The Llama decoder over flat groups and BlockFunction against an independent plain-autograd
// reference of the same math; the flat group layout, init and (un)shard behaviour.
#include <catch2/catch.hpp>

#include <cmath>

#include "../common/engine_test_util.h"
#include "engine/model/attention.h"
#include "engine/model/block.h"
#include "engine/model/head.h"
#include "engine/ops/layers.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

// The whole model in ordinary autograd on leaf copies of the parameters: returns loss_local and
// fills `leaves` (group order, spec order) whose .grad() the test compares.
at::Tensor reference_loss(Trainer& t, const RankBatch& batch, std::vector<std::vector<at::Tensor>>* leaves) {
  const ModelConfig& m = t.config().model;
  auto groups = t.model().groups();
  leaves->clear();
  for (auto* g : groups) {
    std::vector<at::Tensor> list;
    for (const auto& spec : g->specs())
      list.push_back(
          g->master.detach().narrow(0, spec.offset, spec.numel()).view(spec.shape).clone().requires_grad_(true));
    leaves->push_back(list);
  }
  const Positions pos = make_positions(batch.first_position, batch.ids.size(1), m.head_dim, m.rope_theta, at::kCPU);
  at::Tensor x = at::embedding((*leaves)[0][0], batch.ids);
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const BlockWeights w = BlockWeights::from_list((*leaves)[1 + i], m.qk_norm);
    at::Tensor h = x + attention_local(rms_norm(x, w.attn_norm, m.norm_eps), w.attn, pos, m);
    x = h + swiglu_mlp(rms_norm(h, w.mlp_norm, m.norm_eps), w.w_gate, w.w_up, w.w_down);
  }
  const auto& head = leaves->back();
  at::Tensor lm = m.tie_embeddings ? (*leaves)[0][0] : head[0];
  at::Tensor norm = m.tie_embeddings ? head[0] : head[1];
  at::Tensor logits = at::linear(rms_norm(x, norm, m.norm_eps), lm);
  return at::cross_entropy_loss(logits.reshape({-1, m.vocab_size}), batch.labels.reshape(-1), {}, at::Reduction::Sum) /
         static_cast<double>(batch.global_tokens);
}

void check_against_reference(const RunConfig& cfg) {
  Trainer t(cfg, cpu_rank());
  const RankBatch batch = make_rank_batch(t.dataset(), 0, cfg.training, cpu_rank(), at::kCPU);
  std::vector<std::vector<at::Tensor>> leaves;
  at::Tensor ref = reference_loss(t, batch, &leaves);
  ref.backward();
  const double loss = t.forward_backward(0);
  INFO("engine loss " << loss << " reference " << ref.item<double>());
  // The same math in other kernels (flat groups, the block Function, the tiled loss): tolerances
  // from the arithmetic of this model and batch (engine_test_util.h).
  const int64_t B = cfg.training.batch_size;
  CHECK(std::abs(loss - ref.item<double>()) <= loss_tolerance(cfg, B) * std::abs(ref.item<double>()));
  auto groups = t.model().groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t p = 0; p < groups[g]->specs().size(); ++p) {
      const auto& spec = groups[g]->specs()[p];
      at::Tensor mine = groups[g]->grad().narrow(0, spec.offset, spec.numel());
      INFO(groups[g]->name() << "." << spec.name);
      CHECK(relative_diff(mine, leaves[g][p].grad().reshape(-1)) <= gradient_tolerance(cfg, B));
    }
  }
}

}  // namespace

TEST_CASE("model: loss and every gradient match a plain autograd reference", "[engine][model][equivalence]") {
  check_against_reference(tiny_config());
}

TEST_CASE("model: batch of two, tied embeddings and QK-norm match the reference", "[engine][model][equivalence]") {
  RunConfig cfg = tiny_config();
  cfg.training.batch_size = 2;
  cfg.model.tie_embeddings = true;
  cfg.model.qk_norm = true;
  check_against_reference(cfg);
}

TEST_CASE("model: flat group layout, no-decay ranges and Llama init", "[engine][model]") {
  RunConfig cfg = tiny_config(4);
  Trainer t(cfg, cpu_rank());
  FlatParamGroup& block = t.model().block(0);
  CHECK(block.numel() == cfg.model.block_params());
  CHECK(t.model().embed().numel() + t.model().head().numel() == cfg.model.non_block_params());
  // The planner's attention projections (its Untied stage weights) are the engine's wq, wk, wv and
  // q/k norms, with QK-norm and without.
  for (const bool qk_norm : {false, true}) {
    ModelConfig m = cfg.model;
    m.qk_norm = qk_norm;
    int64_t projections = 0;
    for (const ParamSpec& p : block_param_specs(m))
      if (p.name == "wq" || p.name == "wk" || p.name == "wv" || p.name == "q_norm" || p.name == "k_norm")
        projections += p.numel();
    CHECK(projections == m.attention_projection_params());
  }
  CHECK(block.full_is_master());
  // Norm weights (the last 2 x d elements) are the only no-decay range, and init to ones.
  REQUIRE(block.no_decay_ranges().size() == 1);
  CHECK(block.no_decay_ranges()[0].first == block.numel() - 2 * cfg.model.d_model);
  CHECK(block.no_decay_ranges()[0].second == block.numel());
  at::Tensor norms = block.master.detach().narrow(0, block.numel() - 2 * cfg.model.d_model, 2 * cfg.model.d_model);
  CHECK(norms.eq(1).all().item<bool>());
  // Output projections use std 0.02 / sqrt(2 L), inputs 0.02.
  const double std_wq = block.view(0).std().item<double>();
  const double std_wo = block.view(3).std().item<double>();
  CHECK(std_wq == Approx(0.02).epsilon(0.1));
  CHECK(std_wo == Approx(0.02 / std::sqrt(8.0)).epsilon(0.1));
  // Same seed, same weights; other seed, other weights.
  Trainer same(cfg, cpu_rank());
  CHECK(same.model().block(2).master.equal(t.model().block(2).master));
  cfg.training.seed += 1;
  Trainer other(cfg, cpu_rank());
  CHECK(!other.model().block(2).master.equal(t.model().block(2).master));
}

TEST_CASE("model: bf16 groups gather a cast copy, free it on reshard, keep views valid", "[engine][model]") {
  RunConfig cfg = tiny_config();
  cfg.training.dtype = DType::BFloat16;
  Trainer t(cfg, cpu_rank());
  FlatParamGroup& g = t.model().block(1);
  CHECK_FALSE(g.full_is_master());
  CHECK_FALSE(g.is_unsharded());
  at::Tensor view = g.view(0);
  CHECK(view.storage().nbytes() == 0);  // resharded: no memory behind the views
  g.unshard();
  CHECK(view.storage().nbytes() == static_cast<size_t>(g.padded_numel() * 2));
  CHECK(view.scalar_type() == at::kBFloat16);
  at::Tensor expected = g.master.detach().narrow(0, 0, view.numel()).to(at::kBFloat16).view(view.sizes());
  CHECK(view.equal(expected));
  g.reshard();
  CHECK(view.storage().nbytes() == 0);
  // A bf16 step trains: finite loss near ln(vocab) at init.
  const double loss = t.forward_backward(0);
  CHECK(std::isfinite(loss));
  CHECK(loss == Approx(std::log(64.0)).epsilon(0.1));
  CHECK(t.model().block(0).grad().abs().sum().item<double>() > 0);
}
