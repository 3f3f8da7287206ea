// The CUDA runtime as Odyssey starts it, once per process before the first CUDA call: CUDA
// initialised (the caching allocator's statistics calls fail on a device nobody initialised), and
// the caching allocator on expandable segments unless the user chose its settings (the published
// long-context runs used them: fewer fragmented segments at multi-GiB activations).
// cuBLAS's workspaces sized by Odyssey (BlasWorkspaces, engine/layout/planned_buffers.h) unless the
// user chose, and made before a rank's first step. Also the allocator's memory history for
// PyTorch's memory_viz (odyssey train --memory-snapshot).
// defines: CudaSetup, BlasWorkspaceSetting, prepare_cuda, kDefaultAllocatorSettings,
// choose_allocator_settings, choose_blas_workspace_config, prepare_blas_workspaces,
// start_memory_history, memory_history_active, annotate_memory_history, take_memory_snapshot,
// HostSyncRefusal, device_here, as_run_here
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/run_config.h"

namespace odyssey {

/// CUBLAS_WORKSPACE_CONFIG as prepare_cuda leaves it: the user's, or Odyssey's ":4096:8".
struct BlasWorkspaceSetting {
  std::string config;
  bool from_user = false;
};

/// What prepare_cuda found and did.
struct CudaSetup {
  bool available = false;  ///< this build has CUDA and the machine a device
  int device_count = 0;
  /// The allocator settings in force: the user's PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF,
  /// or kDefaultAllocatorSettings set by Odyssey.
  std::string allocator_settings;
  bool settings_from_user = false;
  BlasWorkspaceSetting blas_workspaces;
};

/// Odyssey's default for the CUDA caching allocator.
inline constexpr const char* kDefaultAllocatorSettings = "expandable_segments:True";

/// Initialises CUDA and the allocator settings once (thread-safe, idempotent; later calls return
/// the first result). Every entry point that may touch CUDA calls it first: resolve_device (the
/// trainer, the session, torchrun ranks, the benches through them), the memory tracker's
/// set_cuda_device, and the [.cuda] tests. On a CPU-only build or machine it reports
/// available = false and changes nothing.
const CudaSetup& prepare_cuda();

/// training.device as this process runs it: "auto" is CUDA where prepare_cuda finds a device,
/// else the CPU (the rule resolve_device applies); "cpu" and "cuda" as they are.
DeviceKind device_here(DeviceKind asked);
/// `cfg` with training.device as device_here resolves it: what the planner's refusal
/// (planned_out_of_memory) must see, since on the CPU the device is this machine's RAM. Memory: a
/// GPU preset left at "auto" on a machine without one planned the GPU's kernels against the GPU's
/// capacity and trained on the CPU until the kernel's OOM killer ended it.
RunConfig as_run_here(const RunConfig& cfg);

/// The settings prepare_cuda chooses for these environment values (nullptr: unset): the user's
/// when either is set (PYTORCH_CUDA_ALLOC_CONF first, as PyTorch reads them), else the default.
/// Pure; the rule prepare_cuda applies, testable without a GPU.
CudaSetup choose_allocator_settings(const char* pytorch_cuda_alloc_conf, const char* pytorch_alloc_conf);

/// The cuBLAS workspace setting for this CUBLAS_WORKSPACE_CONFIG (nullptr: unset): the user's when
/// set, else ":SIZE:COUNT" of BlasWorkspaces (PyTorch's Hopper and Blackwell default, 32 MiB, which
/// Odyssey sets on every GPU so the planner's term holds). Pure: the rule prepare_cuda applies.
BlasWorkspaceSetting choose_blas_workspace_config(const char* cublas_workspace_config);

/// Makes the two cuBLAS workspaces of a rank on `device_index` before its first step, charged to
/// its memory category "other" under `rank_slot`: the calling thread's (a GEMM) and autograd's
/// worker thread's for that device (the GEMM's backward). Memory: without it they appear inside
/// step 1 (block 0's first GEMM, then the first backward GEMM), so step 1 and later steps had
/// different phase peaks. Returns the bytes of one workspace (PyTorch's figure, which the user's
/// CUBLAS_WORKSPACE_CONFIG sets). Throws std::runtime_error without CUDA.
int64_t prepare_blas_workspaces(int device_index, int rank_slot);

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

/// While one is alive, a CUDA operation that makes the host wait for the device throws
/// c10::Error (PyTorch's sync debug mode "error", torch.cuda.set_sync_debug_mode): the [.cuda]
/// tests' proof that a path launches its work without waiting. Process-wide, as PyTorch's setting
/// is; the mode before it comes back when it ends. Throws std::runtime_error without CUDA.
class HostSyncRefusal {
 public:
  HostSyncRefusal();
  ~HostSyncRefusal();
  HostSyncRefusal(const HostSyncRefusal&) = delete;
  HostSyncRefusal& operator=(const HostSyncRefusal&) = delete;

 private:
  int previous_mode_ = 0;
};

}  // namespace odyssey
