// Untied Ulysses: attention in stages of heads_per_stage query heads (heads_per_stage/P per rank),
// one custom autograd Function whose workspace is one stage's buffers instead of all local heads.
// defines: untied_attention, untied_attention_projected, untied_rope_pack, force_untied_rope_pack
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/layout/heads.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/ulysses.h"

namespace odyssey {

/// The stage schedule (UntiedStagePlan, plan_untied_stages) and the buffers it needs live in
/// engine/layout/heads.h, shared with the validator and the planner.

/// Untied Ulysses attention of the normed block input x [B, s, d] (local tokens with global
/// positions `pos`; w.wo is not used): per stage, project only the stage's Q rows (and K/V rows when its KV range
/// is new), QK-norm, RoPE, all-to-all into preallocated stage buffers, fused causal attention
/// returning the log-sum-exp, all-to-all back into the preallocated output. Saves x, the weights,
/// the output and one LSE per stage; backward recomputes the projections and input all-to-alls per
/// stage and runs the fused attention backward from the saved output and LSE (no second attention
/// forward). Returns the output BEFORE the output projection: [B, s, H*hd]. Works for P = 1 (head
/// chunking on one rank). The stage size comes from memory.heads_per_stage.
at::Tensor untied_attention(const at::Tensor& x, const AttentionWeights& w, const Positions& pos,
                            const ModelConfig& model, const RankContext& ctx, const MemoryConfig& memory);

/// The same with the attention's RMSNorm and the output projection w.wo: [B, s, d], what the
/// decoder block uses. x is the block input and norm_weight [d] its RMSNorm's weight (undefined: x
/// is already normed); the norm is folded into the projections (rmsnorm(x) @ W^T = (x @ (W * w)^T)
/// * rstd), so the normed input is never made (memory: one [s, d] less from the forward to the end
/// of the attention backward, where the norm's backward runs in row tiles over the input gradient).
/// With a graph to record, the projection is inside the Function, so its backward takes dh
/// [B, s, d] and builds each stage's d o slice as dh x (the stage's wo columns): the whole d o
/// [B, s, H*hd] that a separate o_proj would hand back is never allocated (memory: one [s, d] less
/// at the attention-backward peak). Without a graph, x is released before the projection (pass it
/// by std::move).
at::Tensor untied_attention_projected(at::Tensor x, const at::Tensor& norm_weight, const AttentionWeights& w,
                                      const Positions& pos, const ModelConfig& model, const RankContext& ctx,
                                      const MemoryConfig& memory);

/// Whether Q and K reach the head layout through ops::rope_pack (RoPE written straight into the
/// all-to-all send buffer): on CUDA tensors with the kernels linked; `force_untied_rope_pack(true)`
/// takes that path on CPU tensors too (LibTorch's rope_pack), so tests cover it without a GPU.
bool untied_rope_pack(const at::Tensor& x);
void force_untied_rope_pack(bool on);

}  // namespace odyssey
