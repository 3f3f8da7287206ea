// The CUDA runtime as Odyssey starts it, once per process before the first CUDA call: CUDA
// initialised (the caching allocator's statistics calls fail on a device nobody initialised), and
// the caching allocator on expandable segments unless the user chose its settings (the published
// long-context runs used them: fewer fragmented segments at multi-GiB activations).
// Also the allocator's memory history for PyTorch's memory_viz (odyssey train --memory-snapshot).
// defines: CudaSetup, prepare_cuda, kDefaultAllocatorSettings, start_memory_history,
// memory_history_active, annotate_memory_history, take_memory_snapshot
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

/// Starts recording every allocation and free of the caching allocator with its C++ stack (what
/// torch.cuda.memory._record_memory_history records). Throws std::runtime_error without CUDA.
void start_memory_history();
bool memory_history_active();
/// A phase edge in the history (memory_viz shows the START/END annotations beside the trace);
/// no-op unless recording.
void annotate_memory_history(const std::string& phase, bool start);
/// The history as the pickle PyTorch's memory_viz opens (pytorch.org/memory_viz), and stops
/// recording. Throws std::runtime_error without CUDA or when not recording.
std::string take_memory_snapshot();

}  // namespace odyssey
