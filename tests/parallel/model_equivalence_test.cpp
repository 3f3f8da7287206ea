// The distributed stack against the single-rank plain reference on the global batch (fp32, CPU,
// in-process rank threads over Gloo): world sizes 1, 2, 4; MHA, n_kv_heads = P and < P; every
// combination of {FSDP, Ulysses, Untied Ulysses x each valid heads_per_stage} x {checkpointing,
// offload, tiling} (kept attention on every other checkpointed case) (optimizer offload on every other pair of cases, under both FSDP reduce-scatter
// schedules): the loss and every gradient of the first step, and every parameter after three
// optimizer steps on the reference's gradients (the sharded AdamW on identical input), each
// within the tolerances derived in engine_test_util.h. defines: test cases [equivalence]
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "../common/engine_test_util.h"
#include "engine/parallel/rank_launch.h"
#include "engine/train/optimizer.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

struct Heads {
  const char* name;
  int64_t n_heads, n_kv_heads;
};

/// Tiny model (d_model 64, 2 layers, seq 64, 8 heads of 8) with the given heads.
RunConfig model_config(const Heads& heads) {
  RunConfig c = tiny_config(/*layers=*/2, /*seq=*/64);
  c.model.d_model = 64;
  c.model.n_heads = heads.n_heads;
  c.model.n_kv_heads = heads.n_kv_heads;
  c.model.head_dim = 8;
  c.model.d_ffn = 96;
  c.parallel.timeout_s = 60;
  return c;
}

/// MHA, n_kv_heads = P and n_kv_heads < P (GQA 8/2 instead when P = 1).
std::vector<Heads> head_configs(int P) {
  if (P == 1) return {{"mha", 8, 8}, {"gqa 8/2", 8, 2}};
  if (P == 2) return {{"mha", 8, 8}, {"kv = P = 2", 8, 2}, {"kv 1 < P = 2", 8, 1}};
  return {{"mha", 8, 8}, {"kv = P = 4", 8, 4}, {"kv 2 < P = 4", 8, 2}};
}

/// {checkpointing, offload (needs checkpointing), tiling (MLP + loss)} on/off: six valid combos.
std::vector<MemoryConfig> memory_combos() {
  std::vector<MemoryConfig> out;
  for (int bits = 0; bits < 8; ++bits) {
    MemoryConfig m;
    m.activation_checkpointing = bits & 1;
    m.offload_activations = bits & 2;
    if (m.offload_activations && !m.activation_checkpointing) continue;
    m.tiled_mlp = m.tiled_loss = bits & 4;
    m.mlp_tile_tokens = 12;  // local sequences of 16..64 tokens: several tiles, the last one short
    m.loss_tile_tokens = 10;
    out.push_back(m);
  }
  return out;
}

struct Case {
  Heads heads;
  bool fsdp = false;
  bool untied = false;
  int64_t heads_per_stage = 0;
  bool defer_reduce_scatter = false;  ///< FSDP: each block's reduction finished during the next block's backward
  MemoryConfig memory;
  std::string describe(int W, int P) const {
    std::string s = "W=" + std::to_string(W) + " P=" + std::to_string(P) + " " + heads.name + (fsdp ? " fsdp" : "") +
                    (P > 1 && !untied ? " ulysses" : "") +
                    (untied ? " untied(hps=" + std::to_string(heads_per_stage) + ")" : "") +
                    (defer_reduce_scatter ? " deferred-reduce-scatter" : "");
    if (memory.activation_checkpointing) s += " ckpt";
    if (memory.keep_attention)
      s += std::string(memory.offload_kept_attention ? " kept-attention-on-host" : " kept-attention") +
           (memory.keep_attention_blocks > 0 ? "(top " + std::to_string(memory.keep_attention_blocks) + ")" : "");
    if (memory.offload_activations) s += " offload";
    if (memory.tiled_mlp) s += " tiling";
    if (memory.offload_optimizer) s += " offload-optimizer";
    return s;
  }
};

std::vector<Case> cases_for(int W, int P) {
  std::vector<Case> cases;
  for (const Heads& h : head_configs(P)) {
    std::vector<std::pair<bool, int64_t>> attention{{false, 0}};  // plain (Ulysses when P > 1)
    for (int64_t hps = P; hps <= h.n_heads; hps += P)
      if ((h.n_heads / P) % (hps / P) == 0) attention.push_back({true, hps});
    for (bool fsdp : {false, true}) {
      if (W == 1 && !fsdp) continue;  // W = 1 plain attention without FSDP is the reference itself
      for (auto [untied, hps] : attention) {
        const std::vector<MemoryConfig> combos = memory_combos();
        for (size_t k = 0; k < combos.size(); ++k) {
          // FSDP cases alternate the two reduce-scatter schedules (blocking, as on CPU runs, and
          // deferred, as on GPUs) so that each schedule meets every memory technique across the
          // attention variants without doubling the cases.
          Case c{h, fsdp, untied, hps, fsdp && W > 1 && (k + (untied ? 1 : 0)) % 2 == 1, combos[k]};
          // Optimizer offload alternates over pairs of combos (k / 2), so that under FSDP it meets
          // both reduce-scatter schedules (k + untied's parity) and, across the plain and Untied
          // attention, every memory technique at every world size.
          c.memory.offload_optimizer = (k / 2 + (untied ? 1 : 0) + (fsdp ? 1 : 0)) % 2 == 0;
          // Kept attention alternates over the checkpointed combos, the other way for the Untied
          // stages, so each attention path meets it with and without offload and tiling.
          c.memory.keep_attention =
              c.memory.activation_checkpointing && (k + (untied ? 1 : 0) + (fsdp ? 1 : 0)) % 2 == 1;
          // ... on the host beside the offloaded inputs without FSDP; with it on the device, in
          // the top block only (the others recompute theirs)
          c.memory.offload_kept_attention = c.memory.keep_attention && c.memory.offload_activations && !fsdp;
          c.memory.keep_attention_blocks = c.memory.keep_attention && fsdp ? 1 : 0;
          c.memory.untied_ulysses = untied;
          c.memory.heads_per_stage = hps;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

/// One rank's view of one case: the global loss and this rank's gradient and parameter shards.
struct RankOutcome {
  double loss = 0;
  std::vector<at::Tensor> grads, params;
  std::vector<int64_t> numel;
  bool sharded = false;
};

/// Whole flat tensors from the ranks' shards (FSDP: concatenated in rank order and unpadded).
std::vector<at::Tensor> assemble(const std::vector<RankOutcome>& ranks, bool grads) {
  std::vector<at::Tensor> out;
  for (size_t g = 0; g < ranks[0].grads.size(); ++g) {
    if (!ranks[0].sharded) {
      out.push_back(grads ? ranks[0].grads[g] : ranks[0].params[g]);
      continue;
    }
    std::vector<at::Tensor> shards;
    for (const auto& r : ranks) shards.push_back(grads ? r.grads[g] : r.params[g]);
    out.push_back(at::cat(shards).narrow(0, 0, ranks[0].numel[g]));
  }
  return out;
}

constexpr int kSteps = 3;

/// The single-rank plain run on the global batch of D sequences: each step's loss and gradients,
/// and the parameters after kSteps steps.
Trajectory reference(const Heads& h, int D) {
  RunConfig cfg = model_config(h);
  cfg.training.batch_size = D;
  Trainer t(cfg, cpu_rank());
  return run_trajectory(t, kSteps);
}

void check_layout(int W, int P) {
  configure_threads(W);
  struct {
    double loss = 0, grad = 0, param = 0;  // the largest difference / tolerance of any case
  } worst_seen;
  const int D = W / P;
  const std::vector<Case> cases = cases_for(W, P);
  std::map<std::string, Trajectory> refs;  // computed first: every case's steps apply its gradients
  for (const Case& c : cases)
    if (!refs.count(c.heads.name)) refs[c.heads.name] = reference(c.heads, D);
  std::vector<std::vector<RankOutcome>> results(cases.size(), std::vector<RankOutcome>(W));
  ParallelConfig parallel;
  parallel.world_size = W;
  parallel.ulysses_degree = P;
  parallel.timeout_s = 60;
  run_rank_threads(parallel, at::kCPU, [&](RankContext& ctx) {
    for (size_t i = 0; i < cases.size(); ++i) {
      RunConfig cfg = model_config(cases[i].heads);
      cfg.parallel = parallel;
      cfg.parallel.fsdp = cases[i].fsdp;
      cfg.memory = cases[i].memory;
      Trainer t(cfg, ctx);
      t.set_defer_reduce_scatter(cases[i].defer_reduce_scatter);
      const Trajectory run = run_trajectory(t, kSteps, &refs.at(cases[i].heads.name).grads);
      RankOutcome& o = results[i][ctx.rank];
      o.loss = run.losses.front();
      o.grads = run.grads.front();
      o.params = run.params;
      for (auto* g : t.model().groups()) {
        o.numel.push_back(g->numel());
        o.sharded = g->sharded();
      }
    }
  });

  std::map<std::string, std::unique_ptr<Trainer>> layouts;  // parameter names and offsets for the report
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (!layouts.count(c.heads.name))
      layouts[c.heads.name] = std::make_unique<Trainer>(model_config(c.heads), cpu_rank());
    const Trajectory& ref = refs.at(c.heads.name);
    Trainer& layout = *layouts[c.heads.name];
    const RunConfig cfg = model_config(c.heads);
    int64_t elements = 0;
    for (auto* g : layout.model().groups()) elements += g->numel();
    INFO(c.describe(W, P));
    // Tolerances from the arithmetic of this model on the global batch of D sequences
    // (engine_test_util.h): the same sums in another order, and AdamW on identical gradients.
    const double loss_tol = loss_tolerance(cfg, D), grad_tol = gradient_tolerance(cfg, D);
    const double param_tol = optimizer_tolerance(cfg, kSteps, elements);
    for (int r = 0; r < W; ++r) {
      const double loss_diff = std::abs(results[i][r].loss - ref.losses.front()) / std::abs(ref.losses.front());
      worst_seen.loss = std::max(worst_seen.loss, loss_diff / loss_tol);
      CHECK(loss_diff <= loss_tol);
    }
    std::string worst;
    const double grad_diff = per_param_max_relative_diff(layout, assemble(results[i], true), ref.grads.front(), &worst);
    worst_seen.grad = std::max(worst_seen.grad, grad_diff / grad_tol);
    INFO("worst gradient " << worst << ": " << grad_diff << " (tolerance " << grad_tol << ")");
    CHECK(grad_diff <= grad_tol);
    const double param_diff = per_param_max_relative_diff(layout, assemble(results[i], false), ref.params, &worst);
    worst_seen.param = std::max(worst_seen.param, param_diff / param_tol);
    INFO("worst parameter after " << kSteps << " steps on the reference's gradients " << worst << ": " << param_diff
                                  << " (tolerance " << param_tol << ")");
    CHECK(param_diff <= param_tol);
  }
  configure_threads(1);
  // The measured worst as a fraction of its tolerance (docs/engine.md's table; -s shows it).
  std::printf("equivalence W=%d P=%d on %s: worst loss %.1f%%, gradient %.1f%%, parameter %.1f%% of the tolerance\n", W,
              P, cpu_capability_name().c_str(), 100 * worst_seen.loss, 100 * worst_seen.grad, 100 * worst_seen.param);
}

}  // namespace

TEST_CASE("model equivalence: world 1 (FSDP, Untied head chunking) x memory techniques", "[equivalence]") {
  check_layout(1, 1);
}
TEST_CASE("model equivalence: world 2 data parallel (plain, FSDP) x memory techniques", "[equivalence]") {
  check_layout(2, 1);
}
TEST_CASE("model equivalence: world 2 Ulysses 2 (FSDP, Untied each hps) x memory techniques", "[equivalence]") {
  check_layout(2, 2);
}
TEST_CASE("model equivalence: world 4 data parallel (plain, FSDP) x memory techniques", "[equivalence]") {
  check_layout(4, 1);
}
TEST_CASE("model equivalence: world 4 Ulysses 2 x data parallel 2 x memory techniques", "[equivalence]") {
  check_layout(4, 2);
}
TEST_CASE("model equivalence: world 4 Ulysses 4 (FSDP, Untied each hps) x memory techniques", "[equivalence]") {
  check_layout(4, 4);
}
