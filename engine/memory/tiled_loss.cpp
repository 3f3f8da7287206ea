// Tiled LM head + cross-entropy with the backward inside the forward (see tiled_loss.h).
// defines: head_logits, accumulate_answer_stats, tiled_loss_forward
#include "engine/memory/tiled_loss.h"

#include <stdexcept>
#include <string>

#include <torch/autograd.h>

#include "engine/model/layers.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

at::Tensor head_logits(const at::Tensor& normed, const at::Tensor& head) {
  return at::linear(normed, head).to(at::kFloat);  // [B, n, V] fp32
}

void accumulate_answer_stats(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& mask,
                             AnswerStats* stats) {
  if (!mask.defined() || stats == nullptr) return;
  at::NoGradGuard no_grad;
  CategoryScope category(MemCategory::LossWorkspace);
  const int64_t V = logits.size(-1);
  at::Tensor rows = mask.reshape(-1).nonzero().squeeze(1);                 // [k] answer positions
  at::Tensor picked = logits.detach().reshape({-1, V}).index_select(0, rows);  // [k, V]
  at::Tensor target = labels.reshape(-1).index_select(0, rows);             // [k]
  at::Tensor ce = at::cross_entropy_loss(picked, target, {}, at::Reduction::Sum);
  at::Tensor hits = (picked.argmax(-1) == target).sum();
  auto f64 = [](const at::Tensor& t) { return t.to(at::kDouble).cpu(); };
  if (!stats->ce_sum.defined()) {
    stats->ce_sum = at::zeros({}, at::kDouble);
    stats->count = at::zeros({}, at::kDouble);
    stats->correct = at::zeros({}, at::kDouble);
  }
  stats->ce_sum += f64(ce);
  stats->count += static_cast<double>(rows.size(0));
  stats->correct += f64(hits);
}

LossOutputs tiled_loss_forward(const at::Tensor& normed, const at::Tensor& head, const at::Tensor& labels,
                               const at::Tensor& answer_mask, double scale, int64_t tile_tokens, AnswerStats* stats) {
  if (tile_tokens <= 0) throw std::invalid_argument("tiled loss: tile_tokens = " + std::to_string(tile_tokens));
  CategoryScope category(MemCategory::LossWorkspace);
  const int64_t s = normed.size(1), V = head.size(0);
  LossOutputs out;
  out.loss = at::zeros({}, normed.options().dtype(at::kFloat));                // scalar
  out.dx = at::empty_like(normed);                                             // [B, s, d]
  out.d_head = at::zeros(head.sizes(), head.options().dtype(at::kFloat));      // [V, d] fp32
  at::Tensor head_leaf = head.detach().requires_grad_(true);
  for (int64_t off = 0; off < s; off += tile_tokens) {
    const int64_t n = std::min(tile_tokens, s - off);
    at::AutoGradMode enable_grad(true);  // backward inside forward
    at::Tensor x_tile = normed.narrow(1, off, n).detach().requires_grad_(true);  // [B, n, d]
    at::Tensor labels_tile = labels.narrow(1, off, n);                             // [B, n]
    at::Tensor logits = head_logits(x_tile, head_leaf);  // [B, n, V] fp32: one tile only
    at::Tensor loss_tile =
        at::cross_entropy_loss(logits.reshape({-1, V}), labels_tile.reshape(-1), {}, at::Reduction::Sum) * scale;
    if (answer_mask.defined()) accumulate_answer_stats(logits, labels_tile, answer_mask.narrow(1, off, n), stats);
    auto grads = torch::autograd::grad({loss_tile}, {x_tile, head_leaf});
    at::NoGradGuard no_grad;
    out.loss += loss_tile.detach();
    out.dx.narrow(1, off, n).copy_(grads[0]);
    out.d_head += grads[1];
  }
  return out;
}

}  // namespace odyssey
