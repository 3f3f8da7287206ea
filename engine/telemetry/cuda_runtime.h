// The CUDA runtime as Odyssey starts it, once per process before the first CUDA call: CUDA
// initialised (the caching allocator's statistics calls fail on a device nobody initialised), and
// the caching allocator on expandable segments unless the user chose its settings (the published
// long-context runs used them: fewer fragmented segments at multi-GiB activations).
// defines: CudaSetup, prepare_cuda, kDefaultAllocatorSettings
#pragma once

#include <string>

namespace odyssey {

/// What prepare_cuda found and did.
struct CudaSetup {
  bool available = false;          ///< this build has CUDA and the machine a device
  int device_count = 0;
  /// The allocator settings in force: the user's PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF,
  /// or kDefaultAllocatorSettings set by Odyssey.
  std::string allocator_settings;
  bool settings_from_user = false;
};

/// Odyssey's default for the CUDA caching allocator.
inline constexpr const char* kDefaultAllocatorSettings = "expandable_segments:True";

/// Initialises CUDA and the allocator settings once (thread-safe, idempotent; later calls return
/// the first result). Every entry point that may touch CUDA calls it first: resolve_device (the
/// trainer, the session, torchrun ranks, the benches through them), the memory tracker's
/// set_cuda_device, and the [.cuda] tests. On a CPU-only build or machine it reports
/// available = false and changes nothing.
const CudaSetup& prepare_cuda();

/// The settings prepare_cuda chooses for these environment values (nullptr: unset): the user's
/// when either is set (PYTORCH_CUDA_ALLOC_CONF first, as PyTorch reads them), else the default.
/// Pure; the rule prepare_cuda applies, testable without a GPU.
CudaSetup choose_allocator_settings(const char* pytorch_cuda_alloc_conf, const char* pytorch_alloc_conf);

}  // namespace odyssey
