// SwiGLU's elementwise part on the GPU (swiglu.cu) and its fp64 CPU reference (swiglu_reference.cpp):
// h = silu(gate) * up forward, d gate and d up backward, one pass over the [n] elements each way.
// defines: swiglu_forward, swiglu_backward, swiglu_forward_reference, swiglu_backward_reference
#pragma once

#include "kernels/kernel_common.h"

namespace odyssey::kernels {

/// Forward: h[i] = silu(gate[i]) * up[i] over n elements of `dtype` (device pointers). The result
/// is rounded where ATen's unfused `silu` and `mul` round (silu(gate) to dtype, then the product),
/// each computed in fp32 with ATen's formula, so the fused pass gives the eager ops' values. `h`
/// may be `gate` (in place: each element is read before it is written by the same thread).
/// Memory reason: one pass that reads gate and up and writes h, no [n] silu(gate) in between.
///   swiglu_forward(KernelDtype::BF16, gate, up, gate, tokens * d_ffn, stream);
void swiglu_forward(KernelDtype dtype, const void* gate, const void* up, void* h, int64_t n, cudaStream_t stream);

/// Backward from dh (the gradient of h): d_up = dh * silu(gate), d_gate = silu'(gate) * (dh * up),
/// silu(gate) recomputed in registers and every intermediate rounded where ATen's eager backward
/// rounds it (silu(gate), dh * up). `d_gate` may be `gate` and `d_up` may be `up` (in place).
/// Memory reason: the forward keeps gate and up only, and the gradients can take their memory.
///   swiglu_backward(KernelDtype::BF16, dh, gate, up, gate, up, tokens * d_ffn, stream);
void swiglu_backward(KernelDtype dtype, const void* dh, const void* gate, const void* up, void* d_gate, void* d_up,
                     int64_t n, cudaStream_t stream);

/// CPU reference of the forward (host pointers, fp64 arithmetic, rounded to dtype at the same places).
void swiglu_forward_reference(KernelDtype dtype, const void* gate, const void* up, void* h, int64_t n);

/// CPU reference of the backward (host pointers, fp64 arithmetic, rounded at the same places).
void swiglu_backward_reference(KernelDtype dtype, const void* dh, const void* gate, const void* up, void* d_gate,
                               void* d_up, int64_t n);

}  // namespace odyssey::kernels
