// Where standard attention leaves SDPA: SDPA has only its math backend for CUDA fp32 over GQA, so
// the engine calls the log-sum-exp paths' kernel there, and the planner charges what that kernel makes.
// defines: sdpa_has_only_math, kernel_repeats_kv
#pragma once

#include <cstdint>

#include "engine/layout/attention_kernels.h"

namespace odyssey {

/// Standard attention (no log-sum-exp kept, no packed documents) goes through SDPA, which picks its
/// own kernel, except where SDPA has only its math backend for the call: CUDA in fp32 over fewer KV
/// heads than query heads (in LibTorch 2.11 its memory-efficient kernel wants equal head counts;
/// flash and cuDNN take fp16/bf16 only). Memory reason: math makes the [B, h, S, S] scores,
/// probabilities and their gradients, quadratic in S. There the engine calls the log-sum-exp paths'
/// kernel itself (CudaEfficient, K and V repeated for the call: kernel_repeats_kv), and the planner
/// charges that. `q_heads`, `kv_heads`: the call's, in the head layout (after Ulysses' all-to-all).
bool sdpa_has_only_math(const LseKernelQuery& q, int64_t q_heads, int64_t kv_heads);

/// The call repeats K and V to the query heads, forward and backward (two [B, h, S, hd] beside the
/// kernel for the call; flash_attention.cpp's expand_kv): the memory-efficient CUDA kernel over
/// fewer KV heads than query heads. FlashAttention-2, cuDNN's and the CPU's kernels take GQA natively.
bool kernel_repeats_kv(LseKernel k, int64_t q_heads, int64_t kv_heads);

}  // namespace odyssey
