// Stream/event machinery of the CPU offload of checkpointed block inputs: device->host copies on a
// side stream after an event, host->device prefetch into two reused device slots during backward,
// and the ordering rules that keep every source alive until its copy completes.
// defines: SlotRotation, OffloadEngine
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/pinned_slab.h"

namespace odyssey::kernels {

/// Bookkeeping of the two device slots that hold restored block inputs during backward. Block i
/// always uses slot i % 2: backward walks blocks downwards, so while block i computes from its slot,
/// block i-1 is prefetched into the other one, whose previous occupant (block i+1) was released.
/// Pure logic (no CUDA): every misuse throws KernelError naming block, slot and occupant.
///   rot.begin_fill(i - 1); rot.acquire(i); ... rot.release(i);
class SlotRotation {
 public:
  enum class State { Free, Filling, InUse };
  static constexpr int kSlots = 2;

  static int slot_for(int64_t block) { return static_cast<int>(block % kSlots); }

  /// A prefetch of `block` starts: its slot must be Free. Returns the slot.
  int begin_fill(int64_t block);
  /// Compute starts reading `block` from its slot: it must be Filling with this block. Returns the slot.
  int acquire(int64_t block);
  /// Compute is done with `block`: its slot must be InUse by it; the slot becomes Free.
  int release(int64_t block);

  State state(int slot) const { return states_[slot]; }
  /// Block held by the slot, -1 when Free.
  int64_t occupant(int slot) const { return occupants_[slot]; }
  /// True when `block` is Filling or InUse in its slot.
  bool holds(int64_t block) const;

 private:
  State states_[kSlots] = {State::Free, State::Free};
  int64_t occupants_[kSlots] = {-1, -1};
};

/// Offload of checkpointed block inputs through one pinned slab. Blocks 0..n_blocks-2 are offloaded
/// (slab region i holds block i); the last block's input stays on the device (its backward runs
/// first). Streams and events are created on the current device at construction.
///
/// Forward, block i (compute = the stream the block runs on):
///   offload(i, x_i, bytes, compute)   D2H on the d2h stream after an event on compute
///   ... block i's forward runs ...     the copy overlaps it
///   fence_source(i, compute)           compute waits for the copy; only now may x_i be freed or
///                                      reused (the caching allocator reuses memory in stream order)
/// Backward, block i (from n_blocks-1 down):
///   prefetch(i - 1, compute)           H2D of block i-1 into its slot on the h2d stream, after the
///                                      slot's previous user released it and after i-1's D2H
///   x = acquire(i, compute)            compute waits for block i's H2D; x is the slot's memory
///   ... recompute + backward of block i read x ...
///   release(i, compute)                records the slot-free event on compute
/// The next step's offload(i) waits for this step's H2D of region i before overwriting it.
class OffloadEngine {
 public:
  /// slot0/slot1: two device buffers of slot_bytes each, owned by the caller (allocate them through
  /// LibTorch's caching allocator so the memory tracker counts them); slab: one region per
  /// offloaded block, at least n_blocks - 1 regions.
  OffloadEngine(const PinnedSlab& slab, int64_t n_blocks, void* slot0, void* slot1, size_t slot_bytes);
  ~OffloadEngine();
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  /// Whether `block`'s input goes to the host (all but the last block).
  bool offloaded(int64_t block) const { return block >= 0 && block < n_blocks_ - 1; }

  void offload(int64_t block, const void* device_src, size_t bytes, cudaStream_t compute);
  void fence_source(int64_t block, cudaStream_t compute);
  /// Host-side poll: the D2H copy of `block` has completed (false when no offload of it is pending
  /// consumption, i.e. before offload or after release).
  bool offload_complete(int64_t block) const;

  void prefetch(int64_t block, cudaStream_t compute);
  /// Prefetches first when no prefetch of `block` was issued.
  void* acquire(int64_t block, cudaStream_t compute);
  void release(int64_t block, cudaStream_t compute);

  /// Waits for both copy streams (end of step, shutdown).
  void synchronize();

  cudaStream_t d2h_stream() const { return d2h_; }
  cudaStream_t h2d_stream() const { return h2d_; }
  const SlotRotation& slots() const { return rotation_; }

 private:
  void check_block(int64_t block, const char* op) const;
  void destroy_handles() noexcept;
  const PinnedSlab& slab_;
  int64_t n_blocks_;
  void* slots_[SlotRotation::kSlots];
  size_t slot_bytes_;
  SlotRotation rotation_;
  cudaStream_t d2h_ = nullptr;
  cudaStream_t h2d_ = nullptr;
  cudaEvent_t source_ready_ = nullptr;         // recorded on compute just before each D2H
  std::vector<cudaEvent_t> offload_done_;      // per block, on d2h
  std::vector<cudaEvent_t> prefetch_done_;     // per block, on h2d
  cudaEvent_t slot_free_[SlotRotation::kSlots] = {nullptr, nullptr};  // on compute, at release
  std::vector<size_t> bytes_;                  // per block, from offload
  std::vector<char> offload_recorded_, prefetch_recorded_;
  bool slot_free_recorded_[SlotRotation::kSlots] = {false, false};
};

}  // namespace odyssey::kernels
