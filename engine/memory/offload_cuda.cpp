// The CUDA offload transport: one pinned slab (kernels::PinnedSlab) holds every offloaded block
// input, kernels::OffloadEngine moves them on its copy streams. defines: make_cuda_transport
#include "engine/memory/offload.h"

#include <stdexcept>
#include <string>

#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"

#if defined(ODYSSEY_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/offload_streams.h"
#include "kernels/pinned_slab.h"
#endif

namespace odyssey {

#if defined(ODYSSEY_WITH_CUDA)
namespace {

/// Memory: one exact pinned slab of the offloaded blocks' inputs (offloaded_blocks: blocks
/// 1..n_layers-2, region = block - first; block 0's input is recomputed), allocated at setup (the Trainer) or the first step and
/// kept (LibTorch's pinned host allocator would round each 1.2 GiB input up to 2 GiB, and pageable
/// memory would make every copy synchronous). It is charged to the tracker's host pool, category
/// offloaded, for as long as it exists: the host memory a node must have.
/// Each copy is also a span of the trace: events on its copy stream right around the copy (the
/// engine's CopyObserver), on the clock of the rank's phases (PhaseRecorder::mark_stream).
class CudaTransport final : public OffloadTransport, private kernels::CopyObserver {
 public:
  CudaTransport(at::Device device, OffloadedKind kind) : device_(device), kind_(kind) {}
  ~CudaTransport() override { drop_slab(); }

  void start_step(const OffloadedBlocks& blocks, int64_t input_bytes) override {
    if (slab_ && blocks.count == blocks_.count && blocks.first == blocks_.first && input_bytes == input_bytes_) return;
    drop_slab();
    blocks_ = blocks;
    if (blocks.count < 1) return;  // nothing is offloaded (two blocks or fewer)
    c10::cuda::CUDAGuard guard(device_);
    kernels::SlabLayout layout;
    for (int64_t i = 0; i < blocks.count; ++i) layout.add(static_cast<size_t>(input_bytes));
    try {
      slab_ = std::make_unique<kernels::PinnedSlab>(std::move(layout));
    } catch (const kernels::KernelError& e) {
      const OffloadedKindNames& names = offloaded_kind_names(kind_);
      throw std::runtime_error("offload: cannot pin host memory for " + std::to_string(blocks.count) + " " +
                               names.what + " of " + std::to_string(input_bytes) + " bytes (" + e.what() + "); turn " +
                               names.key + " off or give the node more host memory");
    }
    // the engine's blocks are the slab's regions: region r holds block first + r; its last
    // "block" (count) is the one that stays on the device
    engine_ = std::make_unique<kernels::OffloadEngine>(*slab_, blocks.count + 1);
    engine_->set_copy_observer(this);
    input_bytes_ = input_bytes;
    rank_ = current_rank();
    charged_ = static_cast<int64_t>(slab_->total_bytes());
    MemoryTracker::instance().on_alloc(rank_, MemPool::Host, MemCategory::Offloaded, charged_);
  }

  void offload(int64_t layer, const at::Tensor& x) override {
    require_engine("offload");
    const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    engine_->offload(region(layer), x.data_ptr(), x.nbytes(), compute);
  }
  void fence_copy(int64_t layer) override {
    require_engine("fence_copy");
    // x is freed next on the compute stream: its memory goes to the next allocation in stream
    // order, which now runs after the D2H read it (no recordStream, whose hold lasts until the
    // host sees the copy done: blocks later when the host runs ahead).
    engine_->fence_source(region(layer), compute_stream());
  }
  void prefetch(int64_t layer, const at::Tensor& slot) override {
    require_engine("prefetch");
    engine_->prefetch(region(layer), slot.data_ptr(), slot.nbytes(), compute_stream());
  }
  void acquire(int64_t layer) override {
    require_engine("acquire");
    engine_->acquire(region(layer), compute_stream());
  }
  void release(int64_t layer) override {
    require_engine("release");
    engine_->release(region(layer));
  }
  void end_step() override {
    if (!engine_) return;
    engine_->synchronize();
    engine_->reset_step();
  }
  int64_t host_bytes() const override { return charged_; }

 private:
  void before_copy(cudaStream_t stream, int64_t, bool, size_t) override {
    PhaseRecorder* recorder = PhaseRecorder::current();
    copy_begin_ = recorder != nullptr ? recorder->mark_stream(stream) : -1;
  }
  void after_copy(cudaStream_t stream, int64_t block, bool to_host, size_t bytes) override {
    PhaseRecorder* recorder = PhaseRecorder::current();
    if (recorder == nullptr || copy_begin_ < 0) return;
    recorder->add_device_span(offload_copy_span(kind_, block + blocks_.first, to_host, static_cast<int64_t>(bytes)),
                              copy_begin_, recorder->mark_stream(stream));
  }
  cudaStream_t compute_stream() const { return c10::cuda::getCurrentCUDAStream(device_.index()).stream(); }
  void require_engine(const char* op) const {
    if (!engine_) throw std::logic_error(std::string("offload: ") + op + " before start_step sized the pinned slab");
  }
  /// The slab region (the engine's block index) of `layer`; throws for a block that is not offloaded.
  int64_t region(int64_t layer) const {
    if (!blocks_.holds(layer))
      throw std::logic_error("offload: block " + std::to_string(layer) + " is not offloaded (blocks " +
                             std::to_string(blocks_.first) + ".." + std::to_string(blocks_.first + blocks_.count - 1) +
                             " are)");
    return layer - blocks_.first;
  }
  void drop_slab() noexcept {
    if (engine_) {
      try {
        engine_->synchronize();
      } catch (...) {  // the engine's destructor waits for its streams again
      }
    }
    engine_.reset();
    slab_.reset();
    if (charged_ > 0) MemoryTracker::instance().on_alloc(rank_, MemPool::Host, MemCategory::Offloaded, -charged_);
    charged_ = 0;
  }
  at::Device device_;
  OffloadedKind kind_;
  std::unique_ptr<kernels::PinnedSlab> slab_;
  std::unique_ptr<kernels::OffloadEngine> engine_;
  OffloadedBlocks blocks_;
  int64_t input_bytes_ = 0, charged_ = 0;
  int rank_ = 0;
  int copy_begin_ = -1;  ///< the running copy's first mark (before_copy to after_copy)
};

}  // namespace

std::unique_ptr<OffloadTransport> make_cuda_transport(at::Device device, OffloadedKind kind) {
  return std::make_unique<CudaTransport>(device, kind);
}

#else

std::unique_ptr<OffloadTransport> make_cuda_transport(at::Device device, OffloadedKind) {
  throw std::runtime_error("offload: " + device.str() +
                           " needs the CUDA kernels (pinned slab, copy streams), which this build does not link");
}

#endif

}  // namespace odyssey
