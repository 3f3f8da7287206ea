// Helpers the op files share: argument checks with values in the message, and the mapping from
// LibTorch dtypes and tensors to the kernels' raw pointers and streams (CUDA builds only).
// defines: check_float_dtype, kernel_dtype (ODYSSEY_WITH_CUDA), current_stream (ODYSSEY_WITH_CUDA)
#pragma once

#include <ATen/ATen.h>

#include <string>

#ifdef ODYSSEY_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/kernel_common.h"
#endif

namespace odyssey::ops::detail {

/// Throws unless `t` is float32 or bfloat16, naming the op, the argument and its dtype.
inline void check_float_dtype(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, op, ": ", name, " has dtype ",
              t.scalar_type(), "; float32 or bfloat16 required");
}

#ifdef ODYSSEY_WITH_CUDA
inline kernels::KernelDtype kernel_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat ? kernels::KernelDtype::F32 : kernels::KernelDtype::BF16;
}

inline cudaStream_t current_stream(const at::Tensor& t) {
  return at::cuda::getCurrentCUDAStream(t.device().index()).stream();
}
#endif

}  // namespace odyssey::ops::detail
