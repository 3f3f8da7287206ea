// The attention seam and its single-rank path; Ulysses (sp_size > 1) and Untied Ulysses head
// stages dispatch to engine/parallel. defines: attention, attention_local
#include "engine/model/attention.h"

#include <stdexcept>
#include <string>

#include "engine/parallel/kept_attention.h"
#include "engine/parallel/ulysses.h"
#include "engine/parallel/untied_attention.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

at::Tensor attention(const at::Tensor& x, const at::Tensor& norm_weight, const AttentionWeights& w,
                     const Positions& pos, const ModelConfig& model, const RankContext& ctx, const MemoryStack& stack) {
  CategoryScope category(MemCategory::AttentionWorkspace);
  // engine/parallel (docs/parallel.md): Untied Ulysses runs its head stages for any degree (with
  // P = 1 it is head chunking on one rank: one stage's workspace instead of all heads), the norm
  // folded into its projections; plain Ulysses for P > 1.
  if (stack.untied_attention)
    return untied_attention_projected(x, norm_weight, w, pos, model, ctx, stack.memory);  // [B, s, d]
  at::Tensor normed = rms_norm(x, norm_weight, model.norm_eps);                           // [B, s, d]
  if (stack.sequence_degree == 1) return attention_local(std::move(normed), w, pos, model);
  return at::linear(ulysses_attention(std::move(normed), w, pos, model, ctx), w.wo);  // [B, s, d]
}

at::Tensor attention_local(at::Tensor x, const AttentionWeights& w, const Positions& pos, const ModelConfig& model) {
  CategoryScope category(MemCategory::AttentionWorkspace);
  const int64_t B = x.size(0), s = x.size(1), H = model.n_heads, hd = model.head_dim;
  auto [q, k, v] = project_qkv(x, w, pos, model);
  q = q.transpose(1, 2);  // [B, H, s, hd]
  k = k.transpose(1, 2);  // [B, Hkv, s, hd]
  v = v.transpose(1, 2);  // [B, Hkv, s, hd]
  // SDPA, or the kept result of a checkpointed forward (memory.keep_attention: kept_attention.h).
  // Memory: GQA without expanding K/V to H heads, so K/V stay [B, Hkv, s, hd].
  at::Tensor o = causal_attention(q, k, v, pos.documents);  // [B, H, s, hd]
  // Memory: q, k, v die here unless autograd saved them (the planner's walk frees them before the
  // output's layout copy on the CPU, BlockHalves::attention_forward)
  q.reset();
  k.reset();
  v.reset();
  return at::linear(o.transpose(1, 2).reshape({B, s, H * hd}), w.wo);  // [B, s, d]
}

}  // namespace odyssey
