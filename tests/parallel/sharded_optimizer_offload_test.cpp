// The offloaded optimizer under FSDP on 2 in-process ranks (Gloo), trained undriven: every step's
// loss and every rank's shards against the same job with the optimizer on the device, a live toggle included.
// defines: test cases [parallel][offload_optimizer]
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "../common/engine_test_util.h"
#include "engine/parallel/devices.h"
#include "engine/parallel/rank_launch.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 5;

/// Each rank's losses of kSteps undriven steps and its master shards after them. The optimizer
/// offload is switched at each step of `toggles` (a step boundary, as the studio and the CLI do).
std::vector<Trajectory> train_ranks(const RunConfig& cfg, bool defer_reduce_scatter, const std::vector<int>& toggles) {
  std::vector<Trajectory> ranks(kWorld);
  configure_threads(kWorld);
  run_rank_threads(cfg.parallel, at::kCPU, [&](RankContext& ctx) {
    Trainer t(cfg, ctx);
    t.set_defer_reduce_scatter(defer_reduce_scatter);
    MemoryConfig m = cfg.memory;
    Trajectory& out = ranks[ctx.rank];
    for (int s = 0; s < kSteps; ++s) {
      if (std::find(toggles.begin(), toggles.end(), s) != toggles.end()) {
        m.offload_optimizer = !m.offload_optimizer;
        t.set_memory(m);
      }
      out.losses.push_back(t.step().loss);
    }
    out.params = group_params(t);  // this rank's shards
  });
  configure_threads(1);
  return ranks;
}

}  // namespace

TEST_CASE("optimizer offload under FSDP: every step's loss and every rank's shards equal the on-device job's",
          "[parallel][offload_optimizer]") {
  // Why equal, tolerance 0: on the CPU the host AdamW is the on-device one (the same fused pass on
  // the same fp32 shard values), the gradient shard reaches the host by a copy, and the device copy
  // the all-gather reads holds the master's values (fp32) or the same bf16 rounding the on-device
  // cast makes. The first step's loss alone would not see a stale device copy: every step's does.
  // Each case: both reduce-scatter schedules (blocking as on CPU runs, deferred as on GPUs), tied
  // embeddings (the head's gradient summed into the embedding's shard on the host), Ulysses with
  // Untied head chunks at P = 2, and every single-rank memory technique on.
  const int P = GENERATE(1, 2);
  const bool defer = GENERATE(false, true);
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  RunConfig cfg = tiny_config(/*layers=*/2, /*seq=*/64);
  cfg.model.tie_embeddings = true;
  cfg.training.dtype = dtype;
  cfg.parallel.world_size = kWorld;
  cfg.parallel.ulysses_degree = P;
  cfg.parallel.fsdp = true;
  cfg.parallel.timeout_s = 60;
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
  cfg.memory.tiled_mlp = cfg.memory.tiled_loss = true;
  cfg.memory.mlp_tile_tokens = 12;  // local sequences of 32..64 tokens: several tiles, the last one short
  cfg.memory.loss_tile_tokens = 10;
  cfg.memory.untied_ulysses = P > 1;
  cfg.memory.heads_per_stage = P > 1 ? P : 0;
  INFO("P=" << P << (defer ? " deferred" : " blocking") << " reduce-scatter, " << to_string(dtype));

  const std::vector<Trajectory> on_device = train_ranks(cfg, defer, {});
  cfg.memory.offload_optimizer = true;
  const std::vector<Trajectory> on_host = train_ranks(cfg, defer, {});
  cfg.memory.offload_optimizer = false;
  const std::vector<Trajectory> toggled = train_ranks(cfg, defer, {/*on*/ 2, /*off*/ 4});
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    REQUIRE(on_device[r].losses.size() == static_cast<size_t>(kSteps));
    CHECK(on_host[r].losses == on_device[r].losses);
    CHECK(toggled[r].losses == on_device[r].losses);
    REQUIRE(on_host[r].params.size() == on_device[r].params.size());
    REQUIRE(toggled[r].params.size() == on_device[r].params.size());
    for (size_t g = 0; g < on_device[r].params.size(); ++g) {
      INFO("group " << g);
      CHECK(at::equal(on_host[r].params[g], on_device[r].params[g]));
      CHECK(at::equal(toggled[r].params[g], on_device[r].params[g]));
    }
  }
  // The steps train: a loss that never moved would make the equalities above say little.
  CHECK(on_device[0].losses.back() < on_device[0].losses.front());
}
