// The kernels' CUDA-free host vocabulary (element types, errors, argument checks), for the host
// logic the engine and the planner compile where no CUDA toolkit exists (slot rotation, tile plans).
// defines: KernelDtype, dtype_bytes, KernelError, require
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace odyssey::kernels {

/// Element type of a kernel's floating-point tensors. Accumulation is always fp32 on the GPU
/// (fp64 in the CPU references).
enum class KernelDtype { F32, BF16 };

/// Bytes per element: 4 for F32, 2 for BF16.
inline size_t dtype_bytes(KernelDtype dtype) { return dtype == KernelDtype::F32 ? 4 : 2; }

/// A kernel refused its arguments or a CUDA call failed; the message names the call and values.
class KernelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws KernelError with `message` when `condition` is false (argument checks before launch).
inline void require(bool condition, const std::string& message) {
  if (!condition) throw KernelError(message);
}

}  // namespace odyssey::kernels
