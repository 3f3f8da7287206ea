// The tiled MLP's recompute mode (compute_output = false, what a checkpoint's recompute asks for):
// it runs no matrix product in forward and gives the backward the computing forward gives.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "engine/memory/tiled_mlp.h"

using namespace odyssey;

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

}  // namespace

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
    *forward_matmuls = matmuls_in([&] { out = tiled_mlp(leaves[0], leaves[1], leaves[2], leaves[3], tile, compute_output); });
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
