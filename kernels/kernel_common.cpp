// Host side of the shared kernel vocabulary: dtype names and the CUDA error check that throws
// KernelError instead of aborting (the library never calls exit()).
// defines: to_string(KernelDtype), check_cuda
#include "kernels/kernel_common.h"

namespace odyssey::kernels {

const char* to_string(KernelDtype dtype) { return dtype == KernelDtype::F32 ? "float32" : "bfloat16"; }

void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw KernelError(std::string(what) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ") at " +
                    file + ":" + std::to_string(line));
}

}  // namespace odyssey::kernels
