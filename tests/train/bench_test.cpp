// odyssey bench's engine half (run_bench): every variant of a multi-rank preset (the single-rank
// techniques, FSDP, Untied Ulysses at each heads_per_stage) with its baseline and a measured peak
// that leaves out the other trainer's states; and the CPU figures of a larger config (hidden
// [.figures]: `engine_tests "[.figures]"`, a speed measurement, not a unit test).
// defines: test cases [bench]
#include <catch2/catch.hpp>

#include <cstdio>
#include <mutex>

#include "../common/engine_test_util.h"
#include "engine/parallel/job.h"
#include "engine/train/bench.h"
#include "engine/train/trainer.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

RunConfig two_rank_ulysses() {
  RunConfig cfg = tiny_config(/*layers=*/3, /*seq=*/64);  // 3: block 1's input is offloaded (offloaded_blocks)
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;
  cfg.parallel.world_size = 2;
  cfg.parallel.ulysses_degree = 2;
  return cfg;
}

// The device peak of a lone trainer, max over three steps and the ranks.
int64_t lone_peak(const RunConfig& cfg) {
  std::mutex mutex;
  int64_t peak = 0;
  run_on_ranks(cfg, "odyssey bench PRESET", [&](RankContext& ctx) {
    Trainer t(cfg, ctx);
    for (int i = 0; i < 3; ++i) {
      const StepResult r = t.step();
      std::lock_guard<std::mutex> lock(mutex);
      peak = std::max(peak, r.device_peak);
    }
  });
  return peak;
}

}  // namespace

TEST_CASE("bench: the techniques and on two ranks FSDP and Untied Ulysses per stage size", "[engine][bench]") {
  RunConfig cfg = two_rank_ulysses();
  cfg.parallel.fsdp = true;  // the preset's own setting does not matter: plain has none
  cfg.memory.activation_checkpointing = cfg.memory.tiled_loss = cfg.memory.untied_ulysses = true;
  cfg.memory.keep_attention = true;  // its own row against checkpointing; the other rows checkpoint plainly
  const BenchResult result = run_bench(cfg, /*rounds=*/2, nullptr);
  CHECK(result.world_size == 2);
  CHECK(result.ulysses_degree == 2);
  std::vector<std::string> names;
  for (const auto& v : result.variants) names.push_back(v.name);
  CHECK(names == std::vector<std::string>{"plain", "checkpointing", "offload", "tiled_mlp", "tiled_loss",
                                          "offload_optimizer", "all", "keep_attention", "fsdp", "untied_hps=2",
                                          "untied_hps=4"});
  for (const auto& v : result.variants) {
    INFO(v.name);
    CHECK(v.step_s.size() == 2);
    CHECK(v.median_s() > 0);
    CHECK(v.device_peak > 0);
    const bool against_checkpointing = v.name == "offload" || v.name == "keep_attention";
    CHECK(v.baseline == (v.name == "plain" ? "" : against_checkpointing ? "checkpointing" : "plain"));
    CHECK(v.memory.keep_attention == (v.name == "keep_attention"));
    CHECK_FALSE(v.memory.offload_kept_attention);  // the preset offloads none
    CHECK(v.fsdp == (v.name == "fsdp"));
    CHECK(v.memory.untied_ulysses == (v.name.rfind("untied", 0) == 0));
  }
  CHECK(result.ratio(result.variants[0]) == 1.0);
  CHECK(result.find("offload")->host_peak > 0);
  CHECK(result.find("offload_optimizer")->host_peak > 0);  // the fp32 states, in the host pool
  CHECK(result.find("untied_hps=4")->memory.heads_per_stage == 4);

  // The peaks are each variant's own: a lone trainer of that configuration measures the same
  // (the bench keeps a sharded and an unsharded trainer and leaves the other's states out).
  // Tolerance 2%: a step's peak moves by up to 1.4% (6 KB here) with the ranks' timing.
  RunConfig plain = cfg, sharded = cfg;
  plain.parallel.fsdp = false;
  sharded.parallel.fsdp = true;
  plain.memory = sharded.memory = result.find("plain")->memory;
  const int64_t plain_alone = lone_peak(plain), sharded_alone = lone_peak(sharded);
  INFO("plain: bench " << result.find("plain")->device_peak << " B, alone " << plain_alone << " B; fsdp: bench "
                       << result.find("fsdp")->device_peak << " B, alone " << sharded_alone << " B");
  CHECK(std::abs(static_cast<double>(result.find("plain")->device_peak) / plain_alone - 1.0) < 0.02);
  CHECK(std::abs(static_cast<double>(result.find("fsdp")->device_peak) / sharded_alone - 1.0) < 0.02);
}

TEST_CASE("bench: one rank has no parallel variants", "[engine][bench]") {
  const BenchResult result = run_bench(tiny_config(/*layers=*/1, /*seq=*/32), /*rounds=*/1, nullptr);
  REQUIRE(result.variants.size() == 7);
  CHECK(result.variants.back().name == "all");
  CHECK(result.world_size == 1);
  for (const auto& v : result.variants) CHECK_FALSE((v.fsdp || v.memory.untied_ulysses));
}

TEST_CASE("bench figures on CPU: 2 ranks and Ulysses 2 at 4096 tokens (prints the table)", "[.figures]") {
  RunConfig cfg = tiny_config(/*layers=*/2, /*seq=*/4096);
  cfg.model.d_model = 256;
  cfg.model.n_heads = cfg.model.n_kv_heads = 8;
  cfg.model.head_dim = 32;
  cfg.model.d_ffn = 512;
  cfg.model.vocab_size = 256;
  cfg.parallel.world_size = cfg.parallel.ulysses_degree = 2;
  const BenchResult result = run_bench(cfg, /*rounds=*/5, nullptr);
  std::printf("%-16s %12s %8s %14s\n", "variant", "median step", "ratio", "device peak");
  for (const auto& v : result.variants)
    std::printf("%-16s %10.3f s %8.3f %10.1f MiB\n", v.name.c_str(), v.median_s(), result.ratio(v),
                v.device_peak / 1048576.0);
  // Untied Ulysses at the largest chunk: under 10% over plain Ulysses.
  CHECK(result.ratio(*result.find("untied_hps=8")) < 1.10);
}
