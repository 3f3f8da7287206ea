// Tiled loss: the final RMSNorm's output -> LM head -> cross-entropy over sequence tiles with the
// backward run inside the forward, so the [s, vocab] logits never exist at once. Also the answer
// statistics both loss paths share. defines: AnswerStats, LossOutputs, head_logits, accumulate_answer_stats,
// tiled_loss_forward
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace odyssey {

/// Loss on the answer tokens of the long-range task (sums over this rank's tokens, fp64 scalars).
struct AnswerStats {
  at::Tensor ce_sum;   ///< Σ CE over answer tokens
  at::Tensor count;    ///< number of answer tokens
  at::Tensor correct;  ///< answer tokens whose argmax is the label
};

/// normed @ head^T in fp32. normed: [B, n, d] (the final norm's output), head: [V, d] -> [B, n, V].
at::Tensor head_logits(const at::Tensor& normed, const at::Tensor& head);

/// Adds the answer-token CE / count / argmax hits of `logits` [B, n, V] at `mask` [B, n] to
/// `stats` (no grad). Does nothing when mask is undefined.
void accumulate_answer_stats(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& mask,
                             AnswerStats* stats);

/// What the tiled loss computes in its forward: the loss and its gradients (for an incoming
/// gradient of 1), already scaled by `scale`.
struct LossOutputs {
  at::Tensor loss;    ///< scalar fp32: scale x Σ CE
  at::Tensor dx;      ///< [B, s, d] gradient w.r.t. the normed input, its dtype (category loss_workspace)
  at::Tensor d_head;  ///< [V, d] fp32 LM-head gradient accumulator
};

/// Per tile of `tile_tokens` positions (dim 1): logits, CE sum, and its gradients w.r.t. the tile's
/// normed hidden states and the head (accumulated across tiles). Memory: one tile's [B, tile, V]
/// logits and their gradient at a time; keeps dx and the head gradient.
LossOutputs tiled_loss_forward(const at::Tensor& normed, const at::Tensor& head, const at::Tensor& labels,
                               const at::Tensor& answer_mask, double scale, int64_t tile_tokens, AnswerStats* stats);

}  // namespace odyssey
