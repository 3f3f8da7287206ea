// The single-rank attention path against naive math: explicit RoPE rotation, K/V heads repeated
// per GQA group, a causal mask and softmax; and RoPE's relative-position property.
#include <catch2/catch.hpp>

#include <cmath>

#include "../common/engine_test_util.h"
#include "engine/model/attention.h"
#include "engine/ops/layers.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

// x: [B, s, h, hd] rotated pair-wise (i, i + hd/2) by angle pos * theta^(-2i/hd).
at::Tensor naive_rope(const at::Tensor& x, int64_t first, double theta) {
  at::Tensor out = x.clone();
  const int64_t s = x.size(1), hd = x.size(3), half = hd / 2;
  auto xa = x.accessor<float, 4>();
  auto oa = out.accessor<float, 4>();
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t t = 0; t < s; ++t)
      for (int64_t h = 0; h < x.size(2); ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(first + t) * std::pow(theta, -2.0 * i / hd);
          const double a = xa[b][t][h][i], c = xa[b][t][h][i + half];
          oa[b][t][h][i] = static_cast<float>(a * std::cos(angle) - c * std::sin(angle));
          oa[b][t][h][i + half] = static_cast<float>(c * std::cos(angle) + a * std::sin(angle));
        }
  return out;
}

}  // namespace

TEST_CASE("attention: local path equals naive causal GQA attention with RoPE", "[engine][model][equivalence]") {
  ModelConfig m = tiny_config().model;
  const int64_t B = 2, s = 12, d = m.d_model, H = m.n_heads, Hkv = m.n_kv_heads, hd = m.head_dim;
  at::manual_seed(3);
  at::Tensor x = at::randn({B, s, d});
  AttentionWeights w{at::randn({H * hd, d}) * 0.2,
                     at::randn({Hkv * hd, d}) * 0.2,
                     at::randn({Hkv * hd, d}) * 0.2,
                     at::randn({d, H * hd}) * 0.2,
                     {},
                     {}};
  const int64_t first = 100;  // a sequence shard that starts at global position 100
  const Positions pos = make_positions(first, s, hd, m.rope_theta, at::kCPU);
  at::Tensor got = attention_local(x, w, pos, m);

  at::Tensor q = naive_rope(at::linear(x, w.wq).view({B, s, H, hd}), first, m.rope_theta);
  at::Tensor k = naive_rope(at::linear(x, w.wk).view({B, s, Hkv, hd}), first, m.rope_theta);
  at::Tensor v = at::linear(x, w.wv).view({B, s, Hkv, hd});
  k = k.repeat_interleave(H / Hkv, 2);  // query head j reads KV head j / (H / Hkv)
  v = v.repeat_interleave(H / Hkv, 2);
  at::Tensor scores = at::einsum("bqhd,bkhd->bhqk", {q, k}) / std::sqrt(static_cast<double>(hd));
  at::Tensor mask = at::ones({s, s}, at::kBool).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  at::Tensor o = at::einsum("bhqk,bkhd->bqhd", {scores.softmax(-1), v}).reshape({B, s, H * hd});
  at::Tensor expected = at::linear(o, w.wo);
  // The longest chain behind an output element: the projection over d, the rotation, QK^T over
  // hd, the softmax's exp and sum over s keys, P.V over s, the output projection over H*hd;
  // terms of mixed sign (kappa 2). RoPE's angles: the naive side in double, the engine's exact to
  // fp32 (a rotation is 3 rounded ops). See ../../fp_tolerance.h.
  const int64_t chain = d + 3 + hd + 2 * s + s + H * hd;
  CHECK(relative_diff(got, expected) <= reordering_tolerance(chain, 2.0));
}

TEST_CASE("attention: RoPE scores depend only on relative position", "[engine][model]") {
  const int64_t hd = 16;
  at::manual_seed(5);
  at::Tensor q = at::randn({1, 1, 1, hd}), k = at::randn({1, 1, 1, hd});
  auto score = [&](int64_t pq, int64_t pk) {
    at::Tensor rq = apply_rope(q, make_positions(pq, 1, hd, 10000.0, at::kCPU));
    at::Tensor rk = apply_rope(k, make_positions(pk, 1, hd, 10000.0, at::kCPU));
    return (rq * rk).sum().item<double>();
  };
  CHECK(score(10, 3) == Approx(score(1010, 1003)).epsilon(1e-4));
  CHECK(score(500000, 499990) == Approx(score(20, 10)).epsilon(1e-3));
  CHECK(score(10, 3) != Approx(score(10, 5)).epsilon(1e-3));
}
