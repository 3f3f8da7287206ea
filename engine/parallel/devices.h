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
/// Intra-op threads for `ranks_in_process` rank threads sharing this machine's cores (cores /
/// ranks - 1, at least 1; OMP_NUM_THREADS wins), and flush-to-zero for denormal floats.
void configure_threads(int ranks_in_process);

}  // namespace odyssey
