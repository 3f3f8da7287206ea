// RMSNorm forward/backward on the GPU (rmsnorm.cu) and its fp64 CPU reference
// (rmsnorm_reference.cpp): y = x * rstd * weight over rows of `dim`, rstd = 1/sqrt(mean(x^2) + eps).
// defines: rmsnorm_forward, rmsnorm_rstd, rmsnorm_backward, rmsnorm_backward_partials,
//          rmsnorm_backward_workspace_bytes, rmsnorm_forward_reference, rmsnorm_backward_reference
#pragma once

#include "kernels/kernel_common.h"

namespace odyssey::kernels {

/// Largest row width the backward supports: its per-block dweight partial lives in shared memory.
constexpr int64_t kRmsNormMaxDim = 49152;

/// Forward. x, y: [rows, dim] of `dtype`; weight: [dim] of `dtype`; rstd: [rows] fp32 (saved for
/// the backward so it never re-reads x for the statistics). All device pointers.
///   rmsnorm_forward(KernelDtype::BF16, x, w, y, rstd, tokens, 2048, 1e-5f, stream);
void rmsnorm_forward(KernelDtype dtype, const void* x, const void* weight, void* y, float* rstd, int64_t rows,
                     int64_t dim, float eps, cudaStream_t stream);

/// rstd alone: [rows] fp32 = 1/sqrt(mean(x^2) + eps) of x [rows, dim], the forward's statistics
/// without its output (x read once). For a norm folded into the next matmul (Untied Ulysses' input
/// norm: rmsnorm(x) @ W^T = (x @ (W * weight)^T) * rstd), which needs no normed copy of x.
///   rmsnorm_rstd(KernelDtype::BF16, x, rstd, tokens, 2048, 1e-5f, stream);
void rmsnorm_rstd(KernelDtype dtype, const void* x, float* rstd, int64_t rows, int64_t dim, float eps,
                  cudaStream_t stream);

/// Stage-1 blocks of the backward (a function of rows only, so the reduction order, and with it
/// dweight, is bit-identical from run to run): min(rows, 256).
int64_t rmsnorm_backward_partials(int64_t rows);

/// fp32 workspace the backward needs: partials x dim floats.
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim);

/// Backward. dy, x, dx: [rows, dim]; weight, dweight: [dim] (dweight is overwritten); rstd from the
/// forward; workspace: rmsnorm_backward_workspace_bytes(rows, dim) bytes of device memory.
/// dweight is reduced in two deterministic stages: per-block partial sums over a fixed row
/// partition, then a column-wise sum of the partials in block order.
void rmsnorm_backward(KernelDtype dtype, const void* dy, const void* x, const void* weight, const float* rstd, void* dx,
                      void* dweight, float* workspace, int64_t rows, int64_t dim, cudaStream_t stream);

/// CPU reference of the forward (host pointers, fp64 accumulation, results rounded to dtype).
void rmsnorm_forward_reference(KernelDtype dtype, const void* x, const void* weight, void* y, float* rstd, int64_t rows,
                               int64_t dim, float eps);

/// CPU reference of the backward (host pointers, fp64 accumulation, dweight overwritten).
void rmsnorm_backward_reference(KernelDtype dtype, const void* dy, const void* x, const void* weight, const float* rstd,
                                void* dx, void* dweight, int64_t rows, int64_t dim);

}  // namespace odyssey::kernels
