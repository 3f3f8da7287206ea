// The head rules and the Untied stage schedule of engine/layout/heads.h, by hand: the schedule's
// ranges, which stages gather K/V or accumulate their gradients, the buffers it sizes, the rules'
// texts (what the validator prints and plan_untied_stages throws), the sequence shard rule and tiles,
// and the flat groups' shard layout.
#include <catch2/catch.hpp>

#include <algorithm>

#include "engine/layout/heads.h"
#include "engine/layout/planned_buffers.h"
#include "engine/layout/tiles.h"

using namespace odyssey;

TEST_CASE("ulysses KV heads: replicated to the degree when fewer, split otherwise, by hand", "[layout][heads]") {
  // Llama 3 8B's 8 KV heads: split over 2..8 ranks, replicated x2 over 16 ranks.
  CHECK(ulysses_kv_heads(8, 4).replicas == 1);
  CHECK(ulysses_kv_heads(8, 4).per_rank == 2);
  CHECK_FALSE(ulysses_kv_heads(8, 8).replicated());
  const UlyssesKvHeads sixteen = ulysses_kv_heads(8, 16);
  CHECK(sixteen.replicas == 2);
  CHECK(sixteen.total == 16);
  CHECK(sixteen.per_rank == 1);
  // Every pair the rule accepts: each rank gets max(Hkv, P) / P KV heads, and replication happens
  // exactly when Hkv < P (what the Ulysses forward, the Untied schedule and the planner each wrote).
  for (int64_t hkv = 1; hkv <= 64; ++hkv)
    for (int64_t p = 1; p <= 64; ++p) {
      if (ulysses_kv_heads_rule(hkv, p)) continue;
      INFO("Hkv " << hkv << ", P " << p);
      const UlyssesKvHeads kv = ulysses_kv_heads(hkv, p);
      CHECK(kv.total == std::max(hkv, p));
      CHECK(kv.per_rank == std::max(hkv, p) / p);
      CHECK(kv.replicated() == (hkv < p));
      CHECK(kv.replicas * hkv == kv.total);
    }
}

TEST_CASE("untied stage plan: schedule and validation", "[layout][untied]") {
  const auto plan = plan_untied_stages(8, 2, 16, 4, 4);  // P = 4, Hkv < P: replicate x2
  CHECK(plan.stages == 2);
  CHECK(plan.k == 1);
  CHECK(plan.rep == 2);
  CHECK(plan.Hkvl == 1);
  CHECK(plan.kv_new == std::vector<bool>{true, false});  // one KV head sent once for both stages
  CHECK(plan.any_kv_accumulated);                        // ... so its gradients sum over both
  CHECK_FALSE(plan.any_kv_gathered);
  const auto gqa = plan_untied_stages(32, 8, 16, 1, 1);  // P = 1, 32 stages, g = 4
  CHECK(gqa.stages == 32);
  int sends = 0;
  for (bool b : gqa.kv_new) sends += b;
  CHECK(sends == 8);                                 // each KV head projected once per GQA group
  CHECK(plan_untied_stages(8, 8, 16, 2, 0).k == 1);  // 0 = one head per rank per stage
  const auto mha = plan_untied_stages(8, 8, 16, 2, 2);
  CHECK_FALSE(mha.any_kv_accumulated);  // every stage owns its KV head: the kernel's dK/dV are final
  CHECK(mha.kv_direct == std::vector<bool>(4, true));
  CHECK_THROWS_WITH(
      plan_untied_stages(8, 8, 16, 2, 3),
      Catch::Contains("heads_per_stage = 3") && Catch::Contains("memory.heads_per_stage must be a multiple of "
                                                                "parallel.ulysses_degree = 2"));
  CHECK_THROWS_WITH(plan_untied_stages(8, 8, 16, 2, 6), Catch::Contains("must split each rank's 4 heads"));
  CHECK_THROWS_WITH(plan_untied_stages(8, 3, 16, 2, 2),
                    Catch::Contains("model.n_kv_heads must divide model.n_heads = 8"));
  CHECK_THROWS_WITH(plan_untied_stages(8, 8, 16, 3, 3),
                    Catch::Contains("parallel.ulysses_degree must divide model.n_heads = 8"));
}

TEST_CASE("untied stage plan: stages straddling two KV heads (24 query / 8 KV heads, P = 2)", "[layout][untied]") {
  // Per rank: Hl = 12 query heads, Hkvl = 4 KV heads, g = 3 query heads per KV head.
  SECTION("4 heads per stage (k = 2): ranges of two KV heads, read as plain heads") {
    // Stage t holds local query heads 2t, 2t+1, reading KV heads floor(2t/3) .. floor((2t+1)/3):
    // {0}, {0, 1}, {1}, {2}, {2, 3}, {3}.
    const UntiedStagePlan p = plan_untied_stages(24, 8, 16, 2, 4);
    REQUIRE(p.stages == 6);
    CHECK(p.kv_first == std::vector<int64_t>{0, 0, 1, 2, 2, 3});
    CHECK(p.kv_count == std::vector<int64_t>{1, 2, 1, 1, 2, 1});
    CHECK(p.max_kv_count == 2);                     // the planner once counted 1 here
    CHECK(p.kv_new == std::vector<bool>(6, true));  // every range differs from the one before
    CHECK(untied_kv_slots(p, 1).empty());           // heads 2, 3 read KV heads 0, 1 one to one: no gather
    CHECK_FALSE(p.any_kv_gathered);
    CHECK_FALSE(p.any_kv_accumulated);  // each range is one stage's: the kernel's dK/dV are final
    // B = 2 sequences of s = 64 local tokens, S = 128, hd = 16
    const UntiedStageBuffers b = untied_stage_buffers(p, 2, 64);
    CHECK(b.q_stage == 2 * 128 * 2 * 16);
    CHECK(b.kv_stage == 2 * 128 * 2 * 16);  // two KV heads, not one
    CHECK(b.kv_gathered == 0);
    CHECK(b.staging == 2 * 2 * 64 * 2 * 16);  // [P, B, s, max(k, 2), hd]
    CHECK(b.local_grad == 0);                 // the range is no wider than k: o_h's memory is reused
    CHECK(b.kv_accum_fp32 == 0);
  }
  SECTION("8 heads per stage (k = 4): a stage gathers K/V per query head") {
    // Stages read KV heads {0,0,0,1}, {1,1,2,2}, {2,3,3,3}: ranges of two; the first and last do
    // not split into equal groups, so K/V are gathered to the query heads' slots.
    const UntiedStagePlan p = plan_untied_stages(24, 8, 16, 2, 8);
    REQUIRE(p.stages == 3);
    CHECK(p.kv_first == std::vector<int64_t>{0, 1, 2});
    CHECK(p.kv_count == std::vector<int64_t>{2, 2, 2});
    CHECK(untied_kv_slots(p, 0) == std::vector<int64_t>{0, 0, 0, 1});
    CHECK(untied_kv_slots(p, 1).empty());  // {1,1,2,2}: two groups of two
    CHECK(untied_kv_slots(p, 2) == std::vector<int64_t>{0, 1, 1, 1});
    CHECK(p.kv_gathered == std::vector<bool>{true, false, true});
    CHECK(p.any_kv_accumulated);  // a gathered stage's dK/dV are summed per KV head in fp32
    const UntiedStageBuffers b = untied_stage_buffers(p, 1, 64);
    CHECK(b.kv_gathered == 128 * 4 * 16);  // [B, S, k, hd]
    CHECK(b.kv_accum_fp32 == 128 * 2 * 16);
  }
}

TEST_CASE("head rules: texts, valid values and the degree's rule first", "[layout]") {
  CHECK_FALSE(ulysses_heads_rule(32, 8));
  CHECK(*ulysses_heads_rule(32, 6) == "must divide model.n_heads = 32 because attention is split by heads");
  CHECK_FALSE(ulysses_kv_heads_rule(8, 16));  // replicated
  CHECK(ulysses_kv_heads_rule(4, 6).has_value());
  CHECK(valid_ulysses_head_degrees(32, 8) == std::vector<int64_t>{1, 2, 4, 8, 16, 32});
  CHECK(valid_ulysses_head_degrees(12, 8).empty() == false);
  CHECK(valid_heads_per_stage(32, 8) == std::vector<int64_t>{8, 16, 32});
  CHECK(valid_heads_per_stage(32, 6).empty());
  CHECK_FALSE(heads_per_stage_rule(32, 6, 5));  // the degree's rule reports it, not this one
  CHECK_FALSE(heads_per_stage_rule(32, 8, 0));  // 0 = P
  for (int64_t hps = 1; hps <= 32; ++hps) {
    const bool valid = !heads_per_stage_rule(32, 8, hps);
    const auto values = valid_heads_per_stage(32, 8);
    INFO("heads_per_stage " << hps);
    CHECK(valid == (std::find(values.begin(), values.end(), hps) != values.end()));
  }
  CHECK(divisors(36) == std::vector<int64_t>{1, 2, 3, 4, 6, 9, 12, 18, 36});
  CHECK(divisors(0).empty());
}

TEST_CASE("sequence tiles span the batch", "[layout][tiles]") {
  // 256 positions per tile over B = 2 sequences of 1000 local positions: [2, 256, f] tiles.
  const SequenceTile mlp = mlp_sequence_tile(256, 64, 2, 1000);
  CHECK(mlp.positions == 256);
  CHECK(mlp.rows == 512);
  CHECK(mlp.count == 4);                                         // 256 x 3 + 232
  CHECK(mlp_sequence_tile(0, 64, 1, 1000).positions == 64);      // 0 = d_model
  CHECK(mlp_sequence_tile(4096, 64, 3, 1000).rows == 3 * 1000);  // clamped to the local sequence
  // 0 = about 1 GiB of fp32 logits: floor(2^30 / (4 x 128256)) = 2092 positions
  CHECK(loss_sequence_tile(0, 128256, 1, 1 << 20).positions == 2092);
  CHECK(loss_sequence_tile(0, 128256, 1, 1 << 20).count == ((1 << 20) + 2091) / 2092);
}

TEST_CASE("sequence shard rule and flat shard layout", "[layout][tiles]") {
  CHECK_FALSE(sequence_shard_rule(4096, 8));
  const auto broken = sequence_shard_rule(4100, 8);
  REQUIRE(broken);
  CHECK(*broken == "must be divisible by parallel.ulysses_degree = 8 so that every rank holds an equal sequence shard");
  // 640 + 16 parameters over 3 ranks: shards of ceil(656 / 3) = 219, padded to 657
  const FlatShardLayout l = flat_shard_layout(656, 3);
  CHECK(l.shard_numel == 219);
  CHECK(l.padded_numel == 657);
  CHECK(flat_shard_layout(640, 8).padded_numel == 640);
  // the gathered copy: sharded, or cast from fp32; an unsharded fp32 group uses its master
  CHECK(keeps_gathered_copy(2, 4));
  CHECK(keeps_gathered_copy(1, 2));
  CHECK_FALSE(keeps_gathered_copy(1, 4));
}
