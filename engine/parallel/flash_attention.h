// Causal attention that returns its log-sum-exp and a backward that starts from the saved output
// and log-sum-exp (no second forward): LibTorch's fused kernels, chosen by the rule of
// engine/layout/attention_kernels.h (CPU flash; CUDA cuDNN, FlashAttention-2 or memory-efficient).
// With packed documents (engine/layout/documents.h) each document's segment attends within itself.
// defines: FlashResult, DocumentRun, flash_attention_forward, flash_attention_backward, sdpa_has_only_math_for,
// note_sdpa_attention, attention_kernels_run, reset_attention_kernels_run
#pragma once

#include <array>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/layout/attention_kernels.h"
#include "engine/layout/documents.h"

namespace odyssey {

struct DocumentRun;

/// What the backward needs besides q, k, v: the output, the LSE and (CUDA) the kernel's
/// bookkeeping tensors. `out`: [B, h, S, hd] (memory [B, S, h, hd] when q's is); `lse`: [B, h, S]
/// fp32 (cuDNN's own [B, h, S, 1] held as a view without its last dim).
struct FlashResult {
  at::Tensor out, lse;
  at::Tensor cum_seq_q, cum_seq_k, philox_seed, philox_offset;  ///< CUDA only
  int64_t max_q = 0, max_k = 0;                                 ///< CUDA flash and cuDNN only
  LseKernel kernel = LseKernel::CpuFlash;                       ///< the kernel that ran (its backward runs the same)
  /// Packed documents in one FlashAttention-2 variable-length call (documents_run_varlen): the
  /// kernel's lse is [h, B*S], held in `lse` as its [B, h, S] view; cum_seq_q/k its segment
  /// boundaries over the B*S tokens (int32), max_q/max_k the longest segment.
  bool varlen = false;
  /// Packed documents: one kernel call per segment of each row, out and lse written into the
  /// whole tensors above. Empty without documents (one call over the whole sequence).
  std::vector<DocumentRun> documents;
};

/// One segment's kernel call: row `row`, positions [begin, begin + length). `kernel` holds the
/// call's bookkeeping; its out and lse are left undefined (slices of the whole tensors: the
/// backward pads the lse again where the kernel reads it padded, CUDA's memory-efficient kernel).
struct DocumentRun {
  int64_t row = 0, begin = 0, length = 0;
  FlashResult kernel;
};

/// Causal attention of q [B, h, S, hd] over k, v [B, hk, S, hd], by lse_attention_kernel with
/// `choice` (memory.lse_attention_kernel). CPU: _scaled_dot_product_flash_attention_for_cpu (GQA
/// with h % hk == 0 natively). CUDA fp16/bf16: cuDNN's fused attention or FlashAttention-2 (both
/// GQA natively); fp32: memory-efficient (K/V expanded to h heads when hk < h). A shape cuDNN's
/// graph refuses throws, naming the shape and the key that picks FlashAttention-2 instead.
FlashResult flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    LseKernelChoice choice);

/// The same with packed documents: row b's query at position p attends to the keys of p's segment
/// only (document_segments of documents.starts[b] over S), so no score across a boundary is ever
/// computed. CUDA half precision: one FlashAttention-2 variable-length call over every segment
/// (documents_run_varlen; memory: the whole out and lse, no more). Elsewhere one kernel call per
/// segment (memory: one segment's kernel output at a time besides). Without documents
/// (documents.any() false): the call above.
FlashResult flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const DocumentSpans& documents, LseKernelChoice choice);

/// Gradients {dq, dk, dv} (shapes of q, k, v) from grad_out [B, h, S, hd] and the saved result
/// (per segment when it holds document runs), through the backward of the kernel that ran.
std::array<at::Tensor, 3> flash_attention_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& v, const FlashResult& saved);

/// SDPA would run standard attention of q [B, h, S, hd] over k [B, hk, S, hd] on its math backend
/// only (sdpa_has_only_math, engine/layout/attention_kernels.h: CUDA fp32 with hk < h), making the
/// [B, h, S, S] scores: the caller runs flash_attention_forward instead.
bool sdpa_has_only_math_for(const at::Tensor& q, const at::Tensor& k);

/// The attention kernels this process ran since the last reset, for the run's trace and
/// summary.json: "sdpa" (standard attention, SDPA's own pick) and each lse_kernel_name that
/// flash_attention_forward called, in LseKernel's order. One relaxed atomic OR per call.
void note_sdpa_attention();
std::vector<std::string> attention_kernels_run();
void reset_attention_kernels_run();

}  // namespace odyssey
