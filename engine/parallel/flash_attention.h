// Causal attention that returns its log-sum-exp and a backward that starts from the saved output
// and log-sum-exp (no second forward): LibTorch's flash kernels, chosen by device.
// defines: FlashResult, flash_attention_forward, flash_attention_backward
#pragma once

#include <array>

#include <ATen/ATen.h>

namespace odyssey {

/// What the backward needs besides q, k, v: the output, the LSE and (CUDA) the kernel's
/// bookkeeping tensors. `out`: [B, h, S, hd] (memory [B, S, h, hd]); `lse`: [B, h, S] fp32.
struct FlashResult {
  at::Tensor out, lse;
  at::Tensor cum_seq_q, cum_seq_k, philox_seed, philox_offset;  ///< CUDA only
  int64_t max_q = 0, max_k = 0;                                 ///< CUDA flash only
  bool efficient = false;  ///< CUDA fp32: memory-efficient kernel (flash needs fp16/bf16)
};

/// Causal attention of q [B, h, S, hd] over k, v [B, hk, S, hd]. CPU:
/// _scaled_dot_product_flash_attention_for_cpu (GQA with h % hk == 0 natively). CUDA: flash for
/// fp16/bf16, memory-efficient for fp32 (K/V expanded to h heads when hk < h).
FlashResult flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

/// Gradients {dq, dk, dv} (shapes of q, k, v) from grad_out [B, h, S, hd] and the saved result.
std::array<at::Tensor, 3> flash_attention_backward(const at::Tensor& grad_out, const at::Tensor& q,
                                                   const at::Tensor& k, const at::Tensor& v, const FlashResult& saved);

}  // namespace odyssey
