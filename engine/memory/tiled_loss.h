// Tiled loss: the final RMSNorm's output -> LM head -> cross-entropy over sequence tiles with the
// backward run inside the forward, so the [s, vocab] logits never exist at once. Also the answer
// statistics both loss paths share. defines: AnswerStats, LossOutputs, head_logits, accumulate_answer_stats,
// accumulate_answer_rows, tiled_loss_forward, TokenLosses, token_losses_forward
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

/// The same statistics from a per-token CE already computed (the fused kernel's `token_ce` [T] fp32,
/// unscaled): the CE sum is read from it, and the argmax from `hidden` [T, d] @ `head`^T [V, d] in
/// chunks of `chunk_rows` answer rows at a time. `labels` and `mask` hold T entries (any shape).
/// Memory: one [chunk_rows, V] logits chunk in the hidden states' dtype, never the [k, V] logits of
/// all k answers at once (kernels::fused_loss_answer_rows sizes the chunk).
void accumulate_answer_rows(const at::Tensor& hidden, const at::Tensor& head, const at::Tensor& labels,
                            const at::Tensor& mask, const at::Tensor& token_ce, int64_t chunk_rows, AnswerStats* stats);

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

/// A forward without backward (evaluation): each position's cross-entropy and predicted token.
struct TokenLosses {
  at::Tensor ce;      ///< [B, s] fp32: CE of each label, 0 where the label is -100
  at::Tensor argmax;  ///< [B, s] int64: the most likely next token at each position
};

/// CE and argmax of `normed` [B, s, d] @ `head`^T [V, d] against `labels` [B, s], per tile of
/// `tile_tokens` positions (dim 1; 0 or >= s: one tile). No graph, no gradient. Memory: one tile's
/// [B, tile, V] fp32 logits at a time, as the tiled loss holds.
TokenLosses token_losses_forward(const at::Tensor& normed, const at::Tensor& head, const at::Tensor& labels,
                                 int64_t tile_tokens);

}  // namespace odyssey
