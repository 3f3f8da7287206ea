// prepare_cuda: CUDA initialised lazily-but-first and the caching allocator's and cuBLAS's settings
// chosen once per process; a rank's cuBLAS workspaces made before its first step (see
// cuda_runtime.h). defines: prepare_cuda, choose_allocator_settings, choose_blas_workspace_config,
// prepare_blas_workspaces, the memory history's calls, HostSyncRefusal
#include "engine/telemetry/cuda_runtime.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/AllocatorConfig.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "engine/layout/planned_buffers.h"
#include "engine/telemetry/memory_tracker.h"

#if defined(ODYSSEY_WITH_CUDA)
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

namespace odyssey {

CudaSetup choose_allocator_settings(const char* pytorch_cuda_alloc_conf, const char* pytorch_alloc_conf) {
  CudaSetup s;
  const char* user = pytorch_cuda_alloc_conf != nullptr ? pytorch_cuda_alloc_conf : pytorch_alloc_conf;
  s.settings_from_user = user != nullptr;
  s.allocator_settings = user != nullptr ? user : kDefaultAllocatorSettings;
  return s;
}

BlasWorkspaceSetting choose_blas_workspace_config(const char* cublas_workspace_config) {
  BlasWorkspaceSetting s;
  s.from_user = cublas_workspace_config != nullptr;
  s.config = s.from_user ? std::string(cublas_workspace_config) : BlasWorkspaces::config();
  return s;
}

const CudaSetup& prepare_cuda() {
  static std::once_flag once;
  static CudaSetup setup;
  std::call_once(once, [] {
    setup = choose_allocator_settings(std::getenv("PYTORCH_CUDA_ALLOC_CONF"), std::getenv("PYTORCH_ALLOC_CONF"));
    setup.blas_workspaces = choose_blas_workspace_config(std::getenv("CUBLAS_WORKSPACE_CONFIG"));
    if (!at::hasCUDA()) return;  // a CPU-only LibTorch, or no driver
    setup.device_count = static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
    setup.available = setup.device_count > 0;
    if (!setup.available) return;
    // Before the first allocation, so every segment follows them (the user's own settings were
    // read from the environment by the allocator already).
    if (!setup.settings_from_user) c10::CachingAllocator::setAllocatorSettings(setup.allocator_settings);
    // Before the first GEMM: PyTorch reads it once, at the first workspace.
    if (!setup.blas_workspaces.from_user) ::setenv("CUBLAS_WORKSPACE_CONFIG", setup.blas_workspaces.config.c_str(), 1);
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  });
  return setup;
}

DeviceKind device_here(DeviceKind asked) {
  if (asked != DeviceKind::Auto) return asked;
  return prepare_cuda().available ? DeviceKind::Cuda : DeviceKind::Cpu;
}

RunConfig as_run_here(const RunConfig& cfg) {
  RunConfig here = cfg;
  here.training.device = device_here(cfg.training.device);
  return here;
}

namespace {
std::atomic<bool> g_history{false};
}  // namespace

#if defined(ODYSSEY_WITH_CUDA)
int64_t prepare_blas_workspaces(int device_index, int rank_slot) {
  if (!prepare_cuda().available) throw std::runtime_error("prepare_blas_workspaces: this machine has no CUDA device");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  RankScope rank(rank_slot);
  CategoryScope category(MemCategory::Other);
  const at::Tensor a = at::ones({8, 8}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_index))
                           .requires_grad_(true);  // [8, 8]
  // The forward's GEMM runs on this thread, its backward's on autograd's worker thread for the
  // device, which no scope binds: the tracker charges that thread's blocks to the rank counted for
  // the device (set_cuda_device), category "other" (the default outside every scope).
  const at::Tensor y = at::mm(a, a);      // [8, 8]
  torch::autograd::grad({y.sum()}, {a});  // the gradient is dropped: only the workspaces stay
  return static_cast<int64_t>(at::cuda::getChosenWorkspaceSize());
}

void start_memory_history() {
  if (!prepare_cuda().available) throw std::runtime_error("--memory-snapshot: this machine has no CUDA device");
  // Alloc and free events with their C++ stacks, no Python (there is none), no entry limit.
  torch::cuda::_record_memory_history(std::string("all"), std::string("all"), "all");
  g_history.store(true);
}

void annotate_memory_history(const std::string& phase, bool start) {
  if (!g_history.load()) return;
  c10::cuda::CUDACachingAllocator::recordAnnotation({{"stage", start ? "START" : "END"}, {"name", phase}});
}

std::string take_memory_snapshot() {
  if (!g_history.exchange(false)) throw std::runtime_error("take_memory_snapshot: the memory history is not recording");
  std::string pickle = torch::cuda::_memory_snapshot_pickled();
  torch::cuda::_record_memory_history(std::nullopt);  // stop
  return pickle;
}

HostSyncRefusal::HostSyncRefusal() {
  if (!prepare_cuda().available) throw std::runtime_error("HostSyncRefusal: this machine has no CUDA device");
  previous_mode_ = static_cast<int>(c10::cuda::warning_state().get_sync_debug_mode());
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
}

HostSyncRefusal::~HostSyncRefusal() {
  c10::cuda::warning_state().set_sync_debug_mode(static_cast<c10::cuda::SyncDebugMode>(previous_mode_));
}
#else
int64_t prepare_blas_workspaces(int, int) {
  throw std::runtime_error("prepare_blas_workspaces: this build of Odyssey has no CUDA");
}
void start_memory_history() {
  throw std::runtime_error("--memory-snapshot needs CUDA: this build of Odyssey has none");
}
void annotate_memory_history(const std::string&, bool) {}
std::string take_memory_snapshot() {
  throw std::runtime_error("take_memory_snapshot: this build of Odyssey has no CUDA");
}
HostSyncRefusal::HostSyncRefusal() { throw std::runtime_error("HostSyncRefusal: this build of Odyssey has no CUDA"); }
HostSyncRefusal::~HostSyncRefusal() = default;
#endif

bool memory_history_active() { return g_history.load(); }

}  // namespace odyssey
