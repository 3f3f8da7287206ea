// The cost of counting: the same loops with c10's default CPU allocator and with the counting one,
// swapped in and out side by side in one process, rounds interleaved, medians compared. Hidden
// ([.bench]): run with `engine_tests "[.bench]"`. It asserts the swap really happened (counts
// move only under the counting allocator) and that counts return to baseline; the ratios are
// printed, not asserted (timings are no unit-test matter).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "engine/telemetry/phase.h"
#include "engine/telemetry/tensor_tags.h"
#include "engine/telemetry/tracker_state.h"

using namespace odyssey;

namespace {

double seconds_of(const std::function<void()>& body) {
  const auto t0 = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void alloc_loop() {  // 10k allocations of 4 KiB, each freed at once
  for (int i = 0; i < 10000; ++i) {
    at::Tensor t = torch::empty({1024}, torch::kFloat32);
    (void)t;
  }
}

void matmul_loop() {  // compute-bound: [128,128] @ [128,128], 500 times
  at::Tensor a = torch::ones({128, 128});
  at::Tensor b = torch::ones({128, 128});
  for (int i = 0; i < 500; ++i) a = at::matmul(a, b).mul_(1.0 / 128);
}

void training_loop() {  // a 3-layer MLP, forward + backward + SGD, 100 steps, inside phases
  torch::manual_seed(0);
  std::vector<at::Tensor> w;
  for (int l = 0; l < 3; ++l) w.push_back((torch::randn({256, 256}) * 0.05).requires_grad_(true));
  at::Tensor x = torch::randn({64, 256});
  for (int step = 0; step < 100; ++step) {
    PhaseScope s("step");
    at::Tensor h = x;
    {
      PhaseScope fwd("fwd");
      for (auto& wl : w) h = torch::relu(at::matmul(h, wl));  // h: [64, 256]
    }
    at::Tensor loss = h.pow(2).mean();
    {
      PhaseScope bwd("bwd");
      loss.backward();
    }
    PhaseScope opt("optimizer");
    torch::NoGradGuard no_grad;
    for (auto& wl : w) {
      wl.sub_(wl.grad() * 0.01);
      wl.mutable_grad().reset();
    }
  }
}

}  // namespace

TEST_CASE("counting allocator overhead against c10's default allocator", "[.bench][telemetry]") {
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.install_cpu_allocator();
  RankScope rank(63);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);  // one thread: less scheduler noise on a shared machine
  PhaseRecorder recorder(63);
  recorder.set_keep_records(false);
  recorder.add_edge_sink([](const PhaseEdge&) {});  // edges take their category snapshot
  PhaseRecorder::Bind bind(&recorder);
  const int64_t baseline = tracker.device_bytes(63);

  struct Workload {
    const char* name;
    void (*body)();
    std::vector<double> plain, counted;
  };
  std::vector<Workload> loads = {{"alloc 10k x 4 KiB", alloc_loop, {}, {}},
                                 {"matmul 128^2 x 500", matmul_loop, {}, {}},
                                 {"MLP train 100 steps", training_loop, {}, {}}};
  for (auto& l : loads) l.body();  // warm up (oneDNN init, page faults)

  uint8_t priority = 200;  // SetCPUAllocator replaces only at >= the current priority
  for (int round = 0; round < 9; ++round) {
    c10::SetCPUAllocator(c10::GetDefaultCPUAllocator(), priority++);
    REQUIRE(c10::GetCPUAllocator() == c10::GetDefaultCPUAllocator());
    const uint64_t before_plain = tracker.allocations_counted();
    for (auto& l : loads) l.plain.push_back(seconds_of(l.body));
    CHECK(tracker.allocations_counted() - before_plain < 100);  // only stray threads, if any

    c10::SetCPUAllocator(counting_cpu_allocator(), priority++);
    REQUIRE(c10::GetCPUAllocator() == counting_cpu_allocator());
    const uint64_t before_counted = tracker.allocations_counted();
    for (auto& l : loads) l.counted.push_back(seconds_of(l.body));
    CHECK(tracker.allocations_counted() - before_counted >= 10000);
  }
  at::set_num_threads(threads);
  CHECK(tracker.device_bytes(63) == baseline);
  std::printf("\ncounting allocator overhead (median of 9 interleaved rounds):\n");
  for (auto& l : loads) {
    const double p = median(l.plain), c = median(l.counted);
    std::printf("  %-22s default %9.3f ms  counting %9.3f ms  ratio %.3f\n", l.name, p * 1e3, c * 1e3, c / p);
  }
  const double per_alloc_ns = (median(loads[0].counted) - median(loads[0].plain)) / 10000 * 1e9;
  std::printf("  extra per allocation+free (whole path, includes malloc size-class effects): %.0f ns\n", per_alloc_ns);

  // The bookkeeping alone (lock, live list, counters, peaks with three open phase windows),
  // without malloc: what counting adds on top of whatever malloc costs.
  BlockHeader block;
  block.magic = kBlockMagic;
  block.bytes = 4096;
  block.rank = 63;
  PhaseScope a("a"), b("b"), c("c");
  std::vector<double> bookkeeping;
  for (int round = 0; round < 9; ++round)
    bookkeeping.push_back(seconds_of([&] {
      for (int i = 0; i < 1000000; ++i) {
        tracker.impl().admit(&block);
        tracker.impl().release(&block);
      }
    }));
  std::printf("  bookkeeping per allocation+free (no malloc): %.1f ns\n", median(bookkeeping) * 1e3);
  CHECK(tracker.device_bytes(63) == baseline);
}
