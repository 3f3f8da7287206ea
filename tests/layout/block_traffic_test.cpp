// The bytes a token of a block's elementwise passes (engine/layout/block_traffic.h), counted by
// hand for the options that add passes: QK-norm, the tiled MLP's copies, the kept attention's
// pack, the Untied stages' own copies and their fp32 dK/dV accumulators.
#include <catch2/catch.hpp>

#include "engine/layout/block_traffic.h"

using namespace odyssey;

namespace {

/// Llama-3.2-1B's widths in bf16: d = 2048, 32 query heads and 8 KV heads of 64, d_ffn 8192.
BlockShapeForTraffic llama_1b() {
  return BlockShapeForTraffic{.d = 2048, .q_dim = 2048, .kv_dim = 512, .f = 8192, .c = 2};
}

}  // namespace

// Every count is a sum of products of small integers: exact in doubles, compared with ==.
TEST_CASE("block traffic: the standard path, phase by phase", "[layout][traffic]") {
  const BlockTokenBytes b = block_token_bytes(llama_1b());
  // norm 2cd + RoPE 2c(q + kv) + residual 3cd
  CHECK(b.forward_attention == 8192 + 10240 + 12288);
  // norm + SwiGLU 3cf + residual
  CHECK(b.forward_mlp == 8192 + 49152 + 12288);
  // SwiGLU's backward 5cf, gate/up sum 3cd, norm's backward 3cd, dh = dy + d(MLP) 3cd
  CHECK(b.backward_mlp == 81920 + 3 * 12288);
  // RoPE's inverse, the q/k/v input gradients' two sums, the norm's backward, the residual sum
  CHECK(b.backward_attention == 10240 + 2 * 12288 + 12288 + 12288);
  // the recompute: the attention half, the MLP's norm and SwiGLU, no residual after the MLP
  CHECK(b.recompute == b.forward_attention + 8192 + 49152);
}

TEST_CASE("block traffic: QK-norm, the tiled MLP and the kept attention's pack add their passes", "[layout][traffic]") {
  const BlockTokenBytes plain = block_token_bytes(llama_1b());
  const double qk = 2.0 * (2048 + 512);  // c (q + kv)

  BlockShapeForTraffic s = llama_1b();
  s.qk_norm = true;  // the per-head norms of q and k: read and write forward, 3 passes backward
  const BlockTokenBytes qk_norm = block_token_bytes(s);
  CHECK(qk_norm.forward_attention - plain.forward_attention == 2 * qk);
  CHECK(qk_norm.backward_attention - plain.backward_attention == 3 * qk);
  CHECK(qk_norm.forward_mlp == plain.forward_mlp);

  s = llama_1b();
  s.tiled_mlp = true;  // each tile's output copied into the whole (2cd); its SwiGLU again in backward (3cf)
  const BlockTokenBytes tiled = block_token_bytes(s);
  CHECK(tiled.forward_mlp - plain.forward_mlp == 2.0 * 2 * 2048);
  CHECK(tiled.backward_mlp - plain.backward_mlp == 3.0 * 2 * 8192);
  CHECK(tiled.recompute - plain.recompute == -3.0 * 2 * 8192);  // the recompute runs no tile

  s = llama_1b();
  s.kept_packed_fraction = 0.5;  // half the blocks copy their kept output [t, q] into the payload
  const BlockTokenBytes packed = block_token_bytes(s);
  CHECK(packed.forward_attention - plain.forward_attention == 0.5 * 2 * 2 * 2048);
  CHECK(packed.recompute == plain.recompute);  // nothing is packed again in the recompute
}

TEST_CASE("block traffic: the Untied stages' copies, QK-norm's graph and the dK/dV accumulators", "[layout][traffic]") {
  BlockShapeForTraffic s = llama_1b();
  s.untied = true;
  const BlockTokenBytes untied = block_token_bytes(s);
  const double c = 2, d = 2048, q = 2048, kv = 512, qkv = q + 2 * kv;
  // 1/rms (read x), the three projections scaled, RoPE, v and o between the layouts, residual
  CHECK(untied.forward_attention == c * d + 2 * c * qkv + 2 * c * (q + kv) + 2 * c * (kv + q) + 3 * c * d);
  // QK-norm: forward 2c(q + kv) more; backward the norms in the projections again (2c(q + kv)) and
  // the head transform's graph: q and k scaled, normed, rotated (2 + 2 + 2) and its norms'
  // backward (3): 11 c (q + kv) in all
  s.qk_norm = true;
  const BlockTokenBytes qk = block_token_bytes(s);
  CHECK(qk.forward_attention - untied.forward_attention == 2 * c * (q + kv));
  CHECK(qk.backward_attention - untied.backward_attention == 11 * c * (q + kv));
  s.qk_norm = false;
  s.untied_kv_accumulation = 1234;  // whatever the stage plan gives, added to the backward
  CHECK(block_token_bytes(s).backward_attention - untied.backward_attention == 1234);
  // a kept Untied result replays: the recompute reads x for 1/rms and sums the residual only
  s.kept_replay = true;
  CHECK(block_token_bytes(s).recompute == c * d + 3 * c * d + 2 * c * d + 3 * c * 8192);

  // The accumulators, bytes a local token. 32 query / 8 KV heads of 64 on one rank, one head a
  // stage: each KV head's range is read by 4 stages, so it is zero-filled and cast back
  // (2 x (4 + 4 + 2) a range element) and each stage adds dK, dV into it (2 x (4 + 2 + 4)); a
  // range element is P x 1 x 64 a token: (8 x 20 + 32 x 20) x 64.
  CHECK(untied_kv_accumulator_token_bytes(plan_untied_stages(32, 8, 64, 1, 1), 2) == (8 * 20 + 32 * 20) * 64);
  // one stage of all 32 heads: each range its stage's own, no accumulator
  CHECK(untied_kv_accumulator_token_bytes(plan_untied_stages(32, 8, 64, 1, 32), 2) == 0);
  // 24 / 8 heads of 16 over P = 2, 8 a stage (heads_test.cpp): stages 0 and 2 gather K/V per query
  // head (4 a rank) over ranges of two KV heads: each zero-filled and cast back (2 x 10 x 2 heads)
  // and its gathered gradients cast to fp32 and summed in order (2 x (2 + 2 + 12) x 4 heads),
  // stage 1's range its own; a head's element P x 16 = 32 a token
  CHECK(untied_kv_accumulator_token_bytes(plan_untied_stages(24, 8, 16, 2, 8), 2) == 2 * (20 * 2 + 32 * 4) * 32);
}
