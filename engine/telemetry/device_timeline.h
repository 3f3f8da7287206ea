// Phase edges on the GPU's own clock. A CUDA step is queued asynchronously: a host timestamp at a
// phase edge says when its kernels were launched, not when they ran. A DeviceTimeline records an
// event on the current stream at every edge and reads them back once the step's work completed,
// and marks each phase as an NVTX range so that an Nsight trace reads like Odyssey's own.
// defines: DeviceTimeline, make_cuda_timeline
#pragma once

#include <memory>
#include <string>

namespace odyssey {

/// One rank's device clock, used from its rank thread only. PhaseRecorder calls mark() and the
/// range functions at every phase edge and settle() at the end of each step.
class DeviceTimeline {
 public:
  virtual ~DeviceTimeline() = default;
  /// Records a timestamp in stream order; returns its index within the current step (0, 1, ...).
  virtual int mark() = 0;
  /// Records a timestamp in the order of another stream of the device (a copy stream; CUDA: a
  /// cudaStream_t), in the same index space as mark(): copies are timed on the clock the phases
  /// are. Returns -1 where the timeline has no other streams (the default).
  virtual int mark_on(void* native_stream) { return -1; }
  /// Blocks until every mark has happened on the device.
  virtual void settle() = 0;
  /// Seconds from mark 0 to mark `index` of the current step (after settle).
  virtual double since_first(int index) = 0;
  /// Forgets the step's marks: the next mark is index 0 again.
  virtual void restart() = 0;
  /// A named range around a phase (NVTX on CUDA); no-ops by default.
  virtual void range_push(const std::string& name) {}
  virtual void range_pop() {}
};

/// CUDA events on `device`'s current stream and NVTX ranges. Throws std::runtime_error in a build
/// without CUDA.
std::unique_ptr<DeviceTimeline> make_cuda_timeline(int device);

}  // namespace odyssey
