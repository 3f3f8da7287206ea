// Offload of checkpointed block inputs: the OffloadEngine's streams, events and copies over the
// pinned slab (the slot rotation it follows is kernels/slot_rotation.h).
// defines: OffloadEngine methods
#include "kernels/offload_streams.h"

#include <algorithm>
#include <utility>

namespace odyssey::kernels {

// --- OffloadEngine -------------------------------------------------------------------------------

OffloadEngine::OffloadEngine(const PinnedSlab& slab, int64_t n_blocks) : slab_(slab), n_blocks_(n_blocks) {
  require(n_blocks >= 1, "OffloadEngine: n_blocks = " + std::to_string(n_blocks) + " must be >= 1");
  require(slab.region_count() >= static_cast<size_t>(n_blocks - 1),
          "OffloadEngine: the slab has " + std::to_string(slab.region_count()) + " regions; " +
              std::to_string(n_blocks - 1) + " offloaded blocks need one each");
  const size_t n = static_cast<size_t>(n_blocks);
  offload_done_.assign(n, nullptr);
  prefetch_done_.assign(n, nullptr);
  bytes_.assign(n, 0);
  offload_recorded_.assign(n, 0);
  prefetch_recorded_.assign(n, 0);
  try {
    ODYSSEY_CUDA_CHECK(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
    ODYSSEY_CUDA_CHECK(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
    ODYSSEY_CUDA_CHECK(cudaEventCreateWithFlags(&source_ready_, cudaEventDisableTiming));
    ODYSSEY_CUDA_CHECK(cudaEventCreateWithFlags(&slot_ready_, cudaEventDisableTiming));
    for (size_t i = 0; i < n; ++i) {
      ODYSSEY_CUDA_CHECK(cudaEventCreateWithFlags(&offload_done_[i], cudaEventDisableTiming));
      ODYSSEY_CUDA_CHECK(cudaEventCreateWithFlags(&prefetch_done_[i], cudaEventDisableTiming));
    }
  } catch (...) {
    destroy_handles();  // the destructor does not run for a constructor that throws
    throw;
  }
}

OffloadEngine::~OffloadEngine() { destroy_handles(); }

void OffloadEngine::destroy_handles() noexcept {
  // Copies in flight still read the slab and write the slots: wait before destroying (errors ignored).
  if (d2h_) cudaStreamSynchronize(d2h_);
  if (h2d_) cudaStreamSynchronize(h2d_);
  for (cudaEvent_t& e : offload_done_)
    if (e) cudaEventDestroy(std::exchange(e, nullptr));
  for (cudaEvent_t& e : prefetch_done_)
    if (e) cudaEventDestroy(std::exchange(e, nullptr));
  if (source_ready_) cudaEventDestroy(std::exchange(source_ready_, nullptr));
  if (slot_ready_) cudaEventDestroy(std::exchange(slot_ready_, nullptr));
  if (d2h_) cudaStreamDestroy(std::exchange(d2h_, nullptr));
  if (h2d_) cudaStreamDestroy(std::exchange(h2d_, nullptr));
}

void OffloadEngine::check_block(int64_t block, const char* op) const {
  require(offloaded(block), std::string("OffloadEngine::") + op + ": block " + std::to_string(block) +
                                " is not offloaded (blocks 0.." + std::to_string(n_blocks_ - 2) +
                                " are; the last block's input stays on the device)");
}

void OffloadEngine::offload(int64_t block, const void* device_src, size_t bytes, cudaStream_t compute) {
  check_block(block, "offload");
  const size_t i = static_cast<size_t>(block);
  require(device_src && bytes > 0 && bytes <= slab_.region_bytes(i),
          "OffloadEngine::offload: block " + std::to_string(block) + " copies " + std::to_string(bytes) +
              " bytes from " + (device_src ? "a device pointer" : "nullptr") + "; its slab region holds " +
              std::to_string(slab_.region_bytes(i)));
  require(!rotation_.holds(block), "OffloadEngine::offload: block " + std::to_string(block) +
                                       " is still in a device slot from backward; release it first");
  // The source is complete once the work queued so far on compute is done.
  ODYSSEY_CUDA_CHECK(cudaEventRecord(source_ready_, compute));
  ODYSSEY_CUDA_CHECK(cudaStreamWaitEvent(d2h_, source_ready_, 0));
  // The previous step's H2D must have read this region before it is overwritten.
  if (prefetch_recorded_[i]) ODYSSEY_CUDA_CHECK(cudaStreamWaitEvent(d2h_, prefetch_done_[i], 0));
  if (observer_) observer_->before_copy(d2h_, block, /*to_host=*/true, bytes);
  ODYSSEY_CUDA_CHECK(cudaMemcpyAsync(slab_.region(i), device_src, bytes, cudaMemcpyDeviceToHost, d2h_));
  if (observer_) observer_->after_copy(d2h_, block, /*to_host=*/true, bytes);
  ODYSSEY_CUDA_CHECK(cudaEventRecord(offload_done_[i], d2h_));
  offload_recorded_[i] = 1;
  prefetch_recorded_[i] = 0;
  bytes_[i] = bytes;
}

void OffloadEngine::fence_source(int64_t block, cudaStream_t compute) {
  check_block(block, "fence_source");
  const size_t i = static_cast<size_t>(block);
  require(offload_recorded_[i], "OffloadEngine::fence_source: block " + std::to_string(block) + " was never offloaded");
  ODYSSEY_CUDA_CHECK(cudaStreamWaitEvent(compute, offload_done_[i], 0));
}

bool OffloadEngine::offload_complete(int64_t block) const {
  check_block(block, "offload_complete");
  const size_t i = static_cast<size_t>(block);
  if (!offload_recorded_[i]) return false;
  const cudaError_t status = cudaEventQuery(offload_done_[i]);
  if (status == cudaErrorNotReady) return false;
  ODYSSEY_CUDA_CHECK(status);
  return true;
}

void OffloadEngine::prefetch(int64_t block, void* slot_memory, size_t slot_bytes, cudaStream_t compute) {
  check_block(block, "prefetch");
  const size_t i = static_cast<size_t>(block);
  require(offload_recorded_[i], "OffloadEngine::prefetch: block " + std::to_string(block) +
                                    " has no offloaded copy this step (offload it in forward first)");
  require(slot_memory && slot_bytes >= bytes_[i],
          "OffloadEngine::prefetch: block " + std::to_string(block) + " needs " + std::to_string(bytes_[i]) +
              " bytes; its slot " + (slot_memory ? "holds " + std::to_string(slot_bytes) : std::string("is nullptr")));
  const int slot = rotation_.begin_fill(block);
  slot_memory_[slot] = slot_memory;
  // The slot's memory is free in compute order once the work queued so far is done: its previous
  // reader (block + 2's backward) or, for memory fresh from the caching allocator, its last user.
  ODYSSEY_CUDA_CHECK(cudaEventRecord(slot_ready_, compute));
  ODYSSEY_CUDA_CHECK(cudaStreamWaitEvent(h2d_, slot_ready_, 0));
  ODYSSEY_CUDA_CHECK(cudaStreamWaitEvent(h2d_, offload_done_[i], 0));
  if (observer_) observer_->before_copy(h2d_, block, /*to_host=*/false, bytes_[i]);
  ODYSSEY_CUDA_CHECK(cudaMemcpyAsync(slot_memory, slab_.region(i), bytes_[i], cudaMemcpyHostToDevice, h2d_));
  if (observer_) observer_->after_copy(h2d_, block, /*to_host=*/false, bytes_[i]);
  ODYSSEY_CUDA_CHECK(cudaEventRecord(prefetch_done_[i], h2d_));
  prefetch_recorded_[i] = 1;
}

void* OffloadEngine::acquire(int64_t block, cudaStream_t compute) {
  check_block(block, "acquire");
  const int slot = rotation_.acquire(block);  // throws unless `block` was prefetched
  ODYSSEY_CUDA_CHECK(cudaStreamWaitEvent(compute, prefetch_done_[static_cast<size_t>(block)], 0));
  return slot_memory_[slot];
}

void OffloadEngine::release(int64_t block) {
  check_block(block, "release");
  const int slot = rotation_.release(block);
  slot_memory_[slot] = nullptr;
  offload_recorded_[static_cast<size_t>(block)] = 0;  // consumed: the next prefetch needs a new offload
}

void OffloadEngine::synchronize() {
  ODYSSEY_CUDA_CHECK(cudaStreamSynchronize(d2h_));
  ODYSSEY_CUDA_CHECK(cudaStreamSynchronize(h2d_));
}

void OffloadEngine::reset_step() {
  rotation_.reset();
  for (void*& m : slot_memory_) m = nullptr;
  std::fill(offload_recorded_.begin(), offload_recorded_.end(), 0);
}

}  // namespace odyssey::kernels
