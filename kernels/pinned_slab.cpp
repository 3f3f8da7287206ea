// The pinned host slab: exact layout arithmetic and one allocation (cudaHostAlloc or aligned host
// memory), regions handed out as pointers into it.
// defines: SlabLayout, PinnedSlab
#include "kernels/pinned_slab.h"

#include <cstdlib>
#include <utility>

namespace odyssey::kernels {

SlabLayout::SlabLayout(size_t alignment) : alignment_(alignment) {
  require(alignment > 0 && (alignment & (alignment - 1)) == 0,
          "SlabLayout: alignment = " + std::to_string(alignment) + " must be a power of two");
}

size_t SlabLayout::add(size_t bytes) {
  require(bytes > 0, "SlabLayout::add: region " + std::to_string(offsets_.size()) + " has bytes = 0; must be > 0");
  const size_t start = (end_ + alignment_ - 1) / alignment_ * alignment_;
  require(start + bytes > start, "SlabLayout::add: region of " + std::to_string(bytes) + " bytes overflows size_t");
  offsets_.push_back(start);
  sizes_.push_back(bytes);
  end_ = start + bytes;
  return offsets_.size() - 1;
}

size_t SlabLayout::offset(size_t region) const {
  require(region < offsets_.size(), "SlabLayout::offset: region " + std::to_string(region) + " of " +
                                        std::to_string(offsets_.size()) + " regions");
  return offsets_[region];
}

size_t SlabLayout::bytes(size_t region) const {
  require(region < sizes_.size(),
          "SlabLayout::bytes: region " + std::to_string(region) + " of " + std::to_string(sizes_.size()) + " regions");
  return sizes_[region];
}

PinnedSlab::PinnedSlab(SlabLayout layout, SlabMemory memory) : layout_(std::move(layout)), memory_(memory) {
  const size_t bytes = layout_.total_bytes();
  require(bytes > 0, "PinnedSlab: the layout has no regions; add at least one before allocating");
  if (memory_ == SlabMemory::Pinned) {
    const cudaError_t status = cudaHostAlloc(&base_, bytes, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      base_ = nullptr;
      throw KernelError("PinnedSlab: cudaHostAlloc of " + std::to_string(bytes) + " bytes (" +
                        std::to_string(layout_.region_count()) + " regions) failed: " + cudaGetErrorName(status) +
                        " (" + cudaGetErrorString(status) + ")");
    }
  } else {
    const size_t align =
        layout_.alignment() < alignof(std::max_align_t) ? alignof(std::max_align_t) : layout_.alignment();
    base_ = std::aligned_alloc(align, (bytes + align - 1) / align * align);
    require(base_ != nullptr, "PinnedSlab: aligned_alloc of " + std::to_string(bytes) + " pageable bytes failed");
  }
}

PinnedSlab::~PinnedSlab() { release(); }

PinnedSlab::PinnedSlab(PinnedSlab&& other) noexcept
    : layout_(std::move(other.layout_)), memory_(other.memory_), base_(std::exchange(other.base_, nullptr)) {}

PinnedSlab& PinnedSlab::operator=(PinnedSlab&& other) noexcept {
  if (this != &other) {
    release();
    layout_ = std::move(other.layout_);
    memory_ = other.memory_;
    base_ = std::exchange(other.base_, nullptr);
  }
  return *this;
}

void PinnedSlab::release() noexcept {
  if (!base_) return;
  if (memory_ == SlabMemory::Pinned) {
    cudaFreeHost(base_);  // a failure here cannot be reported from a destructor; the process keeps running
  } else {
    std::free(base_);
  }
  base_ = nullptr;
}

void* PinnedSlab::region(size_t index) const {
  require(base_ != nullptr, "PinnedSlab::region: the slab was moved from");
  return static_cast<char*>(base_) + layout_.offset(index);
}

}  // namespace odyssey::kernels
