// Where a rank runs: its device (CUDA when there is one, by local rank), the compute dtype, and
// the intra-op threads that rank threads share.
#include "engine/parallel/devices.h"

#include <ATen/Parallel.h>
#include <ATen/Context.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "engine/telemetry/cuda_runtime.h"

namespace odyssey {

at::Device resolve_device(DeviceKind kind, int local_rank) {
  if (kind == DeviceKind::Cpu) return at::Device(at::kCPU);
  const bool cuda = prepare_cuda().available;  // initialises CUDA and the allocator, once
  if (kind == DeviceKind::Cuda && !cuda)
    throw std::invalid_argument("training.device = \"cuda\" but no CUDA device is available");
  if (device_here(kind) == DeviceKind::Cpu) return at::Device(at::kCPU);
  const int gpus = prepare_cuda().device_count;
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
}

at::ScalarType compute_dtype(DType dtype) { return dtype == DType::BFloat16 ? at::kBFloat16 : at::kFloat; }

void configure_threads(int ranks_on_machine) {
  // An explicit OMP_NUM_THREADS wins (LibTorch read it at start-up); else share the cores.
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr || std::atoi(env) <= 0) {
    // One core stays free for the rest of the machine (Gloo and UI threads, other processes):
    // OpenMP workers spin-wait, and on a shared 2-core machine two threads per rank made steps
    // 4x slower than one (measured: tiny-cpu at 512 tokens, 115 vs 520 ms median).
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(std::max(1, cores / std::max(1, ranks_on_machine) - 1));
  }
  // Denormal floats (softmax tails, tiny gradients) run 10-100x slower on x86 CPUs and made
  // single steps take seconds; flush them to zero like torch.set_flush_denormal(True).
  at::globalContext().setFlushDenormal(true);
}

void use_portable_cpu_kernels() {
  // ATen checks the flag at every call (could_pack, mkldnn_bf16_device_check's callers), so
  // setting it late still takes effect (unlike ONEDNN_MAX_CPU_ISA, read once at oneDNN's first use).
  at::globalContext().setUserEnabledMkldnn(false);
}

}  // namespace odyssey
