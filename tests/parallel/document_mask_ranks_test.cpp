// Document masking across ranks (fp32, CPU, in-process rank threads over Gloo): a packed batch on
// 2 and 4 Ulysses ranks, with FSDP, the Untied stages, checkpointing with kept or recomputed
// attention, offload and tiling, gives the loss and every gradient of its documents run alone on one rank, within
// the tolerances derived in model_tolerance.h; tagged [equivalence], the CPU capability reruns run
// them too. defines: test cases [documents]
#include <catch2/catch.hpp>

#include "../common/document_batch.h"
#include "../common/engine_test_util.h"
#include "engine/parallel/rank_launch.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

struct RanksCase {
  int W, P;
  bool fsdp, untied;
  bool keep_attention = true;  ///< false: checkpointing recomputes attention over the documents' spans
  std::string describe() const {
    return "W=" + std::to_string(W) + " P=" + std::to_string(P) + (fsdp ? " fsdp" : "") +
           (untied ? " untied" : (P > 1 ? " ulysses" : "")) + (keep_attention ? " kept attention" : " recompute");
  }
};

RunConfig ranks_config(const RanksCase& c) {
  RunConfig cfg = tiny_config(/*layers=*/2, /*seq=*/32);
  cfg.training.batch_size = 2;
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;  // below P = 4: the KV heads are replicated over the ranks
  cfg.parallel.world_size = c.W;
  cfg.parallel.ulysses_degree = c.P;
  cfg.parallel.fsdp = c.fsdp;
  cfg.parallel.timeout_s = 60;
  cfg.memory.untied_ulysses = c.untied;
  cfg.memory.heads_per_stage = c.untied ? c.P : 0;
  // every technique at once: the blocks checkpointed with their attention kept (or recomputed, in
  // the document spans) and their inputs offloaded, the MLP and the loss tiled
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
  cfg.memory.keep_attention = c.keep_attention;
  cfg.memory.tiled_mlp = cfg.memory.tiled_loss = true;
  cfg.memory.mlp_tile_tokens = 3;
  cfg.memory.loss_tile_tokens = 5;
  return cfg;
}

}  // namespace

TEST_CASE("documents: a packed batch on 2 and 4 ranks equals its documents alone", "[documents][equivalence]") {
  // Why this holds on every CPU: the ranks run the same fp32 kernels as one rank on the same values
  // (after Ulysses' all-to-all each rank holds the whole sequence for its heads, so the documents'
  // global starts apply unchanged); only the order of the sums differs, which the derived
  // tolerances bound. Each replica of W = 4, P = 2 runs the same batch (the loss scaled by both).
  const PackedBatch batch = make_packed_batch({{0, 5, 13}, {7, 16}}, {true, false}, 32, 64, /*seed=*/11);
  for (const RanksCase& c : std::vector<RanksCase>{{2, 2, false, false},
                                                   {2, 2, true, true},
                                                   {4, 4, true, false},
                                                   {4, 4, false, true},
                                                   {4, 2, true, false},
                                                   {2, 2, true, false, /*keep_attention=*/false},
                                                   {4, 4, false, true, /*keep_attention=*/false}}) {
    INFO(c.describe());
    const RunConfig cfg = ranks_config(c);
    RunConfig one = cfg;
    one.parallel = ParallelConfig{};
    one.memory.heads_per_stage = c.untied ? 1 : 0;
    Trainer alone(one, cpu_rank());
    const double reference = run_documents_alone(alone, batch, /*restart=*/true);
    const std::vector<at::Tensor> reference_grads = group_grads(alone);

    configure_threads(c.W);
    const int64_t s = 32 / c.P;
    std::vector<double> losses(c.W);
    std::vector<std::vector<at::Tensor>> grads(c.W);
    std::vector<int64_t> numel;
    bool sharded = false;
    std::mutex numel_mutex;
    run_rank_threads(cfg.parallel, at::kCPU, [&](RankContext& ctx) {
      Trainer t(cfg, ctx);
      losses[ctx.rank] = t.forward_backward(packed_inputs(batch, ctx.sp_rank * s, s, /*restart=*/true, ctx.dp_size));
      grads[ctx.rank] = group_grads(t);
      if (ctx.rank == 0) {
        std::lock_guard<std::mutex> lock(numel_mutex);
        for (auto* g : t.model().groups()) {
          numel.push_back(g->numel());
          sharded = g->sharded();
        }
      }
    });
    std::vector<at::Tensor> whole;  // FSDP: the shards in rank order, unpadded
    for (size_t g = 0; g < numel.size(); ++g) {
      if (!sharded) {
        whole.push_back(grads[0][g]);
        continue;
      }
      std::vector<at::Tensor> shards;
      for (int r = 0; r < c.W; ++r) shards.push_back(grads[r][g]);
      whole.push_back(at::cat(shards).narrow(0, 0, numel[g]));
    }
    const double loss_tol = loss_tolerance(cfg, 2), grad_tol = gradient_tolerance(cfg, 2);
    for (int r = 0; r < c.W; ++r) CHECK(std::abs(losses[r] - reference) <= loss_tol * std::abs(reference));
    std::string worst;
    const double grad_diff = per_param_max_relative_diff(alone, whole, reference_grads, &worst);
    INFO("worst gradient " << worst << ": " << grad_diff << " (tolerance " << grad_tol << ")");
    CHECK(grad_diff <= grad_tol);
  }
}
