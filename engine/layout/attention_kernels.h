// Which fused attention kernel runs where the engine needs attention's log-sum-exp (the Untied
// stages, kept attention, packed documents): the one rule the engine, the validator and the planner read.
// defines: LseKernelChoice, LseKernel, lse_attention_kernel, cudnn_takes_head_dim, cudnn_could_run, lse_kernel_name,
// documents_run_varlen, lse_positions
#pragma once

#include <cstdint>

namespace odyssey {

/// memory.lse_attention_kernel: which CUDA kernel the log-sum-exp paths call in fp16/bf16.
/// Auto: cuDNN's where it takes the shape, else FlashAttention-2. Cudnn: cuDNN's, and a config it
/// does not take is refused (validate). Flash2: FlashAttention-2 always.
enum class LseKernelChoice { Auto, Cudnn, Flash2 };

/// The kernel one call runs.
enum class LseKernel {
  CpuFlash,       ///< ATen's _scaled_dot_product_flash_attention_for_cpu (any dtype)
  CudaEfficient,  ///< the memory-efficient CUDA kernel: fp32 (flash and cuDNN take fp16/bf16 only)
  CudaFlash2,     ///< FlashAttention-2 (_scaled_dot_product_flash_attention), GQA native
  CudaCudnn,      ///< cuDNN's fused attention (_scaled_dot_product_cudnn_attention), GQA native
};

/// What decides the kernel of one call.
struct LseKernelQuery {
  bool cuda = false;              ///< the tensors are on a CUDA device
  bool half_precision = false;    ///< fp16 or bf16 (else fp32)
  int64_t head_dim = 0;           ///< hd of q, k and v
  bool packed_documents = false;  ///< document masking: one call per document segment
  LseKernelChoice choice = LseKernelChoice::Auto;
};

/// cuDNN's fused attention takes head dims that are multiples of 8 up to 128 (LibTorch 2.11's
/// check_cudnn_tensor_shapes; 256 only on some cuDNN versions, so not relied on).
bool cudnn_takes_head_dim(int64_t head_dim);

/// The rule. CPU: CpuFlash. CUDA fp32: CudaEfficient. CUDA half precision: CudaFlash2 with packed
/// documents (one variable-length call over every segment, documents_run_varlen; cuDNN's ragged
/// path is not reachable from LibTorch's C++ API in 2.11) or where cuDNN does not take the head dim
/// or the choice is Flash2; else CudaCudnn. A Cudnn choice the rule cannot honour is refused by
/// validate (cudnn_choice_refusal), never silently turned into another kernel.
LseKernel lse_attention_kernel(const LseKernelQuery& q);

/// Packed documents run FlashAttention-2's variable-length kernel, one call over every document
/// segment of every row (cum_seq_q/k), on CUDA in half precision; elsewhere (the CPU, CUDA fp32)
/// one kernel call per segment. The engine's dispatch and the planner's buffers follow it.
bool documents_run_varlen(const LseKernelQuery& q);

/// Why a Cudnn choice cannot run on CUDA in half precision (empty: it can): the rule above.
const char* cudnn_choice_refusal(const LseKernelQuery& q);

/// cuDNN's kernel could run this query: CUDA, half precision, and no refusal. Only there does the
/// choice between cuDNN's and FlashAttention-2 decide what runs (the rule, the tuner's candidate
/// kernels, the describe text).
bool cudnn_could_run(const LseKernelQuery& q);

/// The log-sum-exp's last dim of one call of `k` over `positions` query positions: the
/// memory-efficient kernel rounds it up to a multiple of 32 (ATen's kAlignLSE), the others return
/// it exact. What a kept log-sum-exp holds (kept_attention_step_payload) and what the packed
/// documents' whole one is allocated with, so that both shapes agree on every batch.
int64_t lse_positions(LseKernel k, int64_t positions);

/// "cpu_flash", "efficient", "flash2", "cudnn": plan --json's time.attention_kernel for the log-sum-exp
/// paths, the trace's and the studio's.
const char* lse_kernel_name(LseKernel k);
/// "CPU flash attention", "memory-efficient attention", "FlashAttention-2", "cuDNN attention".
const char* lse_kernel_label(LseKernel k);

}  // namespace odyssey
