// engine/ops dispatch: the LibTorch path of each op against plain LibTorch formulas with autograd
// (everywhere), and the CUDA kernel path against the LibTorch path on the same data ([.cuda]).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "../common/engine_test_util.h"
#include "../fp_tolerance.h"
#include "engine/ops/layers.h"
#include "engine/ops/ops.h"
#include "engine/telemetry/memory_tracker.h"

using namespace odyssey;
using odyssey::test::reordering_tolerance;

namespace {

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble).cpu() - b.to(at::kDouble).cpu()).abs().max().item<double>();
}

double max_abs(const at::Tensor& a) { return a.to(at::kDouble).abs().max().item<double>(); }

at::Tensor composite_rmsnorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// Independent RoPE: pairs (k, k + hd/2) as complex numbers times e^(i pos freq), float64 throughout.
at::Tensor expected_pack(const at::Tensor& x, const at::Tensor& positions, double theta, const ops::RopeStage& st) {
  const int64_t hd = x.size(3), half = hd / 2, m = st.stage_heads / st.ranks;
  std::vector<int64_t> heads;
  for (int64_t i = 0; i < st.stage_heads; ++i) heads.push_back(st.head_begin + (i / st.head_repeat) * st.head_stride);
  const at::Tensor xs = x.index_select(2, torch::tensor(heads)).to(at::kDouble);  // [B, s, h, hd]
  const at::Tensor freq = at::pow(theta, -at::arange(0, half, at::kDouble) * 2.0 / static_cast<double>(hd));
  const at::Tensor angle = positions.to(at::kDouble).unsqueeze(-1).unsqueeze(-1) * freq;  // [B, s, 1, half]
  const at::Tensor z =
      at::view_as_complex(at::stack({xs.narrow(-1, 0, half), xs.narrow(-1, half, half)}, -1).contiguous()) *
      at::polar(at::ones_like(angle), angle);
  const at::Tensor rotated = at::cat({at::real(z), at::imag(z)}, -1);  // [B, s, h, hd]
  return rotated.view({x.size(0), x.size(1), st.ranks, m, hd}).permute({2, 0, 1, 3, 4}).contiguous();
}

}  // namespace

TEST_CASE("ops::rmsnorm gradients equal autograd of the composite formula", "[ops][rmsnorm][equivalence]") {
  torch::manual_seed(1);
  const at::Tensor x0 = torch::randn({2, 3, 8}), w0 = torch::randn({8}), g = torch::randn({2, 3, 8});
  at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  at::Tensor xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
  const at::Tensor y = ops::rmsnorm(x, w, 1e-5), yr = composite_rmsnorm(xr, wr, 1e-5);
  (y * g).sum().backward();
  (yr * g).sum().backward();
  // The op and the composite formula round in other orders (../../fp_tolerance.h). y: the mean
  // of squares over d = 8 (terms >= 0) and 3 ops; dx: that, and the sum over d of g*w*x*r
  // (mixed signs); dw: the sum over the 6 rows of g*x*r.
  const int64_t d = 8, rows = 6;
  CHECK(max_diff(y, yr) <= reordering_tolerance(d + 3, 1.0) * max_abs(yr));
  CHECK(max_diff(x.grad(), xr.grad()) <= reordering_tolerance(2 * d + 6, 2.0) * max_abs(xr.grad()));
  CHECK(max_diff(w.grad(), wr.grad()) <= reordering_tolerance(d + 3 + rows, 2.0) * max_abs(wr.grad()));
  CHECK_THROWS_WITH(ops::rmsnorm(x0, torch::randn({7}), 1e-5), Catch::Contains("expected [8]"));
  CHECK_THROWS_WITH(ops::rmsnorm(x0.to(at::kDouble), w0, 1e-5), Catch::Contains("float32 or bfloat16"));
}

TEST_CASE("ops::rmsnorm in bf16 stays within bf16 rounding of fp32", "[ops][rmsnorm][equivalence]") {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({16, 64}), w = torch::randn({64});
  const at::Tensor y32 = ops::rmsnorm(x, w, 1e-5);
  const at::Tensor y16 = ops::rmsnorm(x.to(at::kBFloat16), w.to(at::kBFloat16), 1e-5);
  CHECK(y16.scalar_type() == at::kBFloat16);
  CHECK(max_diff(y16, y32) <= max_abs(y32) / 64);  // bf16 inputs and output: ~3 roundings of 2^-9
}

TEST_CASE("ops::rmsnorm_rstd is the forward's statistics, in any row tiles", "[ops][rmsnorm][equivalence]") {
  // The same formula on the same rows (rsqrt of the fp32 mean of squares + eps), the rows split
  // into other tiles: each row's mean is one reduction of d = 96 fp32 squares in either, so the
  // tolerance is the reordering bound of a 96-term sum of positive terms (kappa 1) plus the
  // rsqrt's rounding.
  torch::manual_seed(8);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const at::Tensor x = torch::randn({2, 37, 96}).to(dtype), w = torch::ones({96}).to(dtype);
    const at::Tensor forward_rstd = std::get<1>(ops::rmsnorm_forward(x, w, 1e-5));  // [74]
    for (int64_t tile : {1, 5, 74, 1000}) {
      CAPTURE(tile);
      const at::Tensor rstd = ops::rmsnorm_rstd(x, 1e-5, tile);
      REQUIRE(rstd.sizes() == at::IntArrayRef({74}));
      CHECK(rstd.scalar_type() == at::kFloat);
      CHECK(max_diff(rstd, forward_rstd) <= (reordering_tolerance(96, 1.0) + 2 * 6e-8) * max_abs(forward_rstd));
    }
  }
  CHECK_THROWS_WITH(ops::rmsnorm_rstd(torch::ones({2, 4}), 1e-5, 0), Catch::Contains("tile_rows = 0"));
}

TEST_CASE("ops::rope_pack equals rotate-select-permute done with complex numbers", "[ops][rope][equivalence]") {
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({2, 5, 8, 16});
  const at::Tensor positions = torch::arange(10, torch::kLong).reshape({2, 5}) * 1000 + 123;
  const ops::RopeStage stages[] = {{2, 4, 4, 1, 1}, {4, 4, 1, 2, 1}, {4, 8, 0, 1, 2}};
  for (const ops::RopeStage& st : stages) {
    CAPTURE(st.ranks, st.stage_heads, st.head_begin, st.head_stride, st.head_repeat);
    const at::Tensor send = ops::rope_pack(x, positions, 500000.0, st);
    CHECK(send.sizes() == at::IntArrayRef({st.ranks, 2, 5, st.stage_heads / st.ranks, 16}));
    // A rotation per pair: two products and a sum in fp32 against float64 throughout, with the
    // angles exact to fp32 on both sides (position * frequency kept in double).
    CHECK(max_diff(send, expected_pack(x, positions, 500000.0, st)) <= reordering_tolerance(4, 1.0) * max_abs(x));
  }
  CHECK_THROWS_WITH(ops::rope_pack(x, positions, 500000.0, ops::RopeStage{3, 4, 0, 1, 1}),
                    Catch::Contains("stage_heads = 4"));
  CHECK_THROWS_WITH(ops::rope_pack(x, positions.to(at::kInt), 500000.0, ops::RopeStage{}),
                    Catch::Contains("positions must be int64"));
}

TEST_CASE("ops::rope_unpack_backward is the adjoint of rope_pack", "[ops][rope][equivalence]") {
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({1, 6, 4, 8}), positions = torch::arange(6, torch::kLong).reshape({1, 6}) * 77;
  for (const ops::RopeStage& st : {ops::RopeStage{2, 2, 1, 2, 1}, ops::RopeStage{4, 4, 0, 1, 2}}) {
    const at::Tensor send = ops::rope_pack(x, positions, 10000.0, st);
    const at::Tensor g = torch::randn(send.sizes());
    at::Tensor dx = torch::full(x.sizes(), 3.0);
    ops::rope_unpack_backward(dx, g, positions, 10000.0, st, /*accumulate=*/false);
    // Heads outside the stage keep their 3.0; the stage heads hold exactly the adjoint.
    std::vector<int64_t> heads;
    for (int64_t i = 0; i < st.stage_heads / st.head_repeat; ++i) heads.push_back(st.head_begin + i * st.head_stride);
    at::Tensor mask = torch::zeros({4}, torch::kBool);
    mask.index_fill_(0, torch::tensor(heads), true);
    const at::Tensor outside = dx.index_select(2, (~mask).nonzero().squeeze(1));
    CHECK(max_diff(outside, torch::full(outside.sizes(), 3.0)) == 0.0);
    const at::Tensor adjoint = dx.index_select(2, torch::tensor(heads));
    const double lhs = (send * g).sum().item<double>(),
                 rhs = (x.index_select(2, torch::tensor(heads)) * adjoint).sum().item<double>();
    // <send, g> = <x, adjoint>: two sums of n products (in float32 before the double sum) plus the
    // rotation's 4 ops, against the magnitudes summed (the products have mixed signs).
    const int64_t n = send.numel();
    CHECK(std::abs(lhs - rhs) <= reordering_tolerance(n + 4, 1.0) * (send * g).abs().sum().item<double>());
    at::Tensor twice = dx.clone();
    ops::rope_unpack_backward(twice, g, positions, 10000.0, st, /*accumulate=*/true);
    CHECK(max_diff(twice.index_select(2, torch::tensor(heads)), 2 * adjoint) <=
          reordering_tolerance(5, 1.0) * max_abs(adjoint));
  }
}

TEST_CASE("ops::linear_cross_entropy equals cross_entropy with autograd", "[ops][lce][equivalence]") {
  torch::manual_seed(5);
  const int64_t tokens = 37, dim = 16, vocab = 50;
  const at::Tensor h0 = torch::randn({tokens, dim}) * 2, w0 = torch::randn({vocab, dim});
  at::Tensor labels = torch::randint(0, vocab, {tokens}, torch::kLong);
  labels.index_put_({torch::tensor({3, 4, 20})}, -100);
  const double scale = 1.0 / 30.0;
  at::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  const at::Tensor logits = h.matmul(w.t());
  const at::Tensor per_token = at::cross_entropy_loss(logits, labels, {}, at::Reduction::None, -100);
  (per_token.sum() * scale).backward();

  at::Tensor dweight = torch::zeros({vocab, dim});
  const auto r = ops::linear_cross_entropy(h0, w0, labels, scale, &dweight, true, /*seq_tile=*/8, /*vocab_tile=*/12);
  // Tiles of 8 tokens x 12 vocabulary entries against whole matmuls (../../fp_tolerance.h): a
  // loss is the logits' dot products over dim and the log-sum-exp over vocab; dhidden adds the
  // sum over vocab of (p - y) w; dweight the sum over tokens of (p - y) h. Mixed signs.
  const int64_t loss_chain = dim + vocab + 3;
  CHECK(max_diff(r.loss, per_token.detach()) <= reordering_tolerance(loss_chain, 2.0) * max_abs(per_token));
  CHECK(max_diff(r.dhidden, h.grad()) <= reordering_tolerance(loss_chain + vocab, 2.0) * max_abs(h.grad()));
  CHECK(max_diff(dweight, w.grad()) <= reordering_tolerance(loss_chain + tokens, 2.0) * max_abs(w.grad()));
  // dweight accumulates; the loss alone needs no gradient work.
  const auto again = ops::linear_cross_entropy(h0, w0, labels, scale, &dweight, false, 8, 12);
  CHECK_FALSE(again.dhidden.defined());
  CHECK(max_diff(dweight, 2 * w.grad()) <= 2 * reordering_tolerance(loss_chain + tokens + 1, 2.0) * max_abs(w.grad()));
  at::Tensor bad = labels.clone();
  bad[7] = vocab;
  CHECK_THROWS_WITH(ops::linear_cross_entropy(h0, w0, bad, scale, nullptr), Catch::Contains("labels[7] = 50"));
}

namespace {

// The case whose fp32 sum tells the order of its additions: destination 0 of dim 1 receives 1,
// then A = 2^24, then -A (index [0, 1, 0, 0]). In index order ((0 + 1) + A) rounds 2^24 + 1 to
// the even 2^24 and -A leaves 0; the reverse order leaves exactly 1. Every addition is one
// correctly rounded fp32 add (IEEE 754), the same on any CPU's vector width and on CUDA.
struct OrderedSumCase {
  std::vector<int64_t> values{0, 1, 0, 0};
  at::Tensor src;   // [2, 4, 3] fp32
  at::Tensor dest;  // [2, 2, 3] fp32 zeros
  OrderedSumCase() {
    const float A = 16777216.0f;
    src = torch::zeros({2, 4, 3});
    src.select(1, 0).fill_(1.0f);
    src.select(1, 1).fill_(5.0f);
    src.select(1, 2).fill_(A);
    src.select(1, 3).fill_(-A);
    dest = torch::zeros({2, 2, 3});
  }
  /// Destination 0's value when the additions run in index order, and in the reverse order.
  static float in_order() {
    volatile float sum = 0.0f;  // volatile: each add rounded to fp32, as the tensors' are
    for (const float term : {1.0f, 16777216.0f, -16777216.0f}) sum = sum + term;
    return sum;
  }
  static float reversed() {
    volatile float sum = 0.0f;
    for (const float term : {-16777216.0f, 16777216.0f, 1.0f}) sum = sum + term;
    return sum;
  }
};

}  // namespace

TEST_CASE("ops::swiglu equals autograd of silu(gate) * up bit for bit, and its gradients take the inputs' memory",
          "[ops][swiglu][equivalence]") {
  // The CPU path runs ATen's silu, mul and silu_backward on the same contiguous tensors of the
  // same shape as the composite does, so each element takes the same code path (vector body or
  // scalar tail, thread chunk) on any CPU and ISA; a product's operands are swapped, and an
  // IEEE product rounds the same either way. Hence equality, not a tolerance.
  torch::manual_seed(11);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const at::Tensor g0 = (torch::randn({2, 37, 24}) * 3).to(dtype), u0 = torch::randn({2, 37, 24}).to(dtype);
    const at::Tensor dh = torch::randn({2, 37, 24}).to(dtype);
    at::Tensor g1 = g0.clone().requires_grad_(true), u1 = u0.clone().requires_grad_(true);
    at::Tensor g2 = g0.clone().requires_grad_(true), u2 = u0.clone().requires_grad_(true);
    const at::Tensor fused = ops::swiglu(g1 * 1, u1 * 1);  // non-leaf inputs, as the projections' outputs
    const at::Tensor composite = at::silu(g2 * 1) * (u2 * 1);
    CHECK(at::equal(fused, composite));
    fused.backward(dh);
    composite.backward(dh);
    CHECK(at::equal(g1.grad(), g2.grad()));
    CHECK(at::equal(u1.grad(), u2.grad()));
    // Without autograd: d gate in gate's memory; on the CPU d up is new and up holds dh * up.
    at::Tensor gate = g0.clone(), up = u0.clone();
    const void* gate_memory = gate.data_ptr();
    auto [d_gate, d_up] = ops::swiglu_backward_(dh, gate, up);
    CHECK(d_gate.data_ptr() == gate_memory);
    CHECK(at::equal(d_gate, g2.grad()));
    CHECK(at::equal(d_up, u2.grad()));
    CHECK(at::equal(up, dh * u0));
    // The in-place forward writes the product into gate.
    at::Tensor in_place = g0.clone();
    ops::swiglu_forward_(in_place, u0);
    CHECK(at::equal(in_place, composite));
  }
  CHECK_THROWS_WITH(ops::swiglu(torch::zeros({4, 8}), torch::zeros({4, 9})),
                    Catch::Contains("ops::swiglu: up is") && Catch::Contains("[4, 9]") && Catch::Contains("[4, 8]"));
  CHECK_THROWS_WITH(ops::swiglu_forward(torch::zeros({4}, torch::kLong), torch::zeros({4}, torch::kLong)),
                    Catch::Contains("gate has dtype Long"));
}

TEST_CASE("ops::swiglu refuses what its in-place backward cannot serve, and keeps a leaf intact", "[ops][swiglu]") {
  torch::manual_seed(13);
  const at::Tensor g0 = torch::randn({5, 8}), u0 = torch::randn({5, 8}), dh = torch::randn({5, 8});
  // gate and up in one memory: the passes would write one while reading the other
  const at::Tensor both = torch::randn({5, 8});
  CHECK_THROWS_WITH(ops::swiglu(both, both), Catch::Contains("gate and up share memory"));
  at::Tensor alias = both;
  CHECK_THROWS_WITH(ops::swiglu_forward_(alias, both), Catch::Contains("share memory"));
  // leaves are the caller's: the backward copies them, so they keep their values
  at::Tensor g = g0.clone().requires_grad_(true), u = u0.clone().requires_grad_(true);
  ops::swiglu(g, u).backward(dh);
  CHECK(at::equal(g, g0));
  CHECK(at::equal(u, u0));
  at::Tensor gc = g0.clone().requires_grad_(true), uc = u0.clone().requires_grad_(true);
  (at::silu(gc) * uc).backward(dh);
  CHECK(at::equal(g.grad(), gc.grad()));
  CHECK(at::equal(u.grad(), uc.grad()));
  // the first backward wrote into gate's and up's memory: a second through the same node is refused
  at::Tensor g2 = g0.clone().requires_grad_(true), u2 = u0.clone().requires_grad_(true);
  const at::Tensor h = ops::swiglu(g2 * 1, u2 * 1);
  h.backward(dh, /*retain_graph=*/true);
  CHECK_THROWS_WITH(h.backward(dh), Catch::Contains("a second backward through one node"));
}

TEST_CASE("ops::swiglu keeps gate and up for its backward, not silu(gate)", "[ops][swiglu][memory]") {
  // Measured by the counting CPU allocator: what the forward leaves alive is the result and the
  // saved gate and up; autograd of the composite keeps silu(gate) besides (one [n, f] more).
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.install_cpu_allocator();
  const RankScope rank(0);
  const int64_t n = 512, f = 256, bytes = n * f * 4;  // one [n, f] fp32
  auto kept_after_forward = [&](bool fused) {
    at::Tensor w = torch::randn({f, f}).requires_grad_(true), x = torch::randn({n, f});
    const int64_t before = tracker.device_bytes(0);
    at::Tensor h;
    {
      at::Tensor gate = at::mm(x, w), up = at::mm(x, w);  // [n, f] each, outputs of a graph
      h = fused ? ops::swiglu(gate, up) : at::silu(gate) * up;
    }
    const int64_t kept = tracker.device_bytes(0) - before;
    h.sum().backward();
    return kept;
  };
  CHECK(kept_after_forward(true) == 3 * bytes);   // h, gate, up
  CHECK(kept_after_forward(false) == 4 * bytes);  // h, gate, up, silu(gate)
}

TEST_CASE("cuda: ops::swiglu's kernels give the eager CUDA ops' values and the gradients in gate's and up's memory",
          "[ops][swiglu][.cuda]") {
  // The kernels round where ATen's eager silu and mul round and use ATen's fp32 formulas, so they
  // are compared with the eager CUDA composite within a few roundings of the compute dtype: a
  // different fused multiply-add contraction can move an fp32 intermediate by an ulp, which can
  // flip the bf16 rounding of silu(gate) (up to 2^-7 of it) and then of the result: 1e-6 of the
  // largest value for fp32 (16 ulps), 2^-6 for bf16.
  REQUIRE(ops::cuda_kernels_linked());
  const at::Device cuda = odyssey::test::test_gpu();
  torch::manual_seed(12);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const double tol = dtype == at::kFloat ? 1e-6 : 1.0 / 64;
    const at::Tensor g0 = (torch::randn({3, 1001, 96}) * 3).to(cuda, dtype),
                     u0 = torch::randn({3, 1001, 96}).to(cuda, dtype), dh = torch::randn({3, 1001, 96}).to(cuda, dtype);
    at::Tensor g1 = g0.clone().requires_grad_(true), u1 = u0.clone().requires_grad_(true);
    at::Tensor g2 = g0.clone().requires_grad_(true), u2 = u0.clone().requires_grad_(true);
    const at::Tensor fused = ops::swiglu(g1 * 1, u1 * 1), composite = at::silu(g2 * 1) * (u2 * 1);
    CHECK(max_diff(fused, composite) <= tol * max_abs(composite));
    fused.backward(dh);
    composite.backward(dh);
    CHECK(max_diff(g1.grad(), g2.grad()) <= tol * max_abs(g2.grad()));
    CHECK(max_diff(u1.grad(), u2.grad()) <= tol * max_abs(u2.grad()));
    at::Tensor gate = g0.clone(), up = u0.clone();
    const void *gate_memory = gate.data_ptr(), *up_memory = up.data_ptr();
    auto [d_gate, d_up] = ops::swiglu_backward_(dh, gate, up);
    CHECK(d_gate.data_ptr() == gate_memory);
    CHECK(d_up.data_ptr() == up_memory);
    CHECK(at::equal(d_gate, g1.grad()));
    CHECK(at::equal(d_up, u1.grad()));
  }
}

TEST_CASE("index_add_in_order adds a repeated destination's slices in index order", "[ops][equivalence]") {
  // A repeated destination: the additions in index order, told apart from another order.
  REQUIRE(OrderedSumCase::in_order() == 0.0f);
  REQUIRE(OrderedSumCase::reversed() == 1.0f);
  OrderedSumCase c;
  index_add_in_order(c.dest, 1, c.values, torch::tensor(c.values, at::kLong), c.src);
  CHECK(at::equal(c.dest.select(1, 0), torch::full({2, 3}, OrderedSumCase::in_order())));
  CHECK(at::equal(c.dest.select(1, 1), torch::full({2, 3}, 5.0f)));
  // Without a repeat it is index_add_: each destination receives its one slice, into what it held.
  const std::vector<int64_t> unique{2, 0, 1};
  const at::Tensor src = torch::randn({4, 3, 5}), held = torch::randn({4, 3, 5});
  at::Tensor dest = held.clone();
  index_add_in_order(dest, 1, unique, torch::tensor(unique, at::kLong), src);
  for (int64_t i = 0; i < 3; ++i)
    CHECK(at::equal(dest.select(1, unique[i]), held.select(1, unique[i]) + src.select(1, i)));
}

TEST_CASE("cuda: index_add_in_order sums repeats in index order, equal to the CPU and to a rerun", "[ops][.cuda]") {
  const at::Device cuda = odyssey::test::test_gpu();
  OrderedSumCase c;
  at::Tensor dest = c.dest.to(cuda);
  index_add_in_order(dest, 1, c.values, torch::tensor(c.values, at::kLong).to(cuda), c.src.to(cuda));
  CHECK(at::equal(dest.select(1, 0).cpu(), torch::full({2, 3}, OrderedSumCase::in_order())));
  // Many repeats of mixed sign (8 query heads over 2 KV slots, a replicated KV head's rows): the
  // CPU's bits, and the same bits again, where index_add_'s atomics add in arrival order.
  torch::manual_seed(11);
  const std::vector<int64_t> slots{0, 0, 0, 0, 1, 1, 1, 1};
  const at::Tensor src = torch::randn({1, 4096, 8, 64}) * 1000, index = torch::tensor(slots, at::kLong);
  at::Tensor on_cpu = torch::zeros({1, 4096, 2, 64});
  index_add_in_order(on_cpu, 2, slots, index, src);
  for (int run = 0; run < 2; ++run) {
    at::Tensor on_gpu = torch::zeros({1, 4096, 2, 64}).to(cuda);
    index_add_in_order(on_gpu, 2, slots, index.to(cuda), src.to(cuda));
    CHECK(at::equal(on_gpu.cpu(), on_cpu));
  }
}

TEST_CASE("ops CUDA kernels match the LibTorch path", "[ops][.cuda]") {
  REQUIRE(ops::cuda_kernels_linked());
  const at::Device cuda = odyssey::test::test_gpu();
  torch::manual_seed(6);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const double tol = dtype == at::kFloat ? 2e-5 : 1.0 / 64;
    // RMSNorm with gradients.
    const at::Tensor x = torch::randn({300, 2048}).to(dtype), w = torch::randn({2048}).to(dtype),
                     g = torch::randn({300, 2048}).to(dtype);
    at::Tensor xc = x.to(cuda).requires_grad_(true), wc = w.to(cuda).requires_grad_(true);
    at::Tensor xh = x.clone().requires_grad_(true), wh = w.clone().requires_grad_(true);
    const at::Tensor yc = ops::rmsnorm(xc, wc, 1e-5), yh = ops::rmsnorm(xh, wh, 1e-5);
    (yc * g.to(cuda)).sum().backward();
    (yh * g).sum().backward();
    CHECK(max_diff(yc, yh) <= tol * max_abs(yh));
    CHECK(max_diff(xc.grad(), xh.grad()) <= tol * max_abs(xh.grad()));
    CHECK(max_diff(wc.grad(), wh.grad()) <= 4 * tol * max_abs(wh.grad()));
    // The statistics alone (the Untied input norm's) against the kernel's forward: bit for bit.
    const at::Tensor forward_rstd = std::get<1>(ops::rmsnorm_forward(x.to(cuda), w.to(cuda), 1e-5));
    CHECK(at::equal(ops::rmsnorm_rstd(x.to(cuda), 1e-5, /*tile_rows, unused on CUDA=*/1), forward_rstd));
    // RoPE pack and its backward.
    const at::Tensor q = torch::randn({2, 64, 32, 64}).to(dtype);
    const at::Tensor pos = (torch::arange(128, torch::kLong) * 9000).reshape({2, 64});
    const ops::RopeStage st{4, 8, 2, 3, 1};
    const at::Tensor send_c = ops::rope_pack(q.to(cuda), pos.to(cuda), 500000.0, st),
                     send_h = ops::rope_pack(q, pos, 500000.0, st);
    CHECK(max_diff(send_c, send_h) <= tol * 4);
    at::Tensor dq_c = torch::zeros_like(q).to(cuda), dq_h = torch::zeros_like(q);
    ops::rope_unpack_backward(dq_c, send_c, pos.to(cuda), 500000.0, st, false);
    ops::rope_unpack_backward(dq_h, send_h, pos, 500000.0, st, false);
    CHECK(max_diff(dq_c, dq_h) <= tol * 4);
    // Fused head + loss.
    const at::Tensor h = torch::randn({513, 128}).to(dtype), hw = (torch::randn({3000, 128}) * 0.1).to(dtype);
    const at::Tensor labels = torch::randint(0, 3000, {513}, torch::kLong);
    at::Tensor dw_c = torch::zeros({3000, 128}, torch::kFloat).to(cuda), dw_h = torch::zeros({3000, 128});
    const auto rc =
        ops::linear_cross_entropy(h.to(cuda), hw.to(cuda), labels.to(cuda), 1.0 / 513, &dw_c, true, 256, 1024);
    const auto rh = ops::linear_cross_entropy(h, hw, labels, 1.0 / 513, &dw_h, true, 256, 1024);
    CHECK(max_diff(rc.loss, rh.loss) <= (dtype == at::kFloat ? 1e-4 : 2e-2));
    CHECK(max_diff(rc.dhidden, rh.dhidden) <= 2 * tol * max_abs(rh.dhidden));
    CHECK(max_diff(dw_c, dw_h) <= 2 * tol * max_abs(dw_h));
  }
}

TEST_CASE("norm_in_double: a large fp32 gradient's norm within its rows' bound, any summation order", "[ops][norm]") {
  // 16M + 123 elements in [0, 1): 4096 full rows and a tail. Each row's sum of squares in fp32 is
  // within 4096 u of the exact one for any order of the additions (the worst-case bound of
  // recursive summation of positive terms, n u / (1 - n u) with n = 4096, u = 2^-24: 2.44e-4),
  // plus one rounding for each square; summed in fp64 (exact to 1e-12 here) and rooted, the norm
  // is within half of that: 1.3e-4. So the bound holds whatever kernel LibTorch or oneDNN picks
  // on any CPU. at::norm over the whole tensor in fp32 was 6.9e-4 low at this size here (the
  // clip norm under a CPU run: 3.3% low for one unsharded 8B block).
  at::manual_seed(3);
  const at::Tensor g = at::rand({(int64_t{16} << 20) + 123}, at::kFloat);
  const double exact = g.to(at::kDouble).square().sum().sqrt().item<double>();
  const at::Tensor norm = norm_in_double(g);
  CHECK(norm.scalar_type() == at::kDouble);
  CHECK(norm.dim() == 0);
  CHECK(std::abs(norm.item<double>() - exact) <= 1.3e-4 * exact);
  // a tensor shorter than one row is its own tail; an empty one has norm 0
  const at::Tensor short_one = at::tensor({3.0f, 4.0f});
  CHECK(norm_in_double(short_one).item<double>() == 5.0);
  CHECK(norm_in_double(at::zeros({0}, at::kFloat)).item<double>() == 0.0);
  // not a flat fp32 shard: refused, never a silent copy or a bf16 row norm the bound does not cover
  CHECK_THROWS(norm_in_double(at::zeros({4, 4}, at::kFloat).t()));
  CHECK_THROWS(norm_in_double(at::zeros({4}, at::kBFloat16)));
}
