// CudaTimeline: the DeviceTimeline of a GPU rank, CUDA events with timing (reused from step to
// step) on the current stream, and NVTX ranges (nvtx3, header-only). defines: make_cuda_timeline
#include "engine/telemetry/device_timeline.h"

#include "engine/telemetry/cuda_runtime.h"

#include <stdexcept>
#include <vector>

#if defined(ODYSSEY_WITH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nvtx3/nvToolsExt.h>
#endif

namespace odyssey {

#if defined(ODYSSEY_WITH_CUDA)
namespace {

class CudaTimeline final : public DeviceTimeline {
 public:
  explicit CudaTimeline(int device) : device_(static_cast<c10::DeviceIndex>(device)) {}

  int mark() override { return record(c10::cuda::getCurrentCUDAStream(device_)); }
  int mark_on(void* native_stream) override {
    return record(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(native_stream), device_));
  }
  void settle() override {  // marks lie on several streams (compute, copies): wait for each
    for (size_t i = 0; i < used_; ++i) events_[i]->synchronize();
  }
  double since_first(int index) override {
    if (index <= 0 || static_cast<size_t>(index) >= used_) return 0.0;
    return static_cast<double>(events_[0]->elapsed_time(*events_[static_cast<size_t>(index)])) * 1e-3;  // ms -> s
  }
  void restart() override { used_ = 0; }
  // NVTX for Nsight; START/END annotations for the memory history when it records.
  void range_push(const std::string& name) override {
    nvtxRangePushA(name.c_str());
    annotate_memory_history(name, /*start=*/true);
    open_.push_back(name);
  }
  void range_pop() override {
    nvtxRangePop();
    if (open_.empty()) return;
    annotate_memory_history(open_.back(), /*start=*/false);
    open_.pop_back();
  }

 private:
  int record(const c10::cuda::CUDAStream& stream) {
    if (used_ == events_.size()) events_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    events_[used_]->record(stream);
    return static_cast<int>(used_++);
  }

  c10::DeviceIndex device_;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events_;  // reused: creating events per edge costs
  size_t used_ = 0;
  std::vector<std::string> open_;  // names of the open ranges
};

}  // namespace

std::unique_ptr<DeviceTimeline> make_cuda_timeline(int device) { return std::make_unique<CudaTimeline>(device); }
#else
std::unique_ptr<DeviceTimeline> make_cuda_timeline(int device) {
  throw std::runtime_error("make_cuda_timeline: cuda:" + std::to_string(device) + " in a build without CUDA");
}
#endif

}  // namespace odyssey
