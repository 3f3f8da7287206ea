// Internal state of the memory tracker, shared by memory_tracker.cpp and the counting allocator:
// the block header every counted allocation carries and the per-rank counters. Not for engine
// code outside engine/telemetry. defines: BlockHeader, RankState, MemoryTracker::Impl
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

/// Sits in the 64 bytes before every block the counting allocator hands out, so the deleter
/// (a plain function pointer that only sees the data pointer) knows what the block was charged:
/// the free uncharges exactly that, whatever thread runs it. The block also links into its
/// rank's live list (oldest first) for retag_since.
struct alignas(64) BlockHeader {
  uint64_t magic = 0;
  uint64_t seq = 0;   ///< allocation sequence number (MemoryTracker::mark)
  int64_t bytes = 0;  ///< bytes requested and charged (the header itself is not charged)
  BlockHeader* prev = nullptr;
  BlockHeader* next = nullptr;
  int16_t rank = 0;
  MemPool pool = MemPool::Device;
  MemCategory category = MemCategory::Other;  ///< changes under the rank mutex (retag)
};
static_assert(sizeof(BlockHeader) == 64, "the header must keep the 64-byte data alignment");
constexpr uint64_t kBlockMagic = 0x4f445953534559ull;  // "ODYSSEY"

/// Counters of one rank. Every field is written under `mutex`; pool bytes are also atomics so
/// device_bytes()/host_bytes() read them without the lock.
struct alignas(64) RankState {
  mutable std::mutex mutex;
  std::array<int64_t, kMemCategoryCount> category_bytes{};
  std::array<std::atomic<int64_t>, kMemPoolCount> pool_bytes{};
  PeakWindow base;  ///< since the last reset_peak
  std::array<PeakWindow, kMaxPeakWindows> windows{};
  int window_count = 0;
  BlockHeader live;  ///< sentinel of the live list: live.next oldest, live.prev newest
  int64_t live_blocks = 0;
  std::atomic<int64_t> device_limit{0};
  int64_t ooms = 0;
  std::string phase_name;
  std::atomic<int> cuda_device{-1};
  /// The device side is counted by the CUDA trace hook (pool bytes as on the CPU), not the CPU allocator.
  std::atomic<bool> cuda_counted{false};

  RankState() { live.prev = live.next = &live; }

  /// Adds `delta` to pool and category (under mutex) and advances every peak it passes.
  void charge(MemPool pool, MemCategory category, int64_t delta);
};

struct MemoryTracker::Impl {
  Impl() {
    for (auto& slot : device_slot) slot.store(-1);
  }
  std::array<RankState, kMaxTrackedRanks> ranks;
  std::atomic<uint64_t> next_seq{1};
  std::atomic<uint64_t> allocations{0};
  std::atomic<bool> installed{false};
  std::mutex install_mutex;
  /// CUDA blocks counted by the trace hook: (device, address) -> their shadow header.
  std::mutex cuda_mutex;
  std::map<std::pair<int, uintptr_t>, BlockHeader*> cuda_blocks;
  std::atomic<bool> cuda_hook_attached{false};
  /// Which rank slot is counted for each CUDA device (-1: none).
  std::array<std::atomic<int>, kMaxTrackedRanks> device_slot{};

  RankState& rank(int r);
  const RankState& rank(int r) const;

  /// Charges a freshly allocated block (fills seq, links it) or throws c10::OutOfMemoryError
  /// when it would cross the rank's device limit (the caller then frees the raw memory);
  /// enforce_limit = false never throws (CUDA blocks, counted under the allocator's lock).
  void admit(BlockHeader* block, bool enforce_limit = true);
  /// Uncharges and unlinks a block on free.
  void release(BlockHeader* block);
  /// Moves one live block into another category.
  void retag(BlockHeader* block, MemCategory to);
  /// Builds the OOM message and throws (rank mutex must NOT be held).
  [[noreturn]] void throw_oom(int rank, int64_t requested);
};

}  // namespace odyssey
