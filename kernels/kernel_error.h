// The kernels' error type and argument check, without CUDA headers, for the host-side logic that
// the engine also compiles where no CUDA toolkit exists (kernels/slot_rotation.h).
// defines: KernelError, require
#pragma once

#include <stdexcept>
#include <string>

namespace odyssey::kernels {

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
