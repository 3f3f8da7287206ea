// Construction of c10d's NCCL backend (one GPU per rank). Compiled with -DUSE_C10D_NCCL only when
// LibTorch has CUDA and nccl.h was found (parallel.cmake); otherwise nccl_available() is false.
// defines: make_nccl_backend, nccl_available
#pragma once

#include <chrono>

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace odyssey {

/// True when this build can create NCCL process groups (CUDA LibTorch + nccl.h at build time).
bool nccl_available();

/// A ProcessGroupNCCL over `store` for the GPU `device` (set as the current device first: NCCL
/// communicators are created lazily on the first collective, on the current device). The
/// backend's own watchdog timeout is `timeout` plus a grace period so that Odyssey's wait loop
/// (which names rank, group and operation) reports first. Throws std::runtime_error when
/// nccl_available() is false.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    std::chrono::milliseconds timeout, c10::Device device);

}  // namespace odyssey
