// Where a rank runs: the device of a rank, the compute dtype, and how rank threads share the cores.
// Read by the rank launch (engine/parallel/job.cpp) and the trainer. defines: resolve_device, compute_dtype, configure_threads
#pragma once

#include <ATen/ATen.h>

#include "engine/config/run_config.h"

namespace odyssey {

/// The device of `kind` for a rank (auto = CUDA when available). Throws when CUDA is asked for
/// and absent.
at::Device resolve_device(DeviceKind kind, int local_rank);
at::ScalarType compute_dtype(DType dtype);
/// Intra-op threads for `ranks_on_machine` ranks sharing this machine's cores, as threads of this
/// process or as processes of their own (cores / ranks - 1, at least 1; OMP_NUM_THREADS wins), and
/// flush-to-zero for denormal floats.
void configure_threads(int ranks_on_machine);

/// The CPU kernels every x86 CPU runs alike: ATen's own, with oneDNN (mkldnn) turned off. With it
/// on, what a bf16 step allocates depends on the CPU: oneDNN's matmul scratchpads (through c10's
/// allocator) on any AVX-512 CPU, and on an AMX CPU ATen's flash kernel packs K and V (four more
/// buffers) and, under ATEN_CPU_CAPABILITY=avx2, fails in pack_vnni2. Off, the memory a CPU step
/// measures, and the planner's walk of it, are the same on Intel AMX and AMD AVX2 machines, and
/// every capability runs. The cost is bf16 matmul speed on AVX-512 CPUs; the CPU engine is for
/// measurement and correctness, the GPU for speed. Idempotent; every Trainer calls it.
void use_portable_cpu_kernels();

}  // namespace odyssey
