// host_adamw_bench: the host optimizer's speed, the fused one-pass AdamW (AdamW::step on a CPU shard)
// against the op-by-op ATen form it replaced, side by side in one process on the same shard.
// Usage: host_adamw_bench [PARAMS_MILLIONS=16] [REPS=10] [THREADS...]. Prints, per intra-op thread
// count (default: ATen's), the threads the fused pass ran on, median ms, the ratio and the host
// memory traffic each reaches (the fused pass moves 28 B a parameter: read p, g, m, v; write p, m,
// v), the figure hardware.host_optimizer_gbps stands for, beside a parallel copy's (the ceiling).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "engine/parallel/devices.h"
#include "engine/train/optimizer.h"

using namespace odyssey;

namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
double median_ms(int reps, Fn&& fn) {
  fn();  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// The op-by-op form (what AdamW::step runs on device tensors): eight passes and a temporary.
void adamw_op_by_op(at::Tensor p, const at::Tensor& g, at::Tensor m, at::Tensor v, const TrainingConfig& t, double lr,
                    int64_t step) {
  const double bias1 = 1.0 - std::pow(t.beta1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(t.beta2, static_cast<double>(step));
  p.mul_(1.0 - lr * t.weight_decay);
  m.lerp_(g, 1.0 - t.beta1);
  v.mul_(t.beta2).addcmul_(g, g, 1.0 - t.beta2);
  at::Tensor denom = (v / bias2).sqrt_().add_(t.adam_eps);  // [n] transient
  p.addcdiv_(m, denom, -lr / bias1);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t millions = argc > 1 ? std::atoll(argv[1]) : 16;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  if (millions < 1 || reps < 1) {
    std::fprintf(stderr, "usage: host_adamw_bench [PARAMS_MILLIONS >= 1] [REPS >= 1]\n");
    return 2;
  }
  at::NoGradGuard no_grad;
  const int64_t n = millions * 1000000;
  TrainingConfig t;
  t.weight_decay = 0.1;
  const double lr = 1e-3;
  // The fused pass, on a flat group's CPU shard (one matrix: every element decays).
  RankContext ctx;
  FlatParamGroup group("bench", {ParamSpec{"w", {n}, true, 0.02}}, ctx, FlatGroupOptions{});
  group.init(1);
  group.master.mutable_grad().normal_();
  AdamW fused(t);
  at::Tensor p = at::randn({n}), g = at::randn({n}), m = at::zeros({n}), v = at::zeros({n});
  at::Tensor copy_dst = at::empty({n});
  std::vector<int> thread_counts;
  for (int i = 3; i < argc; ++i) {
    const int threads = std::atoi(argv[i]);
    if (threads < 1) {
      std::fprintf(stderr, "host_adamw_bench: thread count '%s' must be >= 1\n", argv[i]);
      return 2;
    }
    thread_counts.push_back(threads);
  }
  if (thread_counts.empty()) thread_counts.push_back(at::get_num_threads());
  const double traffic = 28.0 * static_cast<double>(n);  // bytes the fused pass must move
  std::printf("host AdamW over %lld M fp32 parameters, median of %d\n", static_cast<long long>(millions), reps);
  std::printf("threads  ran on  fused ms  fused GB/s  op-by-op ms  op-by-op GB/s-equiv  fused/op-by-op  copy GB/s\n");
  int64_t step = 0;
  for (int threads : thread_counts) {
    at::set_num_threads(threads);
    // The fused pass, on a flat group's CPU shard (one matrix: every element decays).
    const double fused_ms = median_ms(reps, [&] { fused.step({&group}, lr); });
    // The op-by-op form on tensors of the same size.
    const double ops_ms = median_ms(reps, [&] { adamw_op_by_op(p, g, m, v, t, lr, ++step); });
    // The ceiling: a parallel copy reads and writes 8 B an element.
    const double copy_ms = median_ms(reps, [&] { copy_dst.copy_(p); });
    // "ran on": the threads the fused pass's range was split over (AdamW::host_threads), which is
    // the thread count unless the pass ran serially.
    std::printf("%7d %7d %9.2f %11.2f %12.2f %20.2f %15.2fx %10.2f\n", at::get_num_threads(), fused.host_threads(),
                fused_ms, traffic / fused_ms / 1e6, ops_ms, traffic / ops_ms / 1e6, fused_ms / ops_ms,
                8.0 * static_cast<double>(n) / copy_ms / 1e6);
  }
  return 0;
}
