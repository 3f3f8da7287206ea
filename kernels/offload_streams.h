// Stream/event machinery of the CPU offload of checkpointed block inputs: device->host copies on a
// side stream after an event, host->device prefetch into two reused device slots during backward,
// and the ordering rules that keep every source alive until its copy completes.
// defines: OffloadEngine
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/pinned_slab.h"
#include "kernels/slot_rotation.h"

namespace odyssey::kernels {

/// Offload of checkpointed block inputs through one pinned slab. Blocks 0..n_blocks-2 are offloaded
/// (slab region i holds block i); the last block's input stays on the device (its backward runs
/// first). Streams and events are created on the current device at construction. The two device
/// slots are the caller's memory, named at each prefetch (allocate them through LibTorch's caching
/// allocator on the compute stream, so the memory tracker counts them and they exist only while
/// backward needs them).
///
/// Forward, block i (compute = the stream the block runs on):
///   offload(i, x_i, bytes, compute)   D2H on the d2h stream after an event on compute
///   ... block i's forward runs ...     the copy overlaps it
///   then either fence_source(i, compute) (compute waits for the copy) or hand x_i's memory to the
///   caching allocator as used by d2h_stream() (recordStream): only then may x_i be freed
/// Backward, block i (from n_blocks-1 down):
///   prefetch(i - 1, slot, bytes, compute)  H2D of block i-1 into `slot` on the h2d stream, after
///                                      the work queued on compute so far (the slot's previous
///                                      reader, or whoever had its memory) and after i-1's D2H
///   x = acquire(i, compute)            compute waits for block i's H2D; x is its slot's memory
///   ... recompute + backward of block i read x ...
///   release(i)                         the slot rotation frees the slot; its next prefetch is
///                                      queued later on compute, so ordered after these reads
/// The next step's offload(i) waits for this step's H2D of region i before overwriting it.
/// Told around each copy, in the copy stream's order: before_copy right after the copy's waits
/// (so an event it records there marks the copy's real start, not the wait), after_copy right after
/// the copy. The trace's copy spans come from here (engine/memory/offload_cuda.cpp); nullptr: none.
class CopyObserver {
 public:
  virtual ~CopyObserver() = default;
  virtual void before_copy(cudaStream_t stream, int64_t block, bool to_host, size_t bytes) = 0;
  virtual void after_copy(cudaStream_t stream, int64_t block, bool to_host, size_t bytes) = 0;
};

class OffloadEngine {
 public:
  /// slab: one region per offloaded block, at least n_blocks - 1 regions.
  OffloadEngine(const PinnedSlab& slab, int64_t n_blocks);
  ~OffloadEngine();
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  /// Whether `block`'s input goes to the host (all but the last block).
  bool offloaded(int64_t block) const { return block >= 0 && block < n_blocks_ - 1; }
  int64_t n_blocks() const { return n_blocks_; }

  void offload(int64_t block, const void* device_src, size_t bytes, cudaStream_t compute);
  void fence_source(int64_t block, cudaStream_t compute);
  /// Host-side poll: the D2H copy of `block` has completed (false when no offload of it is pending
  /// consumption, i.e. before offload or after release).
  bool offload_complete(int64_t block) const;

  /// Starts the H2D of `block` into `slot_memory` (slot_bytes >= the block's bytes).
  void prefetch(int64_t block, void* slot_memory, size_t slot_bytes, cudaStream_t compute);
  /// The slot memory of a prefetched `block`, once compute has been made to wait for its copy.
  void* acquire(int64_t block, cudaStream_t compute);
  void release(int64_t block);

  /// Waits for both copy streams (end of step, shutdown, a failed step).
  void synchronize();
  /// After synchronize(): forgets this step's slots and copies (a step that failed half-way).
  void reset_step();

  cudaStream_t d2h_stream() const { return d2h_; }
  cudaStream_t h2d_stream() const { return h2d_; }
  /// Who is told around each copy (not owned; nullptr: nobody).
  void set_copy_observer(CopyObserver* observer) { observer_ = observer; }
  const SlotRotation& slots() const { return rotation_; }

 private:
  void check_block(int64_t block, const char* op) const;
  void destroy_handles() noexcept;
  const PinnedSlab& slab_;
  int64_t n_blocks_;
  void* slot_memory_[SlotRotation::kSlots] = {nullptr, nullptr};
  SlotRotation rotation_;
  cudaStream_t d2h_ = nullptr;
  cudaStream_t h2d_ = nullptr;
  cudaEvent_t source_ready_ = nullptr;      // recorded on compute just before each D2H
  cudaEvent_t slot_ready_ = nullptr;        // recorded on compute just before each H2D
  std::vector<cudaEvent_t> offload_done_;   // per block, on d2h
  std::vector<cudaEvent_t> prefetch_done_;  // per block, on h2d
  std::vector<size_t> bytes_;               // per block, from offload
  std::vector<char> offload_recorded_, prefetch_recorded_;
  CopyObserver* observer_ = nullptr;
};

}  // namespace odyssey::kernels
