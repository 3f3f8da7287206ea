// The engine on a GPU (hidden tag [.cuda]: run `engine_tests "[.cuda]"` on a CUDA machine): every
// technique together equals the plain run (fp32), bf16 trains, checkpointing and offload lower the
// measured device peak and offload fills the host pool.
#include <catch2/catch.hpp>

#include <cmath>

#include <torch/cuda.h>

#include "../engine_test_util.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

RunConfig cuda_config() {
  RunConfig cfg = tiny_config(4, 256);
  cfg.training.device = DeviceKind::Cuda;
  return cfg;
}

RankContext cuda_rank() {
  RankContext ctx;
  ctx.device = test_gpu();
  return ctx;
}

}  // namespace

TEST_CASE("cuda: every technique together equals the plain run (fp32)", "[.cuda]") {
  REQUIRE(prepare_cuda().available);
  RunConfig plain = cuda_config();
  RunConfig all = plain;
  all.memory.activation_checkpointing = all.memory.offload_activations = true;
  all.memory.tiled_mlp = all.memory.tiled_loss = true;
  Trainer a(plain, cuda_rank()), b(all, cuda_rank());
  const double la = a.forward_backward(0), lb = b.forward_backward(0);
  // The same sums in other orders (cuBLAS split-K, the fused loss's online log-sum-exp, atomics in
  // the attention backward): the reordering bounds of engine_test_util.h hold for any order, as
  // long as fp32 matmuls stay fp32 (LibTorch's default: TF32 off for matmuls).
  CHECK(std::abs(la - lb) <= loss_tolerance(plain, 1) * std::abs(la));
  std::vector<at::Tensor> ga, gb;
  for (auto* g : a.model().groups()) ga.push_back(g->grad().cpu());
  for (auto* g : b.model().groups()) gb.push_back(g->grad().cpu());
  std::string worst;
  const double diff = per_param_max_relative_diff(a, gb, ga, &worst);
  INFO("worst gradient " << worst << ": " << diff);
  CHECK(diff <= gradient_tolerance(plain, 1));
  CHECK(b.offload_store().total_offloaded() == plain.model.n_layers - 1);
}

TEST_CASE("cuda: bf16 trains, checkpointing and offload lower the measured peak", "[.cuda]") {
  REQUIRE(prepare_cuda().available);
  RunConfig cfg = cuda_config();
  cfg.training.dtype = DType::BFloat16;
  cfg.training.lr = 3e-3;
  int64_t plain_peak = 0;
  {
    Trainer t(cfg, cuda_rank());
    double first = 0, last = 0;
    for (int i = 0; i < 20; ++i) {
      const StepResult r = t.step();
      REQUIRE(std::isfinite(r.loss));
      if (i == 0) first = r.loss;
      last = r.loss;
      plain_peak = r.device_peak;
    }
    CHECK(last < 0.8 * first);
  }
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
  Trainer t(cfg, cuda_rank());
  t.step();
  const StepResult r = t.step();
  INFO("plain peak " << plain_peak << ", checkpointing + offload peak " << r.device_peak);
  CHECK(r.device_peak < plain_peak);
  CHECK(r.host_peak > 0);
}

TEST_CASE("cuda: optimizer offload keeps the states in pinned host memory and trains as on the device", "[.cuda]") {
  REQUIRE(prepare_cuda().available);
  RunConfig on_device = cuda_config();
  RunConfig offloaded = on_device;
  offloaded.memory.offload_optimizer = true;
  Trainer a(on_device, cuda_rank()), b(offloaded, cuda_rank());
  int64_t elements = 0;
  for (auto* g : b.model().groups()) {
    CHECK(g->states_on_host());
    CHECK(g->master.device().is_cpu());
    CHECK(g->master.is_pinned());  // one exact pinned allocation per state tensor
    elements += g->shard_numel();
  }
  // the host pool holds exactly the fp32 master, gradient and both moments: 16 B a parameter
  CHECK(MemoryTracker::instance().host_bytes(cuda_rank().slot) >= 16 * elements);
  // One step on identical gradients (a's, copied to b's host gradient): the same forward (the
  // device copy holds the master's values), then AdamW on the CPU instead of the GPU (other
  // kernels, the same fp32 arithmetic): the parameters within the optimizer bound of
  // engine_test_util.h for AdamW on identical gradients.
  const double la = a.forward_backward(a.next_step());
  const double lb = b.forward_backward(b.next_step());
  CHECK(std::abs(la - lb) <= loss_tolerance(on_device, 1) * std::abs(la));
  auto ga = a.model().groups(), gb = b.model().groups();
  {
    at::NoGradGuard no_grad;
    for (size_t g = 0; g < ga.size(); ++g) gb[g]->master.mutable_grad().copy_(ga[g]->grad());
  }
  a.apply_gradients();
  b.apply_gradients();
  std::vector<at::Tensor> pa, pb;
  for (auto* g : ga) pa.push_back(g->master.detach().cpu());
  for (auto* g : gb) pb.push_back(g->master.detach().cpu());
  std::string worst;
  const double diff = per_param_max_relative_diff(a, pb, pa, &worst);
  INFO("worst parameter " << worst << ": " << diff);
  CHECK(diff <= optimizer_tolerance(on_device, 1, elements));
}
