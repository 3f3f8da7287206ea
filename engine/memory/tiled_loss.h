// Tiled loss: final RMSNorm -> LM head -> cross-entropy over sequence tiles with the backward run
// inside the forward, so the [s, vocab] logits never exist at once. Also the untiled reference
// math both paths share. defines: LossOutputs, head_logits, accumulate_answer_stats,
// tiled_loss_forward
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "engine/model/step_runtime.h"

namespace odyssey {

/// final_norm(x) @ head^T in fp32. x: [B, n, d], norm_weight: [d], head: [V, d] -> [B, n, V].
at::Tensor head_logits(const at::Tensor& x, const at::Tensor& norm_weight, const at::Tensor& head, double eps);

/// Adds the answer-token CE / count / argmax hits of `logits` [B, n, V] at `mask` [B, n] to
/// `stats` (no grad). Does nothing when mask is undefined.
void accumulate_answer_stats(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& mask,
                             AnswerStats* stats);

/// What the tiled loss computes in its forward: the loss and its gradients (for an incoming
/// gradient of 1), already scaled by `scale`.
struct LossOutputs {
  at::Tensor loss;         ///< scalar fp32: scale x Σ CE
  at::Tensor dx;           ///< [B, s, d] in x's dtype (category loss_workspace)
  at::Tensor d_norm;       ///< [d] fp32
  at::Tensor d_head;       ///< [V, d] fp32
};

/// Per tile of `tile_tokens` positions (dim 1): logits, CE sum, and its gradients w.r.t. the tile's
/// x, the norm weight and the head (accumulated across tiles). Memory: one tile's [B, tile, V]
/// logits and their gradient at a time; saves dx and the weight gradients.
LossOutputs tiled_loss_forward(const at::Tensor& x, const at::Tensor& norm_weight, const at::Tensor& head,
                               const at::Tensor& labels, const at::Tensor& answer_mask, double eps, double scale,
                               int64_t tile_tokens, AnswerStats* stats);

}  // namespace odyssey
