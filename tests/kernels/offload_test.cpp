// Pinned slab and offload streams: the slab's carving arithmetic (no power-of-two rounding), a
// pageable slab's regions, and the two-slot rotation's state machine over a whole backward
// (everywhere); pinned allocation and the D2H/H2D round trip with its ordering rules ([.cuda]).
#include <catch2/catch.hpp>

#include <cstring>

#include "kernels/offload_streams.h"
#include "kernel_test_support.h"

using namespace odyssey::kernels;
using namespace odyssey::kernels::test;

TEST_CASE("slab layout carves exact aligned regions without power-of-two rounding", "[kernels][offload]") {
  // Llama-3.2-1B at 128K tokens in bf16: 15 block inputs of 131072 * 2048 * 2 bytes = 512 MiB each,
  // and an odd size that a power-of-two allocator would round from 1.2 GB up to 2 GiB.
  SlabLayout layout;
  for (int i = 0; i < 15; ++i) CHECK(layout.add(size_t{131072} * 2048 * 2) == static_cast<size_t>(i));
  CHECK(layout.total_bytes() == size_t{15} * 512 * 1024 * 1024);
  const size_t odd = 1'200'000'001;
  const size_t index = layout.add(odd);
  CHECK(layout.offset(index) == size_t{15} * 512 * 1024 * 1024);
  CHECK(layout.total_bytes() == layout.offset(index) + odd);
  CHECK(layout.total_bytes() < size_t{15} * 512 * 1024 * 1024 + (size_t{1} << 31));
  // A region after an odd size starts at the next multiple of the alignment.
  const size_t next = layout.add(10);
  CHECK(layout.offset(next) % kSlabAlignment == 0);
  CHECK(layout.offset(next) - (layout.offset(index) + odd) < kSlabAlignment);
  CHECK_THROWS_WITH(layout.add(0), Catch::Contains("bytes = 0"));
  CHECK_THROWS_WITH(layout.offset(99), Catch::Contains("region 99"));
  CHECK_THROWS_WITH(SlabLayout(48), Catch::Contains("alignment = 48"));
}

TEST_CASE("pageable slab hands out disjoint writable aligned regions", "[kernels][offload]") {
  SlabLayout layout(64);
  const size_t sizes[] = {100, 1, 4096, 333};
  for (size_t s : sizes) layout.add(s);
  PinnedSlab slab(layout, SlabMemory::Pageable);
  CHECK_FALSE(slab.pinned());
  CHECK(slab.region_count() == 4);
  for (size_t r = 0; r < 4; ++r) {
    CHECK(reinterpret_cast<uintptr_t>(slab.region(r)) % 64 == 0);
    std::memset(slab.region(r), static_cast<int>(r + 1), sizes[r]);
  }
  for (size_t r = 0; r < 4; ++r) {
    const auto* bytes = static_cast<const unsigned char*>(slab.region(r));
    for (size_t i = 0; i < sizes[r]; ++i) REQUIRE(bytes[i] == r + 1);  // no region overlaps another
  }
  PinnedSlab moved = std::move(slab);
  CHECK(moved.region(3) != nullptr);
  CHECK_THROWS_WITH(slab.region(0), Catch::Contains("moved from"));
  CHECK_THROWS_WITH(PinnedSlab(SlabLayout(), SlabMemory::Pageable), Catch::Contains("no regions"));
}

TEST_CASE("slot rotation serves a whole backward with two slots", "[kernels][offload]") {
  // Blocks 0..L-2 offloaded; backward walks L-1 down to 0 prefetching the next block down.
  const int64_t n_blocks = 7;
  SlotRotation rot;
  int max_busy = 0;
  for (int64_t i = n_blocks - 1; i >= 0; --i) {
    if (i - 1 >= 0) rot.begin_fill(i - 1);  // prefetch the previous block while i computes
    if (i < n_blocks - 1) CHECK(rot.acquire(i) == SlotRotation::slot_for(i));
    int busy = 0;
    for (int s = 0; s < SlotRotation::kSlots; ++s) busy += rot.state(s) != SlotRotation::State::Free;
    max_busy = std::max(max_busy, busy);
    if (i < n_blocks - 1) rot.release(i);
  }
  CHECK(max_busy == 2);
  CHECK(rot.state(0) == SlotRotation::State::Free);
  CHECK(rot.state(1) == SlotRotation::State::Free);
  CHECK(rot.occupant(0) == -1);
}

TEST_CASE("slot rotation refuses reuse before release and names the blocks", "[kernels][offload]") {
  SlotRotation rot;
  rot.begin_fill(5);
  CHECK(rot.holds(5));
  CHECK_THROWS_WITH(rot.begin_fill(3), Catch::Contains("block 3 needs slot 1") && Catch::Contains("filling (block 5)"));
  CHECK_THROWS_WITH(rot.acquire(4), Catch::Contains("block 4 needs slot 0, which is free"));
  CHECK_THROWS_WITH(rot.release(5), Catch::Contains("only the block in use"));
  rot.acquire(5);
  CHECK_THROWS_WITH(rot.begin_fill(1), Catch::Contains("in use (block 5)"));
  rot.release(5);
  CHECK_THROWS_WITH(rot.release(5), Catch::Contains("which is free"));
  CHECK_NOTHROW(rot.begin_fill(3));
}

TEST_CASE("pinned slab is page-locked host memory", "[kernels][offload][.cuda]") {
  SlabLayout layout;
  layout.add(3 << 20);
  layout.add(5 << 20);
  PinnedSlab slab(layout);
  CHECK(slab.pinned());
  cudaPointerAttributes attributes{};
  ODYSSEY_CUDA_CHECK(cudaPointerGetAttributes(&attributes, slab.region(1)));
  CHECK(attributes.type == cudaMemoryTypeHost);
}

TEST_CASE("offload engine round-trips block inputs through the slab and two slots", "[kernels][offload][.cuda]") {
  // 6 blocks of 8 MiB: forward offloads 0..4 and overwrites each source right after its fence (as
  // the caching allocator would reuse it); backward prefetches into two slots. Two steps, so the
  // second step's offloads must wait for the first step's prefetches of the same regions.
  const int64_t n_blocks = 6;
  const size_t bytes = 8u << 20;
  SlabLayout layout;
  for (int64_t i = 0; i + 1 < n_blocks; ++i) layout.add(bytes);
  PinnedSlab slab(layout);
  DeviceBuffer slot0(bytes), slot1(bytes), source(bytes);
  cudaStream_t compute = nullptr;
  ODYSSEY_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  OffloadEngine engine(slab, n_blocks);
  CHECK_FALSE(engine.offloaded(n_blocks - 1));
  CHECK_THROWS_WITH(engine.offload(n_blocks - 1, source.get(), bytes, compute), Catch::Contains("stays on the device"));
  std::vector<unsigned char> host(bytes), back(bytes);
  for (int step = 0; step < 2; ++step) {
    for (int64_t i = 0; i + 1 < n_blocks; ++i) {
      for (size_t k = 0; k < bytes; ++k) host[k] = static_cast<unsigned char>(k * 7 + i * 13 + step);
      ODYSSEY_CUDA_CHECK(cudaMemcpyAsync(source.get(), host.data(), bytes, cudaMemcpyHostToDevice, compute));
      ODYSSEY_CUDA_CHECK(cudaStreamSynchronize(compute));  // host buffer is reused next iteration
      engine.offload(i, source.get(), bytes, compute);
      engine.fence_source(i, compute);
      ODYSSEY_CUDA_CHECK(cudaMemsetAsync(source.get(), 0xEE, bytes, compute));  // the source is reused
    }
    for (int64_t i = n_blocks - 2; i >= 0; --i) {
      if (i == n_blocks - 2) engine.prefetch(i, (i % 2 ? slot1 : slot0).get(), bytes, compute);
      if (i - 1 >= 0) engine.prefetch(i - 1, ((i - 1) % 2 ? slot1 : slot0).get(), bytes, compute);
      void* x = engine.acquire(i, compute);
      CHECK(x == (i % 2 ? slot1 : slot0).get());  // block i always uses slot i % 2
      ODYSSEY_CUDA_CHECK(cudaMemcpyAsync(back.data(), x, bytes, cudaMemcpyDeviceToHost, compute));
      ODYSSEY_CUDA_CHECK(cudaStreamSynchronize(compute));
      engine.release(i);
      size_t mismatches = 0;
      for (size_t k = 0; k < bytes; ++k) mismatches += back[k] != static_cast<unsigned char>(k * 7 + i * 13 + step);
      CHECK(mismatches == 0);
    }
  }
  engine.synchronize();
  ODYSSEY_CUDA_CHECK(cudaStreamDestroy(compute));
}
