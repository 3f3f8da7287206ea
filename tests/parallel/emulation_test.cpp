// Rank emulation end to end: rank 0 of a W-rank job run alone with EmulatedComm holds exactly
// what rank 0 of the real multi-rank run holds: step peak within 2%, same persistent categories.
// defines: test cases [emulation]
#include <catch2/catch.hpp>

#include <cmath>

#include "../engine/engine_test_util.h"
#include "engine/parallel/rank_launch.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

RunConfig emulation_config() {
  RunConfig c = tiny_config(/*layers=*/2, /*seq=*/512);
  c.model.d_model = 128;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 16;
  c.model.d_ffn = 256;
  c.model.vocab_size = 128;
  c.parallel.timeout_s = 60;
  return c;
}

struct Rank0 {
  int64_t step_peak = 0;
  std::array<int64_t, kMemCategoryCount> categories{};
  double loss = 0;
};

Rank0 real_rank0(const RunConfig& cfg) {
  Rank0 out;
  configure_threads(static_cast<int>(cfg.parallel.world_size));
  run_rank_threads(cfg.parallel, at::kCPU, [&](RankContext& ctx) {
    Trainer t(cfg, ctx);
    t.step();
    const StepResult r = t.step();
    if (ctx.rank != 0) return;
    out.step_peak = r.device_peak;
    out.categories = MemoryTracker::instance().snapshot(0).category_bytes;
    out.loss = r.loss;
  });
  return out;
}

Rank0 emulated_rank0(const RunConfig& cfg) {
  Rank0 out;
  // The intra-op threads a real rank gets: CPU kernels size their scratch per thread.
  configure_threads(static_cast<int>(cfg.parallel.world_size));
  RunConfig emulated = cfg;
  emulated.parallel.emulate = true;
  // One thread, like the real ranks (the tracker binds the rank per thread).
  ParallelConfig solo;
  run_rank_threads(solo, at::kCPU, [&](RankContext&) {
    const RankContext ctx = make_emulated_rank_context(emulated.parallel, at::kCPU);
    Trainer t(emulated, ctx);
    t.step();
    const StepResult r = t.step();
    out.step_peak = r.device_peak;
    out.categories = MemoryTracker::instance().snapshot(0).category_bytes;
    out.loss = r.loss;
  });
  return out;
}

void check(RunConfig cfg, const std::string& label) {
  const Rank0 real = real_rank0(cfg);
  const Rank0 emu = emulated_rank0(cfg);
  const double ratio = static_cast<double>(emu.step_peak) / static_cast<double>(real.step_peak);
  INFO(label << ": real rank-0 step peak " << real.step_peak << " B, emulated " << emu.step_peak << " B (ratio "
             << ratio << ")");
  CHECK(std::abs(ratio - 1.0) <= 0.02);
  for (MemCategory c : {MemCategory::Params, MemCategory::Grads, MemCategory::Optimizer})
    CHECK(emu.categories[static_cast<int>(c)] == real.categories[static_cast<int>(c)]);
  CHECK(std::isfinite(emu.loss));  // meaningless but computed
}

}  // namespace

TEST_CASE("rank emulation: FSDP over 4 ranks, rank-0 peak equals the real run's", "[emulation]") {
  RunConfig cfg = emulation_config();
  cfg.parallel.world_size = 4;
  cfg.parallel.fsdp = true;
  check(cfg, "W=4 FSDP");
}

TEST_CASE("rank emulation: Ulysses 2 x data parallel 2 with FSDP and checkpointing", "[emulation]") {
  RunConfig cfg = emulation_config();
  cfg.parallel.world_size = 4;
  cfg.parallel.ulysses_degree = 2;
  cfg.parallel.fsdp = true;
  cfg.memory.activation_checkpointing = true;
  check(cfg, "W=4 P=2 FSDP ckpt");
}

TEST_CASE("rank emulation: Untied Ulysses over 4 ranks (Hkv < P), offload and tiling", "[emulation]") {
  RunConfig cfg = emulation_config();
  cfg.parallel.world_size = 4;
  cfg.parallel.ulysses_degree = 4;
  cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = 4;
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
  cfg.memory.tiled_mlp = cfg.memory.tiled_loss = true;
  check(cfg, "W=4 P=4 untied offload tiling");
}
