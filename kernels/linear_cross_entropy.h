// Fused tiled linear + cross-entropy (LM head + loss + its gradients) on the GPU
// (linear_cross_entropy.cu), its tile plan (linear_cross_entropy_plan.cpp) and an fp64 CPU reference
// (linear_cross_entropy_reference.cpp). Never holds more than one [seq_tile, vocab_tile] fp32 tile.
// defines: linear_cross_entropy, linear_cross_entropy_reference, MaxSum, merge_max_sum, ce_grad, kIgnoreIndex
#pragma once

#include <cmath>

#include "kernels/kernel_common.h"
#include "kernels/linear_cross_entropy_plan.h"

struct cublasContext;  // cublasHandle_t is cublasContext*

namespace odyssey::kernels {

/// Labels equal to this contribute no loss and no gradient (PyTorch's ignore_index).
constexpr int64_t kIgnoreIndex = -100;

/// loss[t] = logsumexp_v(h_t . w_v) - h_t . w_label(t)  (0 where the label is kIgnoreIndex),
/// dhidden = grad_scale * (softmax - onehot) @ weight        (overwritten, dtype; nullptr skips it)
/// dweight += grad_scale * (softmax - onehot)^T @ hidden     (fp32 accumulator; nullptr skips it)
/// Per sequence tile: pass 1 walks the vocabulary tiles with an online max/sum (cuBLAS logits tile
/// with fp32 output, then a row-statistics kernel); pass 2 recomputes each logits tile, turns it into
/// the softmax gradient in place and feeds two cuBLAS GEMMs (fp32 accumulation). Labels outside
/// [0, vocab) other than kIgnoreIndex are treated as ignored and counted into *invalid_labels (device
/// int32, may be nullptr). workspace: plan.bytes of device memory. cublas: nullptr = a per-thread handle.
///   auto plan = plan_linear_cross_entropy(KernelDtype::BF16, shape);
///   linear_cross_entropy(KernelDtype::BF16, h, w, labels, shape, 1.0f / n, loss, dh, dw, ws, plan.bytes,
///                        bad, stream);
void linear_cross_entropy(KernelDtype dtype, const void* hidden, const void* weight, const int64_t* labels,
                          const LinearCrossEntropyShape& shape, float grad_scale, float* loss, void* dhidden,
                          float* dweight, void* workspace, size_t workspace_bytes, int32_t* invalid_labels,
                          cudaStream_t stream, cublasContext* cublas = nullptr);

/// CPU reference (host pointers): untiled plain loops, fp64 accumulation; throws KernelError on a
/// label outside [0, vocab) that is not kIgnoreIndex. Same output conventions as the kernel.
void linear_cross_entropy_reference(KernelDtype dtype, const void* hidden, const void* weight, const int64_t* labels,
                                    int64_t tokens, int64_t dim, int64_t vocab, float grad_scale, float* loss,
                                    void* dhidden, float* dweight);

// --- The per-element math the kernel uses (also host-callable, so the tiling is testable on CPU) ---

/// Running maximum and sum of exp(x - max) over a set of logits; {-inf, 0} is the empty set.
struct MaxSum {
  float max;
  float sum;
};

/// The statistics of the union of two disjoint sets (the online log-sum-exp step).
ODYSSEY_HD inline MaxSum merge_max_sum(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float m = a.max > b.max ? a.max : b.max;
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

/// d(loss)/d(logit) scaled: grad_scale * (softmax - onehot).
ODYSSEY_HD inline float ce_grad(float logit, float lse, bool is_target, float grad_scale) {
  return grad_scale * (expf(logit - lse) - (is_target ? 1.0f : 0.0f));
}

}  // namespace odyssey::kernels
