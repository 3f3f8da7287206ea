// apply_rope, one autograd node since the first GPU run: its output and its gradient against the
// composite rotate-half formula under plain autograd in fp64, and its bf16 rounding against fp32.
// The engine's own reference paths call apply_rope too, so this is the independent check.
#include <catch2/catch.hpp>

#include <cmath>

#include <ATen/ATen.h>

#include "engine/ops/layers.h"

using namespace odyssey;

namespace {

/// The composite formula, autograd through every op: [B, s, h, hd] by tables [s, hd/2].
at::Tensor composite_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  const at::Tensor c = cos.unsqueeze(0).unsqueeze(2), s = sin.unsqueeze(0).unsqueeze(2);
  return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

}  // namespace

TEST_CASE("rope: output and gradient equal the composite formula under autograd (fp64)", "[rope][equivalence]") {
  at::manual_seed(3);
  const int64_t B = 2, s = 24, h = 3, hd = 16;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor angles = at::arange(s, f64).unsqueeze(1) * at::rand({hd / 2}, f64);  // [s, hd/2]
  // scaled tables (YaRN's attention factor multiplies both): the backward must be the transpose,
  // not the inverse, of a rotation that is no longer orthogonal
  const at::Tensor cos = angles.cos() * 1.3, sin = angles.sin() * 1.3;
  for (bool strided : {false, true}) {
    // a transposed view as the input, as the Ulysses path hands it on
    at::Tensor base = strided ? at::randn({B, h, s, hd}, f64).transpose(1, 2) : at::randn({B, s, h, hd}, f64);
    at::Tensor x = base.detach().requires_grad_(true);
    at::Tensor xr = base.detach().requires_grad_(true);
    const at::Tensor out = apply_rope(x, Positions{at::Tensor(), cos, sin});
    const at::Tensor ref = composite_rope(xr, cos, sin);
    // a non-contiguous incoming gradient
    const at::Tensor grad = at::randn({B, h, s, hd}, f64).transpose(1, 2);
    out.backward(grad);
    ref.backward(grad);
    INFO("strided input " << strided);
    // fp64: each value is two products and a sum (a few roundings of 2^-53), far below 1e-12
    CHECK(at::allclose(out, ref, /*rtol=*/1e-12, /*atol=*/1e-12));
    CHECK(at::allclose(x.grad(), xr.grad(), 1e-12, 1e-12));
    CHECK(out.scalar_type() == at::kDouble);
  }
  // without a graph: the same values, no autograd node
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({B, s, h, hd}, f64);
  const at::Tensor plain = apply_rope(x, Positions{at::Tensor(), cos, sin});
  CHECK_FALSE(plain.requires_grad());
  CHECK(at::allclose(plain, composite_rope(x, cos, sin), 1e-12, 1e-12));
}

TEST_CASE("rope: bf16 input rounds at most twice against the same values rotated in fp32", "[rope]") {
  at::manual_seed(4);
  const int64_t s = 64, h = 4, hd = 32;
  const at::Tensor angles = at::arange(s, at::kFloat).unsqueeze(1) * at::rand({hd / 2});
  const at::Tensor cos = angles.cos(), sin = angles.sin();  // fp32 tables, as make_positions builds them
  const at::Tensor xb = at::randn({1, s, h, hd}).to(at::kBFloat16);
  const at::Tensor out = apply_rope(xb, Positions{at::Tensor(), cos, sin});
  REQUIRE(out.scalar_type() == at::kBFloat16);
  const at::Tensor ref = composite_rope(xb.to(at::kDouble), cos.to(at::kDouble), sin.to(at::kDouble));  // exact-ish
  // Each half is x1 c -/+ x2 s: the first product rounded to bf16 (u = 2^-8 of |x1 c|), then the
  // sum rounded (u of the result, at most |x1| + |x2|): |error| <= 2 u (|x1| + |x2|), plus u^2 terms.
  const at::Tensor x = xb.to(at::kDouble);
  const int64_t half = hd / 2;
  const at::Tensor scale = x.narrow(-1, 0, half).abs() + x.narrow(-1, half, half).abs();  // [1, s, h, hd/2]
  const at::Tensor bound = at::cat({scale, scale}, -1) * (2.0 * std::ldexp(1.0, -8) * 1.01);
  const at::Tensor err = (out.to(at::kDouble) - ref).abs();
  INFO("largest error / bound " << (err / (bound + 1e-30)).max().item<double>());
  CHECK((err <= bound).all().item<bool>());
}
