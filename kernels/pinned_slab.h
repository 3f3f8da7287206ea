// One pinned host slab allocated once at start-up and carved into per-block regions, for the CPU
// offload of checkpointed block inputs. Memory reason: LibTorch's CachingHostAllocator rounds every
// pinned allocation up to a power of two (a 1.2 GiB block input takes 2 GiB); one exact slab does not.
// defines: SlabLayout, SlabMemory, PinnedSlab, kSlabAlignment
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/kernel_common.h"

namespace odyssey::kernels {

/// Region alignment inside the slab (bytes): the DMA engines' preferred granularity.
constexpr size_t kSlabAlignment = 256;

/// Where regions lie in the slab: each region starts at the previous end rounded up to the
/// alignment, and is exactly as large as asked (no power-of-two rounding). Pure arithmetic.
///   SlabLayout layout; for (int i = 0; i < n_layers - 1; ++i) layout.add(block_input_bytes);
class SlabLayout {
 public:
  /// alignment: a power of two, at least 1. Default kSlabAlignment.
  explicit SlabLayout(size_t alignment = kSlabAlignment);

  /// Appends a region of `bytes` (> 0) and returns its index.
  size_t add(size_t bytes);

  size_t region_count() const { return offsets_.size(); }
  size_t offset(size_t region) const;
  size_t bytes(size_t region) const;
  /// Bytes the slab must hold: the end of the last region (sum of the sizes plus alignment gaps).
  size_t total_bytes() const { return end_; }
  size_t alignment() const { return alignment_; }

 private:
  size_t alignment_;
  size_t end_ = 0;
  std::vector<size_t> offsets_;
  std::vector<size_t> sizes_;
};

/// Pinned: one cudaHostAlloc(portable) call, usable by DMA from any device of the process.
/// Pageable: ordinary aligned host memory (CPU-only builds and tests; copies are then synchronous).
enum class SlabMemory { Pinned, Pageable };

/// Owns the slab memory; regions are views into it. Move-only.
///   PinnedSlab slab(layout);            // once, at start-up
///   void* host = slab.region(block);    // block's offload destination
class PinnedSlab {
 public:
  explicit PinnedSlab(SlabLayout layout, SlabMemory memory = SlabMemory::Pinned);
  ~PinnedSlab();
  PinnedSlab(PinnedSlab&& other) noexcept;
  PinnedSlab& operator=(PinnedSlab&& other) noexcept;
  PinnedSlab(const PinnedSlab&) = delete;
  PinnedSlab& operator=(const PinnedSlab&) = delete;

  void* region(size_t index) const;
  size_t region_bytes(size_t index) const { return layout_.bytes(index); }
  size_t region_count() const { return layout_.region_count(); }
  size_t total_bytes() const { return layout_.total_bytes(); }
  bool pinned() const { return memory_ == SlabMemory::Pinned; }
  const SlabLayout& layout() const { return layout_; }
  void* data() const { return base_; }

 private:
  void release() noexcept;
  SlabLayout layout_;
  SlabMemory memory_;
  void* base_ = nullptr;
};

}  // namespace odyssey::kernels
