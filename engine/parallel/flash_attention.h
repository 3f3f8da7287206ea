// Causal attention that returns its log-sum-exp and a backward that starts from the saved output
// and log-sum-exp (no second forward): LibTorch's flash kernels, chosen by device.
// With packed documents (engine/layout/documents.h) each document's segment attends within itself.
// defines: FlashResult, DocumentRun, flash_attention_forward, flash_attention_backward
#pragma once

#include <array>
#include <vector>

#include <ATen/ATen.h>

#include "engine/layout/documents.h"

namespace odyssey {

struct DocumentRun;

/// What the backward needs besides q, k, v: the output, the LSE and (CUDA) the kernel's
/// bookkeeping tensors. `out`: [B, h, S, hd] (memory [B, S, h, hd]); `lse`: [B, h, S] fp32.
struct FlashResult {
  at::Tensor out, lse;
  at::Tensor cum_seq_q, cum_seq_k, philox_seed, philox_offset;  ///< CUDA only
  int64_t max_q = 0, max_k = 0;                                 ///< CUDA flash only
  bool efficient = false;  ///< CUDA fp32: memory-efficient kernel (flash needs fp16/bf16)
  /// Packed documents: one kernel call per segment of each row, out and lse written into the
  /// whole tensors above. Empty without documents (one call over the whole sequence).
  std::vector<DocumentRun> documents;
};

/// One segment's kernel call: row `row`, positions [begin, begin + length). `kernel` holds the
/// call's bookkeeping; its out is left undefined (a slice of the whole output), its lse too unless
/// the kernel's own differs in shape from the slice (CUDA's memory-efficient kernel pads it).
struct DocumentRun {
  int64_t row = 0, begin = 0, length = 0;
  FlashResult kernel;
};

/// Causal attention of q [B, h, S, hd] over k, v [B, hk, S, hd]. CPU:
/// _scaled_dot_product_flash_attention_for_cpu (GQA with h % hk == 0 natively). CUDA: flash for
/// fp16/bf16, memory-efficient for fp32 (K/V expanded to h heads when hk < h).
FlashResult flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

/// The same with packed documents: row b's query at position p attends to the keys of p's segment
/// only (document_segments of documents.starts[b] over S), one kernel call per segment, so no
/// score across a boundary is ever computed. Without documents (documents.any() false): the call
/// above. Memory: the whole out and lse, and one segment's kernel output at a time besides.
FlashResult flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const DocumentSpans& documents);

/// Gradients {dq, dk, dv} (shapes of q, k, v) from grad_out [B, h, S, hd] and the saved result
/// (per segment when it holds document runs).
std::array<at::Tensor, 3> flash_attention_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& v, const FlashResult& saved);

}  // namespace odyssey
