// parallel_bench: the table's shape on a tiny config (always), and the CPU figures of a larger
// one (hidden [.figures]: `parallel_tests "[.figures]"`, a speed measurement, not a unit test).
// defines: test cases [bench]
#include <catch2/catch.hpp>

#include <cstdio>

#include "../engine/engine_test_util.h"
#include "engine/parallel/parallel_bench.h"

using namespace odyssey;
using namespace odyssey::test;

TEST_CASE("parallel bench: one row per variant, reference first, ratios against it", "[bench]") {
  RunConfig cfg = tiny_config(/*layers=*/1, /*seq=*/32);
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;
  cfg.parallel.world_size = 2;
  cfg.parallel.ulysses_degree = 2;
  const auto rows = parallel_bench(cfg, /*rounds=*/1);
  REQUIRE(rows.size() == 2 + 2);  // ulysses, ulysses+fsdp, untied hps=2, untied hps=4
  CHECK(rows[0].name == "ulysses");
  CHECK(rows[0].ratio == 1.0);
  CHECK(rows[1].name == "ulysses+fsdp");
  CHECK(rows[2].name == "untied hps=2");
  CHECK(rows[3].name == "untied hps=4");
  for (const auto& r : rows) CHECK(r.median_step_s > 0);
}

TEST_CASE("parallel bench figures on CPU (prints the table)", "[.figures]") {
  RunConfig cfg = tiny_config(/*layers=*/2, /*seq=*/4096);
  cfg.model.d_model = 256;
  cfg.model.n_heads = cfg.model.n_kv_heads = 8;
  cfg.model.head_dim = 32;
  cfg.model.d_ffn = 512;
  cfg.model.vocab_size = 256;
  cfg.memory.activation_checkpointing = true;
  cfg.parallel.world_size = cfg.parallel.ulysses_degree = 2;
  const auto rows = parallel_bench(cfg, /*rounds=*/5);
  std::printf("%-16s %12s %8s\n", "variant", "median step", "ratio");
  for (const auto& r : rows) std::printf("%-16s %10.3f s %8.3f\n", r.name.c_str(), r.median_step_s, r.ratio);
  CHECK(rows.back().ratio < 1.10);  // Untied at the largest chunk: under 10% over plain Ulysses
}
