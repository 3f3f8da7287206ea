// Memory tracker tests: the counting CPU allocator charges exact tensor bytes per rank, pool and
// category (concurrent rank threads too), peaks, retagging, the device limit's OOM, foreign frees.
// Each test uses its own rank (40+) and compares deltas, so other tests in the process do not matter.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/tensor_tags.h"

using namespace odyssey;

namespace {

constexpr size_t idx(MemCategory c) { return static_cast<size_t>(c); }

MemoryTracker& tracker() {
  MemoryTracker::instance().install_cpu_allocator();
  return MemoryTracker::instance();
}

at::Tensor floats(int64_t n) { return torch::empty({n}, torch::kFloat32); }  // n*4 bytes

}  // namespace

TEST_CASE("tracker counts exact tensor bytes per category and pool", "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  REQUIRE(t.cpu_allocator_installed());
  RankScope rank(40);
  const MemorySnapshot before = t.snapshot(40);
  const int64_t blocks_before = t.live_blocks(40);
  at::Tensor params, offloaded, other;
  {
    CategoryScope cat(MemCategory::Params);
    params = floats(1000);  // 4000 bytes
  }
  {
    PoolScope pool(MemPool::Host);
    CategoryScope cat(MemCategory::Offloaded);
    offloaded = torch::empty({256}, torch::kFloat64);  // 2048 bytes
  }
  other = torch::empty({3, 7}, torch::kInt16);  // 42 bytes, default category other
  const MemorySnapshot mid = t.snapshot(40);
  CHECK(mid.device_bytes - before.device_bytes == 4000 + 42);
  CHECK(mid.host_bytes - before.host_bytes == 2048);
  CHECK(mid.category_bytes[idx(MemCategory::Params)] - before.category_bytes[idx(MemCategory::Params)] == 4000);
  CHECK(mid.category_bytes[idx(MemCategory::Offloaded)] - before.category_bytes[idx(MemCategory::Offloaded)] == 2048);
  CHECK(mid.category_bytes[idx(MemCategory::Other)] - before.category_bytes[idx(MemCategory::Other)] == 42);
  CHECK(t.live_blocks(40) - blocks_before == 3);
  CHECK(t.device_bytes(40) == mid.device_bytes);
  CHECK(t.host_bytes(40) == mid.host_bytes);
  CHECK(tracker_category_of(offloaded) == MemCategory::Offloaded);

  params.reset();
  offloaded.reset();
  other.reset();
  const MemorySnapshot after = t.snapshot(40);
  CHECK(after.device_bytes == before.device_bytes);
  CHECK(after.host_bytes == before.host_bytes);
  CHECK(after.category_bytes == before.category_bytes);
  CHECK(t.live_blocks(40) == blocks_before);
}

TEST_CASE("tracker charges concurrent rank threads separately", "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  const int ranks[] = {41, 42, 43};
  std::vector<int64_t> base(3), seen(3), after(3);
  for (int i = 0; i < 3; ++i) base[i] = t.device_bytes(ranks[i]);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      RankScope rank(ranks[i]);
      CategoryScope cat(MemCategory::SavedActivations);
      ++ready;
      while (ready.load() < 3) std::this_thread::yield();  // all ranks allocate at once
      std::vector<at::Tensor> held;
      for (int k = 0; k < 200; ++k) {
        held.push_back(floats(16 * (i + 1)));      // 64*(i+1) bytes each
        if (k % 3 == 0) held.erase(held.begin());  // frees interleave with allocations
      }
      seen[i] = t.device_bytes(ranks[i]) - base[i];
      held.clear();
      after[i] = t.device_bytes(ranks[i]) - base[i];
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 3; ++i) {
    INFO("rank " << ranks[i]);
    CHECK(seen[i] == (200 - 67) * 64 * (i + 1));  // 67 erased (k = 0, 3, ..., 198)
    CHECK(after[i] == 0);
  }
}

TEST_CASE("a free on another thread uncharges the allocating rank", "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  const int64_t rank0 = t.device_bytes(0);
  const int64_t rank44 = t.device_bytes(44);
  at::Tensor x;
  std::thread([&] {
    RankScope rank(44);
    x = floats(500);
  }).join();
  CHECK(t.device_bytes(44) - rank44 == 2000);
  x.reset();  // freed on the unbound main thread
  CHECK(t.device_bytes(44) == rank44);
  CHECK(t.device_bytes(0) == rank0);
}

TEST_CASE("device peak and the category breakdown at the peak", "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  RankScope rank(45);
  t.reset_peak(45);
  const MemorySnapshot s0 = t.snapshot(45);
  CHECK(s0.device_peak == s0.device_bytes);
  at::Tensor p, a, o;
  {
    CategoryScope cat(MemCategory::Params);
    p = floats(1 << 18);  // 1 MiB
  }
  {
    CategoryScope cat(MemCategory::SavedActivations);
    a = floats(1 << 19);  // 2 MiB
  }
  a.reset();
  {
    CategoryScope cat(MemCategory::MlpWorkspace);
    o = floats(1 << 17);  // 0.5 MiB: below the peak
  }
  {
    PoolScope pool(MemPool::Host);
    at::Tensor h = floats(1 << 16);  // 256 KiB host: host peak only
  }
  const MemorySnapshot s = t.snapshot(45);
  CHECK(s.device_peak - s0.device_bytes == (1 << 20) + (2 << 20));
  CHECK(s.host_peak - s0.host_bytes == (1 << 18));
  CHECK(s.host_bytes == s0.host_bytes);
  CHECK(s.category_at_peak[idx(MemCategory::SavedActivations)] -
            s0.category_bytes[idx(MemCategory::SavedActivations)] ==
        (2 << 20));
  CHECK(s.category_at_peak[idx(MemCategory::Params)] - s0.category_bytes[idx(MemCategory::Params)] == (1 << 20));
  CHECK(s.category_at_peak[idx(MemCategory::MlpWorkspace)] == s0.category_bytes[idx(MemCategory::MlpWorkspace)]);
  t.reset_peak(45);
  CHECK(t.snapshot(45).device_peak == t.snapshot(45).device_bytes);
}

TEST_CASE("retag_since moves only later live allocations of one category", "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  RankScope rank(46);
  CategoryScope cat(MemCategory::AttentionWorkspace);
  at::Tensor early = floats(100);  // before the marker: stays
  const uint64_t marker = t.mark();
  at::Tensor kept = floats(200);  // after: moves
  at::Tensor gone = floats(300);  // freed before the retag: nothing to move
  at::Tensor mlp;
  {
    CategoryScope inner(MemCategory::MlpWorkspace);
    mlp = floats(50);  // other category: stays
  }
  gone.reset();
  const MemorySnapshot before = t.snapshot(46);
  t.retag_since(46, marker, MemCategory::AttentionWorkspace, MemCategory::SavedActivations);
  const MemorySnapshot after = t.snapshot(46);
  CHECK(after.category_bytes[idx(MemCategory::SavedActivations)] -
            before.category_bytes[idx(MemCategory::SavedActivations)] ==
        800);
  CHECK(before.category_bytes[idx(MemCategory::AttentionWorkspace)] -
            after.category_bytes[idx(MemCategory::AttentionWorkspace)] ==
        800);
  CHECK(after.device_bytes == before.device_bytes);
  CHECK(tracker_category_of(early) == MemCategory::AttentionWorkspace);
  CHECK(tracker_category_of(kept) == MemCategory::SavedActivations);
  CHECK(tracker_category_of(mlp) == MemCategory::MlpWorkspace);
  kept.reset();  // the free uncharges the new category
  CHECK(t.snapshot(46).category_bytes[idx(MemCategory::SavedActivations)] ==
        before.category_bytes[idx(MemCategory::SavedActivations)]);
}

TEST_CASE("retag_tensor moves one storage and ignores memory the tracker did not allocate", "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  RankScope rank(47);
  at::Tensor x = floats(64);  // 256 bytes, other
  at::Tensor view = x.narrow(0, 8, 8);
  const MemorySnapshot before = t.snapshot(47);
  REQUIRE(retag_tensor(view, MemCategory::SavedActivations));  // the whole storage moves
  const MemorySnapshot after = t.snapshot(47);
  CHECK(after.category_bytes[idx(MemCategory::SavedActivations)] -
            before.category_bytes[idx(MemCategory::SavedActivations)] ==
        256);
  CHECK(before.category_bytes[idx(MemCategory::Other)] - after.category_bytes[idx(MemCategory::Other)] == 256);

  std::vector<float> outside(32);
  at::Tensor foreign = torch::from_blob(outside.data(), {32}, torch::kFloat32);
  CHECK_FALSE(retag_tensor(foreign, MemCategory::Params));
  CHECK_FALSE(retag_tensor(at::Tensor(), MemCategory::Params));
  CHECK_FALSE(tracker_category_of(foreign).has_value());
  CHECK(t.snapshot(47).category_bytes == after.category_bytes);
}

TEST_CASE("device limit raises OutOfMemoryError naming bytes and rank and phase and limit then recovers",
          "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  RankScope rank(48);
  const int64_t held = t.device_bytes(48);
  t.set_phase_name(48, "fwd/block.3/attn");
  t.set_device_limit(48, held + 10000);
  at::Tensor fits = floats(2000);  // 8000 bytes: under the limit
  const int64_t ooms_before = t.snapshot(48).ooms;
  std::string message;
  try {
    at::Tensor too_big = floats(1000);  // 4000 more crosses it
    FAIL("no OutOfMemoryError");
  } catch (const c10::OutOfMemoryError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("4000 bytes"));
  CHECK_THAT(message, Catch::Contains("rank 48"));
  CHECK_THAT(message, Catch::Contains("fwd/block.3/attn"));
  CHECK_THAT(message, Catch::Contains(std::to_string(held + 10000) + " bytes"));
  CHECK(t.snapshot(48).ooms == ooms_before + 1);
  CHECK(t.device_bytes(48) == held + 8000);  // the failed allocation charged nothing
  {
    PoolScope host(MemPool::Host);
    CHECK_NOTHROW(floats(100000));  // the limit is on the device pool only
  }
  CHECK_THROWS_AS(floats(int64_t(1) << 40), c10::OutOfMemoryError);  // far over: fails before malloc
  t.set_device_limit(48, 0);
  at::Tensor later;
  CHECK_NOTHROW(later = floats(1000));
  CHECK(t.device_bytes(48) == held + 12000);
  CHECK_THROWS_AS(t.set_device_limit(48, -1), std::invalid_argument);
  t.set_phase_name(48, "");
}

TEST_CASE("frees of memory the tracker did not allocate never make counts negative", "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  const MemorySnapshot before = t.snapshot(49);
  t.on_alloc(49, MemPool::Device, MemCategory::Grads, -4096);  // a free with nothing charged
  const MemorySnapshot s = t.snapshot(49);
  CHECK(s.device_bytes == before.device_bytes);
  CHECK(s.category_bytes[idx(MemCategory::Grads)] == before.category_bytes[idx(MemCategory::Grads)]);
  t.on_alloc(49, MemPool::Device, MemCategory::Grads, 100);
  t.on_alloc(49, MemPool::Device, MemCategory::Grads, -1000);  // more than charged: clamps at zero
  CHECK(t.snapshot(49).category_bytes[idx(MemCategory::Grads)] == before.category_bytes[idx(MemCategory::Grads)]);
  {
    RankScope rank(49);
    std::vector<float> outside(1024);
    at::Tensor foreign = torch::from_blob(
        outside.data(), {1024}, [](void*) {}, torch::kFloat32);
    foreign.reset();  // its own deleter: never reaches the tracker
  }
  CHECK(t.snapshot(49).device_bytes == before.device_bytes);
  CHECK(t.device_bytes(49) >= 0);
  CHECK_THROWS_AS(RankScope(kMaxTrackedRanks), std::out_of_range);
  CHECK_THROWS_AS(t.snapshot(-1), std::out_of_range);
}

TEST_CASE("intra-op worker threads charge rank 0 and uncharge exactly", "[telemetry][tracker]") {
  MemoryTracker& t = tracker();
  RankScope rank(50);
  const int64_t r0 = t.device_bytes(0), r50 = t.device_bytes(50);
  std::atomic<int64_t> allocated{0};
  std::vector<at::Tensor> keep(64);
  at::parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      keep[static_cast<size_t>(i)] = floats(32);  // 128 bytes each, on whichever thread runs it
      allocated += 128;
    }
  });
  // Workers are unbound (rank 0); the calling thread (rank 50) may run part of the range.
  CHECK((t.device_bytes(0) - r0) + (t.device_bytes(50) - r50) == allocated.load());
  CHECK(allocated.load() == 64 * 128);
  keep.clear();
  CHECK(t.device_bytes(0) == r0);
  CHECK(t.device_bytes(50) == r50);
}

TEST_CASE("CUDA blocks through the allocator's trace hook: categories, owner by device, peaks, retag, frees",
          "[telemetry][tracker][cuda_counting]") {
  // The hook's work driven by hand, as the caching allocator would call it (no GPU needed): rank
  // slot 60 runs on fake device 7.
  MemoryTracker& t = MemoryTracker::instance();
  constexpr int kSlot = 60, kDevice = 7;
  t.count_cuda_device(kSlot, kDevice);
  const int64_t blocks_before = t.cuda_blocks();
  {
    RankScope rank(kSlot);
    t.reset_peak(kSlot);
    {
      CategoryScope saved(MemCategory::SavedActivations);
      t.on_cuda_alloc(kDevice, 0x10000, 4096);  // this thread's rank runs on the device
    }
    CategoryScope work(MemCategory::AttentionWorkspace);
    const int window = t.open_peak_window(kSlot);
    t.on_cuda_alloc(kDevice, 0x20000, 1024);
    t.on_cuda_free(kDevice, 0x20000);
    const PeakWindow w = t.close_peak_window(kSlot, window);
    CHECK(w.device_peak == 4096 + 1024);
    CHECK(w.category_at_peak[static_cast<size_t>(MemCategory::AttentionWorkspace)] == 1024);
  }
  // A thread bound to no rank on this device (NCCL's, an autograd device thread): its blocks go
  // to the rank counted for the device, in that thread's category.
  std::thread other([&] {
    CategoryScope comm(MemCategory::CommBuffers);
    t.on_cuda_alloc(kDevice, 0x30000, 512);
  });
  other.join();
  MemorySnapshot s = t.snapshot(kSlot);
  CHECK(s.device_bytes == 4096 + 512);
  CHECK(s.device_peak == 4096 + 1024);
  CHECK(s.category_bytes[static_cast<size_t>(MemCategory::SavedActivations)] == 4096);
  CHECK(s.category_bytes[static_cast<size_t>(MemCategory::CommBuffers)] == 512);
  CHECK(s.device_reserved == 0);  // the fake device has no allocator statistics to read
  // Retag (a checkpointed input), an uncounted device and an unknown free change nothing else.
  CHECK(t.retag_cuda(kDevice, 0x10000, MemCategory::Offloaded));
  CHECK_FALSE(t.retag_cuda(kDevice, 0x99999, MemCategory::Offloaded));
  t.on_cuda_alloc(kDevice + 1, 0x40000, 8192);
  t.on_cuda_free(kDevice, 0x99999);
  s = t.snapshot(kSlot);
  CHECK(s.category_bytes[static_cast<size_t>(MemCategory::Offloaded)] == 4096);
  CHECK(s.category_bytes[static_cast<size_t>(MemCategory::SavedActivations)] == 0);
  CHECK(s.device_bytes == 4096 + 512);
  t.on_cuda_free(kDevice, 0x10000);
  t.on_cuda_free(kDevice, 0x30000);
  CHECK(t.device_bytes(kSlot) == 0);
  CHECK(t.cuda_blocks() == blocks_before);
  t.count_cuda_device(kSlot, -1);
  t.on_cuda_alloc(kDevice, 0x50000, 64);  // no longer counted
  CHECK(t.device_bytes(kSlot) == 0);
}
