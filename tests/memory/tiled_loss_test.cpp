// The tiled loss's CPU path, each tile differentiated by hand: loss and gradients against autograd
// through the untiled head and cross-entropy (ignored labels included), the head gradient added in
// place (engine/layout/tile_grad_rules.h), in fp32 and bf16.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "../common/engine_test_util.h"
#include "../fp_tolerance.h"
#include "engine/layout/tile_grad_rules.h"
#include "engine/memory/tiled_loss.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::atomic<int> g_addmm{0}, g_add{0};  // aten::addmm_, aten::add_ calls on this thread

std::unique_ptr<at::ObserverContext> count_adds(const at::RecordFunction& fn) {
  if (std::strcmp(fn.name(), "aten::addmm_") == 0) ++g_addmm;
  if (std::strcmp(fn.name(), "aten::add_") == 0) ++g_add;
  return nullptr;
}

}  // namespace

TEST_CASE("tiled loss on the CPU: the hand-written tile backward equals autograd through the untiled loss",
          "[engine][memory][tiled_loss][equivalence]") {
  torch::manual_seed(11);
  const int64_t B = 2, s = 24, d = 16, V = 40, tile = 8;  // three tiles of two sequences
  const double scale = 1.0 / (B * s);
  const at::Tensor normed = torch::randn({B, s, d}), head = torch::randn({V, d}) / std::sqrt(double(d));
  at::Tensor labels = torch::randint(0, V, {B, s}, at::kLong);
  labels.index_put_({0, 3}, -100);  // ignored: no loss, no gradient
  labels.index_put_({1, 17}, -100);

  // The reference: autograd through the whole [B s, V] head and cross-entropy.
  const at::Tensor x_ref = normed.clone().requires_grad_(true), w_ref = head.clone().requires_grad_(true);
  const at::Tensor logits_ref = at::linear(x_ref, w_ref).reshape({-1, V});  // [B s, V]
  const at::Tensor loss_ref = at::cross_entropy_loss(logits_ref, labels.reshape(-1), {}, at::Reduction::Sum) * scale;
  loss_ref.backward();

  const LossOutputs tiled = tiled_loss_forward(normed, head, labels, at::Tensor(), scale, tile, nullptr);
  // The same sums in other orders: a head-gradient element sums B s = 48 token terms, a dx element
  // V = 40 vocabulary terms, each term a softmax (a V-term sum) times an input; terms of both signs
  // (kappa about sqrt of the count).
  const double tol = reordering_tolerance(/*chain=*/48 + 40 + 8, /*kappa=*/std::sqrt(48.0));
  CHECK(std::abs(tiled.loss.item<double>() - loss_ref.item<double>()) <= tol * loss_ref.item<double>());
  CHECK(relative_diff(tiled.dx, x_ref.grad()) <= tol);
  CHECK(relative_diff(tiled.d_head, w_ref.grad()) <= tol);
  // the ignored positions get no gradient
  CHECK(tiled.dx[0][3].abs().max().item<double>() == 0.0);
  CHECK(tiled.dx[1][17].abs().max().item<double>() == 0.0);
}

TEST_CASE("tiled loss on the CPU: the head gradient goes into its fp32 sum in place, through a temporary only in bf16",
          "[engine][memory][tiled_loss]") {
  torch::manual_seed(12);
  const int64_t B = 1, s = 24, d = 16, V = 40, tile = 8, tiles = 3;
  const at::Tensor labels = torch::randint(0, V, {B, s}, at::kLong);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const bool temporary = tile_weight_grad_needs_temporary(dtype == at::kFloat, /*cuda=*/false);
    const at::Tensor normed = torch::randn({B, s, d}).to(dtype), head = (torch::randn({V, d}) * 0.25).to(dtype);
    g_addmm = g_add = 0;
    const at::CallbackHandle handle =
        at::addThreadLocalCallback(at::RecordFunctionCallback(count_adds).scopes({at::RecordScope::FUNCTION}));
    const LossOutputs out = tiled_loss_forward(normed, head, labels, at::Tensor(), 1.0 / s, tile, nullptr);
    at::removeCallback(handle);
    INFO((dtype == at::kFloat ? "fp32" : "bf16") << ": addmm_ " << g_addmm << ", add_ " << g_add);
    CHECK(temporary == (dtype == at::kBFloat16));
    // one [V, d] product a tile: a GEMM with beta = 1 into the sum, or a product then an add (the
    // loss's own running sum is one aten::add_ a tile either way)
    CHECK(g_addmm == (temporary ? 0 : tiles));
    CHECK(g_add == tiles + (temporary ? tiles : 0));
    CHECK(out.d_head.scalar_type() == at::kFloat);
    CHECK(out.dx.scalar_type() == dtype);
    CHECK(std::isfinite(out.loss.item<double>()));
  }
}
