// The tiled MLP: its hand-written backward against autograd through the untiled SwiGLU, its weight
// gradients added in place (tile_grad_rules.h), its recompute mode (compute_output = false, what a
// checkpoint's recompute asks for) running no product in forward; on a GPU the bf16 path.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "../common/engine_test_util.h"
#include "../fp_tolerance.h"
#include "engine/layout/tile_grad_rules.h"
#include "engine/memory/tiled_mlp.h"
#include "engine/ops/layers.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::atomic<int> g_matmuls{0};  // matrix products seen by the observer below

std::unique_ptr<at::ObserverContext> count_matmul(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (std::strstr(name, "mm") != nullptr || std::strstr(name, "linear") != nullptr) ++g_matmuls;
  return nullptr;
}

/// The matrix products `body` runs on this thread (ATen's op observer).
template <typename Fn>
int matmuls_in(Fn&& body) {
  g_matmuls = 0;
  const at::CallbackHandle handle =
      at::addThreadLocalCallback(at::RecordFunctionCallback(count_matmul).scopes({at::RecordScope::FUNCTION}));
  body();
  at::removeCallback(handle);
  return g_matmuls.load();
}

std::atomic<int> g_mm{0}, g_addmm{0}, g_add{0};  // aten::mm, aten::addmm_, aten::add_ calls

std::unique_ptr<at::ObserverContext> count_products(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (std::strcmp(name, "aten::mm") == 0) ++g_mm;
  if (std::strcmp(name, "aten::addmm_") == 0) ++g_addmm;
  if (std::strcmp(name, "aten::add_") == 0) ++g_add;
  return nullptr;
}

/// The gradients of x and the three weights for dy: through the tiled Function (tile > 0) or
/// autograd through the untiled SwiGLU (tile = 0), on leaves of `dtype` on `device`.
std::vector<at::Tensor> mlp_grads(const std::vector<at::Tensor>& inputs, const at::Tensor& dy, int64_t tile,
                                  at::ScalarType dtype, at::Device device) {
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& t : inputs) leaves.push_back(t.to(device, dtype).detach().requires_grad_(true));
  at::Tensor out = tile > 0 ? tiled_mlp(leaves[0], leaves[1], leaves[2], leaves[3], tile)
                            : swiglu_mlp(leaves[0], leaves[1], leaves[2], leaves[3]);
  out.backward(dy.to(device, dtype));
  std::vector<at::Tensor> grads;
  for (const at::Tensor& leaf : leaves) grads.push_back(leaf.grad().to(at::kCPU, at::kFloat));
  return grads;
}

/// x [B, s, d], w_gate [f, d], w_up [f, d], w_down [d, f] at the scale of a trained block's
/// (outputs of order 1), and the incoming gradient [B, s, d].
std::vector<at::Tensor> mlp_inputs(int64_t B, int64_t s, int64_t d, int64_t f) {
  torch::manual_seed(5);
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(d)), out_scale = 1.0 / std::sqrt(static_cast<double>(f));
  return {torch::randn({B, s, d}), torch::randn({f, d}) * in_scale, torch::randn({f, d}) * in_scale,
          torch::randn({d, f}) * out_scale};
}

}  // namespace

TEST_CASE("tiled MLP: the hand-written backward equals autograd through the untiled SwiGLU (two sequences)",
          "[engine][memory][tiled_mlp][equivalence]") {
  const int64_t B = 2, s = 48, d = 16, f = 32, tile = 16;  // three tiles of two sequences
  const auto inputs = mlp_inputs(B, s, d, f);
  const at::Tensor dy = torch::randn({B, s, d});
  const auto tiled = mlp_grads(inputs, dy, tile, at::kFloat, at::kCPU);
  const auto whole = mlp_grads(inputs, dy, 0, at::kFloat, at::kCPU);
  // The same products in another order: a weight gradient sums B s = 96 token terms, each made of
  // a d = 16 (dh) or f = 32 (dx) term product and a few elementwise ops; terms of both signs, so
  // the magnitudes summed are about sqrt(96) times the largest result (kappa).
  const double tol = reordering_tolerance(/*chain=*/96 + 32 + 8, /*kappa=*/std::sqrt(96.0));
  for (size_t i = 0; i < tiled.size(); ++i) {
    INFO("gradient " << i << " (x, w_gate, w_up, w_down)");
    CHECK(relative_diff(tiled[i], whole[i]) <= tol);
  }
}

TEST_CASE("tiled MLP: the weight gradients go into their sums in place, through a temporary only for bf16 on the CPU",
          "[engine][memory][tiled_mlp]") {
  // Per tile the backward makes 5 products of its own (gate, up, dh, dx in two) and 3 weight-gradient
  // products: with fp32 weights each is a GEMM with beta = 1 into its sum (aten::addmm_, and the
  // second half of dx is one too); with bf16 on the CPU (no bf16 -> fp32 GEMM) each is an aten::mm
  // then an aten::add_ into the fp32 sum (tile_grad_rules.h).
  const int64_t s = 48, d = 16, f = 32, tile = 16, tiles = 3;
  const auto inputs = mlp_inputs(1, s, d, f);
  const at::Tensor dy = torch::randn({1, s, d});
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const bool temporary = tile_weight_grad_needs_temporary(dtype == at::kFloat, /*cuda=*/false);
    std::vector<at::Tensor> leaves;
    for (const at::Tensor& t : inputs) leaves.push_back(t.to(dtype).detach().requires_grad_(true));
    at::Tensor out = tiled_mlp(leaves[0], leaves[1], leaves[2], leaves[3], tile);
    g_mm = g_addmm = g_add = 0;
    const at::CallbackHandle handle =
        at::addThreadLocalCallback(at::RecordFunctionCallback(count_products).scopes({at::RecordScope::FUNCTION}));
    out.backward(dy.to(dtype));
    at::removeCallback(handle);
    INFO((dtype == at::kFloat ? "fp32" : "bf16") << ": mm " << g_mm << ", addmm_ " << g_addmm << ", add_ " << g_add);
    CHECK(temporary == (dtype == at::kBFloat16));
    CHECK(g_mm == tiles * (temporary ? 4 + 3 : 4));     // gate, up, dh, dx's first half (+ the 3 weight products)
    CHECK(g_addmm == tiles * (temporary ? 1 : 1 + 3));  // dx's second half (+ the 3 weight products)
    CHECK(g_add == (temporary ? tiles * 3 : 0));        // each temporary added into its sum
    for (const at::Tensor& leaf : leaves) CHECK(leaf.grad().scalar_type() == dtype);
  }
}

TEST_CASE("cuda: the tiled MLP's bf16 weight gradients summed in fp32 by the GEMM itself", "[.cuda]") {
  // On CUDA a bf16 tile's weight-gradient products are written into the fp32 sums by cuBLAS
  // (addmm with out_dtype, beta = 1). Against the fp32 untiled autograd: each compared value sums
  // token terms whose chain passes through 8 bf16 roundings (the inputs, gate, up, silu, the
  // product, dh, d up or d gate); rounding errors of mean zero (fp_tolerance.h's model with bf16's
  // u = 2^-9, kappa 1 for data of this kind): 2 lambda sqrt(8) 2^-9 = 0.088. A sum that lost a
  // tile (beta = 0) is off by a third; one that added in bf16 stays inside, but the dtype check
  // below holds the path to the fp32 sum.
  const at::Device gpu = test_gpu();
  const int64_t B = 1, s = 3 * 512, d = 64, f = 256, tile = 512;
  const auto inputs = mlp_inputs(B, s, d, f);
  const at::Tensor dy = torch::randn({B, s, d});
  const auto tiled = mlp_grads(inputs, dy, tile, at::kBFloat16, gpu);
  const auto exact = mlp_grads(inputs, dy, 0, at::kFloat, gpu);
  const double tol = 2.0 * kRoundingLambda * std::sqrt(8.0) * 0x1p-9;
  for (size_t i = 0; i < tiled.size(); ++i) {
    INFO("gradient " << i << " (x, w_gate, w_up, w_down)");
    CHECK(relative_diff(tiled[i], exact[i]) <= tol);
  }
  CHECK_FALSE(tile_weight_grad_needs_temporary(/*fp32_compute=*/false, /*cuda=*/true));
}

TEST_CASE("tiled MLP: the recompute mode runs no tile and gives the same gradients", "[engine][memory][tiled_mlp]") {
  torch::manual_seed(3);
  const int64_t d = 16, f = 32, s = 48, tile = 16;  // three tiles
  const at::Tensor x = torch::randn({1, s, d});
  const at::Tensor w_gate = torch::randn({f, d}) * 0.2, w_up = torch::randn({f, d}) * 0.2,
                   w_down = torch::randn({d, f}) * 0.2;
  const at::Tensor dy = torch::randn({1, s, d});  // the gradient flowing into the MLP's output

  // Runs the Function in one mode and returns the gradients of x and the three weights for dy,
  // and the matrix products its forward ran.
  auto run = [&](bool compute_output, int* forward_matmuls) {
    std::vector<at::Tensor> leaves;
    for (const at::Tensor& t : {x, w_gate, w_up, w_down}) leaves.push_back(t.detach().clone().requires_grad_(true));
    at::Tensor out;
    *forward_matmuls =
        matmuls_in([&] { out = tiled_mlp(leaves[0], leaves[1], leaves[2], leaves[3], tile, compute_output); });
    REQUIRE(out.sizes() == x.sizes());
    out.backward(dy);
    std::vector<at::Tensor> grads;
    for (const at::Tensor& leaf : leaves) grads.push_back(leaf.grad());
    return grads;
  };
  int computing_matmuls = 0, recompute_matmuls = 0;
  const auto computed = run(true, &computing_matmuls);
  const auto recomputed = run(false, &recompute_matmuls);
  // The computing forward runs three products a tile (the observer sees them); the recompute none.
  CHECK(computing_matmuls >= 3 * (s / tile));
  CHECK(recompute_matmuls == 0);
  // The backward is the same code on the same saved inputs either way: equal bit for bit.
  for (size_t i = 0; i < computed.size(); ++i) {
    INFO("gradient " << i);
    CHECK(at::equal(computed[i], recomputed[i]));
  }
}
