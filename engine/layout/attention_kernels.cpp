// The log-sum-exp paths' attention kernel rule (attention_kernels.h), shared by the engine's
// dispatch (engine/parallel/flash_attention.cpp), the validator and the planner's step time.
// defines: lse_attention_kernel, cudnn_takes_head_dim, cudnn_choice_refusal, cudnn_could_run, documents_run_varlen,
// lse_kernel_name, lse_kernel_label
#include "engine/layout/attention_kernels.h"

namespace odyssey {

bool cudnn_takes_head_dim(int64_t head_dim) { return head_dim > 0 && head_dim % 8 == 0 && head_dim <= 128; }

const char* cudnn_choice_refusal(const LseKernelQuery& q) {
  if (q.packed_documents)
    return "packed documents run FlashAttention-2's variable-length kernel (cuDNN's ragged attention is not "
           "reachable from LibTorch's C++ API)";
  if (!cudnn_takes_head_dim(q.head_dim)) return "cuDNN's attention takes head dims that are multiples of 8 up to 128";
  return "";
}

bool cudnn_could_run(const LseKernelQuery& q) { return q.cuda && q.half_precision && *cudnn_choice_refusal(q) == '\0'; }

bool documents_run_varlen(const LseKernelQuery& q) { return q.cuda && q.half_precision && q.packed_documents; }

LseKernel lse_attention_kernel(const LseKernelQuery& q) {
  if (!q.cuda) return LseKernel::CpuFlash;
  if (!q.half_precision) return LseKernel::CudaEfficient;
  if (q.choice == LseKernelChoice::Flash2 || !cudnn_could_run(q)) return LseKernel::CudaFlash2;
  return LseKernel::CudaCudnn;
}

int64_t lse_positions(LseKernel k, int64_t positions) {
  constexpr int64_t kEfficientLseAlignment = 32;  // ATen's kAlignLSE (mem_eff_attention)
  if (k != LseKernel::CudaEfficient) return positions;
  return (positions + kEfficientLseAlignment - 1) / kEfficientLseAlignment * kEfficientLseAlignment;
}

const char* lse_kernel_name(LseKernel k) {
  switch (k) {
    case LseKernel::CpuFlash:
      return "cpu_flash";
    case LseKernel::CudaEfficient:
      return "efficient";
    case LseKernel::CudaFlash2:
      return "flash2";
    case LseKernel::CudaCudnn:
      return "cudnn";
  }
  return "?";
}

const char* lse_kernel_label(LseKernel k) {
  switch (k) {
    case LseKernel::CpuFlash:
      return "CPU flash attention";
    case LseKernel::CudaEfficient:
      return "memory-efficient attention";
    case LseKernel::CudaFlash2:
      return "FlashAttention-2";
    case LseKernel::CudaCudnn:
      return "cuDNN attention";
  }
  return "?";
}

}  // namespace odyssey
