// prepare_cuda: CUDA initialised lazily-but-first and the caching allocator's settings chosen once
// per process (see cuda_runtime.h). defines: prepare_cuda, choose_allocator_settings
#include "engine/telemetry/cuda_runtime.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/AllocatorConfig.h>

#include <cstdlib>
#include <mutex>

namespace odyssey {

CudaSetup choose_allocator_settings(const char* pytorch_cuda_alloc_conf, const char* pytorch_alloc_conf) {
  CudaSetup s;
  const char* user = pytorch_cuda_alloc_conf != nullptr ? pytorch_cuda_alloc_conf : pytorch_alloc_conf;
  s.settings_from_user = user != nullptr;
  s.allocator_settings = user != nullptr ? user : kDefaultAllocatorSettings;
  return s;
}

const CudaSetup& prepare_cuda() {
  static std::once_flag once;
  static CudaSetup setup;
  std::call_once(once, [] {
    setup = choose_allocator_settings(std::getenv("PYTORCH_CUDA_ALLOC_CONF"), std::getenv("PYTORCH_ALLOC_CONF"));
    if (!at::hasCUDA()) return;  // a CPU-only LibTorch, or no driver
    setup.device_count = static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
    setup.available = setup.device_count > 0;
    if (!setup.available) return;
    // Before the first allocation, so every segment follows them (the user's own settings were
    // read from the environment by the allocator already).
    if (!setup.settings_from_user) c10::CachingAllocator::setAllocatorSettings(setup.allocator_settings);
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  });
  return setup;
}

}  // namespace odyssey
