// apply_rope, one autograd node since the first GPU run: its output and its gradient against the
// composite rotate-half formula under plain autograd in fp64, its bf16 rounding against fp32, and
// on CUDA (ops::rope_rotate's kernel) against the CPU. The engine's own reference paths call
// apply_rope too, so this is the independent check.
#include <catch2/catch.hpp>

#include <cmath>

#include <ATen/ATen.h>

#include "../common/engine_test_util.h"
#include "engine/config/rope.h"
#include "engine/layout/documents.h"
#include "engine/ops/layers.h"
#include "engine/ops/ops.h"
#include "engine/telemetry/cuda_runtime.h"

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

TEST_CASE("rope: an empty shard rotates to an empty result in its shape", "[rope]") {
  const at::Tensor tables = at::zeros({0, 4});  // [s = 0, hd/2]
  const at::Tensor out = ops::rope_rotate(at::zeros({1, 0, 2, 8}), tables, tables, /*inverse=*/false);
  CHECK(out.sizes() == at::IntArrayRef({1, 0, 2, 8}));
}

TEST_CASE("rope: the CUDA kernel's rotation and gradient equal the CPU's within their roundings", "[rope][.cuda]") {
  // The kernel rounds each value once (fp32 arithmetic); the CPU's ATen ops round the first product
  // and then the sum. With S = |x1 c| + |x2 s| per pair: bf16 sides differ by at most 2^-8 S
  // (kernel) + 2 x 2^-8 S (CPU) + fp32 terms; fp32 sides by a few 2^-24 S: 3 x 2^-8 S and
  // 8 x 2^-24 S bound them. Independent of the CPU's kernels: any ATen CPU path rounds at most
  // where the eager ops store (the bound counts every such rounding).
  REQUIRE(ops::cuda_kernels_linked());
  const at::Device cuda = odyssey::test::test_gpu();
  at::manual_seed(8);
  const int64_t B = 2, s = 96, h = 4, hd = 64;
  const at::Tensor angles = at::arange(s, at::kDouble).unsqueeze(1) * at::rand({hd / 2}, at::kDouble) * 50;
  const at::Tensor cos = angles.cos().to(at::kFloat), sin = angles.sin().to(at::kFloat);  // [s, hd/2]
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const double units = dtype == at::kFloat ? 8 * std::ldexp(1.0, -24) : 3 * std::ldexp(1.0, -8);
    for (const bool transposed : {false, true}) {
      CAPTURE(dtype, transposed);
      // a transposed view as the Ulysses path and SDPA's gradients hand it on
      const at::Tensor x =
          transposed ? at::randn({B, h, s, hd}).to(dtype).transpose(1, 2) : at::randn({B, s, h, hd}).to(dtype);
      const at::Tensor g = at::randn({B, h, s, hd}).to(dtype).transpose(1, 2);  // non-contiguous gradient
      const at::Tensor xd = x.to(at::kDouble);
      const at::Tensor scale =
          xd.narrow(-1, 0, hd / 2).abs() + xd.narrow(-1, hd / 2, hd / 2).abs();  // |cos|, |sin| <= 1
      const at::Tensor bound = at::cat({scale, scale}, -1) * units * 1.01;
      for (const bool inverse : {false, true}) {
        const at::Tensor on_cpu = ops::rope_rotate(x, cos, sin, inverse);
        const at::Tensor on_gpu = ops::rope_rotate(x.to(cuda), cos.to(cuda), sin.to(cuda), inverse).cpu();
        CHECK(on_gpu.is_contiguous());
        CHECK(((on_gpu.to(at::kDouble) - on_cpu.to(at::kDouble)).abs() <= bound).all().item<bool>());
      }
      // through autograd: the backward is the inverse rotation of the incoming gradient
      at::Tensor xc = x.detach().clone().to(cuda).requires_grad_(true);
      at::Tensor xh = x.detach().clone().requires_grad_(true);
      apply_rope(xc, Positions{at::Tensor(), cos.to(cuda), sin.to(cuda)}).backward(g.to(cuda));
      apply_rope(xh, Positions{at::Tensor(), cos, sin}).backward(g);
      const at::Tensor gd = g.to(at::kDouble);
      const at::Tensor gscale = gd.narrow(-1, 0, hd / 2).abs() + gd.narrow(-1, hd / 2, hd / 2).abs();
      const at::Tensor gbound = at::cat({gscale, gscale}, -1) * units * 1.01;
      CHECK(((xc.grad().cpu().to(at::kDouble) - xh.grad().to(at::kDouble)).abs() <= gbound).all().item<bool>());
    }
  }
}

TEST_CASE("rope: a step's tables are made on the GPU without the host waiting for it", "[rope][.cuda]") {
  // The frequencies cross from host memory once per (model, device): a copy from pageable memory
  // makes the host wait for the device (ATen synchronises it). Under PyTorch's sync debug mode
  // "error" an operation that waits throws; the first upload of another RoPE shows that it does.
  // (The mode flags ATen's explicit waits; the caching allocator's own calls are not among them.)
  const at::Device cuda = odyssey::test::test_gpu();
  ModelConfig model;
  model.head_dim = 64;
  model.rope_theta = 500000.0;
  model.rope_scaling = RopeScaling{.kind = RopeScalingKind::Llama3, .factor = 8.0, .original_max_position = 8192};
  (void)make_positions(0, 128, model, cuda);  // uploads this model's frequencies
  Positions again;
  {
    const HostSyncRefusal refusal;
    CHECK_NOTHROW(again = make_positions(128, 128, model, cuda));
    ModelConfig other = model;
    other.rope_theta = 12345.678;  // a theta no other case uses: its frequencies are not on the device yet
    CHECK_THROWS_WITH(make_positions(0, 128, other, cuda), Catch::Contains("synchronizing CUDA operation"));
  }
  REQUIRE(again.cos.defined());
  CHECK(again.cos.device() == cuda);
  // scaled RoPE: the kernel's fp32 frequencies, from the kept upload, equal the rule's own
  REQUIRE(again.inv_freq.defined());
  CHECK(at::equal(again.inv_freq.cpu(), at::tensor(rope_inv_freq(model), at::kDouble).to(at::kFloat)));
  // the kept frequencies give one call's tables at every offset: positions 128.. of one call of 256
  const Positions whole = make_positions(0, 256, model, cuda);
  CHECK(at::equal(again.cos.cpu(), whole.cos.narrow(0, 128, 128).cpu()));
  CHECK(at::equal(again.sin.cpu(), whole.sin.narrow(0, 128, 128).cpu()));
  // the cache is keyed by device index: a device without one (which rank threads on several GPUs
  // would share as one key) is refused, not cached on whichever GPU is current
  CHECK_THROWS_WITH(make_positions(0, 128, model, at::Device(at::kCUDA)), Catch::Contains("names no device index"));
}

TEST_CASE("rope: per-document positions reach the GPU without the host waiting for it", "[rope][.cuda]") {
  // document_positions = "restart": each row's positions are written on the host and uploaded from
  // pinned memory without a wait (a pageable copy would throw under the sync debug mode's "error").
  const at::Device cuda = odyssey::test::test_gpu();
  ModelConfig model;
  model.head_dim = 64;
  model.rope_theta = 500000.0;
  (void)make_positions(0, 8, model, cuda);  // this model's frequencies uploaded: not the wait under test
  DocumentSpans documents;
  documents.starts = {{0, 40, 100}, {7}};  // [B = 2] rows: three documents, and a leading segment then one
  Positions on_gpu;
  {
    const HostSyncRefusal refusal;
    CHECK_NOTHROW(on_gpu = make_positions(0, 128, model, cuda, documents, /*restart=*/true));
  }
  REQUIRE(on_gpu.ids.defined());
  CHECK(on_gpu.ids.device() == cuda);
  CHECK(on_gpu.documents == documents);
  const Positions on_cpu = make_positions(0, 128, model, at::kCPU, documents, /*restart=*/true);
  for (int64_t row = 0; row < 2; ++row)
    CHECK(at::equal(on_gpu.ids[row].cpu(), at::tensor(positions_in_documents(documents.starts[row], 0, 128))));
  // the same integer positions: the GPU's and the CPU's fp64 cosines and sines differ by a few
  // fp64 units in the last place, so their fp32 roundings are equal or one fp32 unit apart, at
  // most 2^-24 for values of magnitude below 1
  const double one_unit = std::ldexp(1.0, -24);
  CHECK((on_gpu.cos.cpu() - on_cpu.cos).abs().max().item<double>() <= one_unit);
  CHECK((on_gpu.sin.cpu() - on_cpu.sin).abs().max().item<double>() <= one_unit);
}
