// Tiled LM head + cross-entropy with the backward inside the forward (see tiled_loss.h).
// defines: head_logits, accumulate_answer_stats, accumulate_answer_rows, tiled_loss_forward, token_losses_forward
#include "engine/memory/tiled_loss.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/ops/layers.h"
#include "engine/ops/ops.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/planned_buffer_log.h"
#include "kernels/linear_cross_entropy_plan.h"

namespace odyssey {
namespace {

/// Adds one batch of answers: `ce` and `hits` are scalars on any device, summed as fp64 on the host.
void add_answer_stats(AnswerStats* stats, const at::Tensor& ce, int64_t count, const at::Tensor& hits) {
  auto f64 = [](const at::Tensor& t) { return t.to(at::kDouble).cpu(); };
  if (!stats->ce_sum.defined()) {
    stats->ce_sum = at::zeros({}, at::kDouble);
    stats->count = at::zeros({}, at::kDouble);
    stats->correct = at::zeros({}, at::kDouble);
  }
  stats->ce_sum += f64(ce);
  stats->count += static_cast<double>(count);
  stats->correct += f64(hits);
}

}  // namespace

at::Tensor head_logits(const at::Tensor& normed, const at::Tensor& head) {
  return at::linear(normed, head).to(at::kFloat);  // [B, n, V] fp32
}

void accumulate_answer_stats(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& mask,
                             AnswerStats* stats) {
  if (!mask.defined() || stats == nullptr) return;
  at::NoGradGuard no_grad;
  CategoryScope category(MemCategory::LossWorkspace);
  const int64_t V = logits.size(-1);
  at::Tensor rows = mask.reshape(-1).nonzero().squeeze(1);                     // [k] answer positions
  at::Tensor picked = logits.detach().reshape({-1, V}).index_select(0, rows);  // [k, V]
  at::Tensor target = labels.reshape(-1).index_select(0, rows);                // [k]
  at::Tensor ce = at::cross_entropy_loss(picked, target, {}, at::Reduction::Sum);
  at::Tensor hits = (picked.argmax(-1) == target).sum();
  add_answer_stats(stats, ce, rows.size(0), hits);
}

void accumulate_answer_rows(const at::Tensor& hidden, const at::Tensor& head, const at::Tensor& labels,
                            const at::Tensor& mask, const at::Tensor& token_ce, int64_t chunk_rows,
                            AnswerStats* stats) {
  if (!mask.defined() || stats == nullptr) return;
  if (chunk_rows <= 0) throw std::invalid_argument("answer statistics: chunk_rows = " + std::to_string(chunk_rows));
  at::NoGradGuard no_grad;
  CategoryScope category(MemCategory::LossWorkspace);
  const at::Tensor rows = mask.reshape(-1).nonzero().squeeze(1);       // [k] answer positions
  const at::Tensor target = labels.reshape(-1).index_select(0, rows);  // [k]
  const at::Tensor ce = token_ce.reshape(-1).index_select(0, rows).sum();
  at::Tensor hits = at::zeros({}, target.options());
  const int64_t k = rows.size(0);
  for (int64_t off = 0; off < k; off += chunk_rows) {
    const int64_t n = std::min(chunk_rows, k - off);
    // [n, V] in the hidden states' dtype: the argmax needs no fp32 copy (the conversion is monotonic)
    const at::Tensor logits = at::linear(hidden.index_select(0, rows.narrow(0, off, n)), head);
    hits += (logits.argmax(-1) == target.narrow(0, off, n)).sum();
  }
  add_answer_stats(stats, ce, k, hits);
}

LossOutputs tiled_loss_forward(const at::Tensor& normed, const at::Tensor& head, const at::Tensor& labels,
                               const at::Tensor& answer_mask, double scale, int64_t tile_tokens, AnswerStats* stats) {
  if (tile_tokens <= 0) throw std::invalid_argument("tiled loss: tile_tokens = " + std::to_string(tile_tokens));
  CategoryScope category(MemCategory::LossWorkspace);
  const int64_t s = normed.size(1), V = head.size(0);
  LossOutputs out;
  out.loss = at::zeros({}, normed.options().dtype(at::kFloat));            // scalar
  out.d_head = at::zeros(head.sizes(), head.options().dtype(at::kFloat));  // [V, d] fp32
  if (normed.is_cuda() && ops::cuda_kernels_linked()) {
    // The fused kernel (kernels/linear_cross_entropy.cu): the logits exist one fp32 [B*tile, V]
    // tile of whole rows at a time inside its workspace (the tile below, so the memory the loss
    // tile's rule sizes: pass 2 reads pass 1's logits, 3 head GEMMs), with their bf16 gradient,
    // and the head gradient accumulates straight into d_head. The tiles are
    // kernels::fused_loss_tiles', whose workspace the planner's GPU profile charges.
    const int64_t B = normed.size(0), d = normed.size(2);
    const at::Tensor h = normed.reshape({B * s, d});  // [T, d]
    const kernels::FusedLossTiles tiles = kernels::fused_loss_tiles(B, tile_tokens, V);
    // The labels were checked against the vocabulary when the data was read: no host sync here.
    const ops::LinearCrossEntropyResult r =
        ops::linear_cross_entropy(h, head, labels.reshape(-1), scale, &out.d_head, /*compute_dhidden=*/true,
                                  tiles.seq_tile, tiles.vocab_tile, /*check_labels=*/false);
    out.loss = r.loss.sum() * scale;     // scalar fp32
    out.dx = r.dhidden.view_as(normed);  // [B, s, d], already scaled
    // The accuracy shown: the kernel's per-token CE at the answers, their argmax chunk by chunk
    // (the long-range task asks S/8 answers: all at once, their [k, V] logits were larger than
    // everything else in the step).
    accumulate_answer_rows(h, head, labels, answer_mask, r.loss, kernels::fused_loss_answer_rows(B, tile_tokens, V),
                           stats);
    return out;
  }
  // Each tile's backward by hand, inside the forward: d logits = scale (softmax - onehot), written
  // over the log-probabilities (0 on ignored rows), then dx = d logits W and d_head += d logits^T x
  // in place (engine/layout/tile_grad_rules.h). Memory: two fp32 [B n, V] tiles at most (the
  // logits and their log-softmax), where autograd's tile held three, and no [V, d] per tile.
  at::NoGradGuard no_grad;
  const int64_t B = normed.size(0), d = normed.size(2);
  const bool fp32 = head.scalar_type() == at::kFloat;
  constexpr int64_t kIgnoredLabel = -100;  // at::cross_entropy_loss's ignore_index
  out.dx = at::empty_like(normed);         // [B, s, d]
  for (int64_t off = 0; off < s; off += tile_tokens) {
    const int64_t n = std::min(tile_tokens, s - off);
    const at::Tensor xt = normed.narrow(1, off, n).flatten(0, 1);       // [B n, d] (a view when B = 1)
    const at::Tensor labels_tile = labels.narrow(1, off, n).flatten();  // [B n]
    at::Tensor logits = head_logits(xt, head);                          // [B n, V] fp32: one tile only
    note_planned_buffer(PlannedBuffer::LossTileLogits32, logits);
    if (answer_mask.defined())
      accumulate_answer_stats(logits.view({B, n, V}), labels.narrow(1, off, n), answer_mask.narrow(1, off, n), stats);
    at::Tensor log_probs = at::log_softmax(logits, -1);  // [B n, V] fp32
    logits.reset();
    out.loss += at::nll_loss(log_probs, labels_tile, {}, at::Reduction::Sum, kIgnoredLabel) * scale;
    const at::Tensor kept_scale = labels_tile.ne(kIgnoredLabel).unsqueeze(1).to(at::kFloat) * scale;  // [B n, 1]
    at::Tensor d_logits = log_probs.exp_().mul_(kept_scale);  // scale softmax, in place; 0 on ignored rows
    log_probs.reset();
    d_logits.scatter_add_(1, labels_tile.clamp_min(0).unsqueeze(1), -kept_scale);  // - scale at each kept label
    if (!fp32) d_logits = d_logits.to(head.scalar_type());                         // [B n, V] in the compute dtype
    out.dx.narrow(1, off, n).copy_(at::mm(d_logits, head).view({B, n, d}));        // [B n, d]
    add_weight_grad_product(out.d_head, d_logits.t(), xt);                         // [V, d] += [V, B n] @ [B n, d]
  }
  return out;
}

TokenLosses token_losses_forward(const at::Tensor& normed, const at::Tensor& head, const at::Tensor& labels,
                                 int64_t tile_tokens) {
  constexpr int64_t kIgnoredLabel = -100;  // at::cross_entropy_loss's ignore_index
  at::NoGradGuard no_grad;
  CategoryScope category(MemCategory::LossWorkspace);
  const int64_t B = normed.size(0), s = normed.size(1), V = head.size(0);
  const int64_t tile = tile_tokens <= 0 ? s : std::min(tile_tokens, s);
  TokenLosses out;
  out.ce = at::empty({B, s}, normed.options().dtype(at::kFloat));     // [B, s] fp32
  out.argmax = at::empty({B, s}, normed.options().dtype(at::kLong));  // [B, s] int64
  for (int64_t off = 0; off < s; off += tile) {
    const int64_t n = std::min(tile, s - off);
    at::Tensor logits = head_logits(normed.narrow(1, off, n), head);  // [B, n, V] fp32: one tile only
    out.argmax.narrow(1, off, n).copy_(logits.argmax(-1));
    at::Tensor ce = at::cross_entropy_loss(logits.reshape({-1, V}), labels.narrow(1, off, n).reshape(-1), {},
                                           at::Reduction::None, kIgnoredLabel);  // [B n], 0 where ignored
    out.ce.narrow(1, off, n).copy_(ce.view({B, n}));
  }
  return out;
}

}  // namespace odyssey
