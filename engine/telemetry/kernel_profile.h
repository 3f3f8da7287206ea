// Kineto (PyTorch's profiler) over one training step: every operator, CUDA kernel, copy and fill
// with its stream and duration, in the Chrome trace torch.profiler writes (odyssey train --kernel-profile).
// defines: start_kernel_profile, save_kernel_profile
#pragma once

#include <string>

namespace odyssey {

/// Starts recording the calling thread's operators (and those of the autograd threads its
/// backward hands work to) and, when `cuda_device` >= 0, every CUDA kernel, copy and fill of the
/// process (CUPTI). Throws std::runtime_error when a profile is already recording or the profiler
/// does not start (a LibTorch built without Kineto).
void start_kernel_profile(int cuda_device);
/// Waits for the device's queued work (a kernel still running when recording stops is lost),
/// stops recording and writes the Chrome trace to `path` through a temporary beside it, so a
/// failed write leaves no partial file. Throws std::runtime_error naming `path` when it cannot
/// write, or when no profile is recording.
void save_kernel_profile(const std::string& path);

}  // namespace odyssey
