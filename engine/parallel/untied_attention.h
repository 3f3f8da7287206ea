// Untied Ulysses: attention in stages of heads_per_stage query heads (heads_per_stage/P per rank),
// one custom autograd Function whose workspace is one stage's buffers instead of all local heads.
// defines: UntiedStagePlan, plan_untied_stages, untied_attention, untied_attention_projected,
//          untied_rope_pack, force_untied_rope_pack
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/ulysses.h"

namespace odyssey {

/// The head schedule. Rank r holds, after the all-to-all, query heads [r*Hl, (r+1)*Hl) (Hl = H/P,
/// exactly plain Ulysses' assignment, so weights need no permutation); stage t covers local query
/// heads [t*k, (t+1)*k) on every rank (k = heads_per_stage / P). KV heads (replicated to
/// Hkv' = max(Hkv, P) when Hkv < P) are assigned the same way: Hkvl = Hkv'/P local KV heads, local
/// query head j reads local KV head j / g (g = Hl / Hkvl). A stage reads the local KV range
/// [kv_first, kv_first + kv_count); consecutive stages with the same range reuse the KV sent once.
struct UntiedStagePlan {
  int64_t P = 1, H = 1, Hkv = 1, hd = 1;
  int64_t Hl = 1;      ///< query heads per rank (H / P)
  int64_t k = 1;       ///< query heads per rank per stage (heads_per_stage / P)
  int64_t stages = 1;  ///< Hl / k
  int64_t rep = 1;     ///< KV replication factor (P / Hkv when Hkv < P)
  int64_t Hkvl = 1;    ///< KV heads per rank after replication
  int64_t g = 1;       ///< query heads per KV head
  std::vector<int64_t> kv_first, kv_count;  ///< per stage: local KV range
  std::vector<bool> kv_new;                 ///< per stage: a new KV range starts (project + all-to-all)
  int64_t max_kv_count = 1;
};

/// Validates (validate.cpp's rule: heads_per_stage a multiple of P whose per-rank share divides
/// H/P; H % P == 0; Hkv % P == 0 or P % Hkv == 0) and builds the schedule. heads_per_stage 0 means
/// P (one head per rank per stage). Throws std::invalid_argument naming the values.
UntiedStagePlan plan_untied_stages(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t degree,
                                   int64_t heads_per_stage);

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

/// The same with the output projection w.wo: [B, s, d], what the decoder block uses. With a graph
/// to record, the projection is inside the Function, so its backward takes dh [B, s, d] and
/// builds each stage's d o slice as dh x (the stage's wo columns): the whole d o [B, s, H*hd]
/// that a separate o_proj would hand back is never allocated (memory: one [s, d] less at the
/// attention-backward peak). Without a graph, x is released before the projection (pass it by
/// std::move).
at::Tensor untied_attention_projected(at::Tensor x, const AttentionWeights& w, const Positions& pos,
                                      const ModelConfig& model, const RankContext& ctx, const MemoryConfig& memory);

/// Whether Q and K reach the head layout through ops::rope_pack (RoPE written straight into the
/// all-to-all send buffer): on CUDA tensors with the kernels linked; `force_untied_rope_pack(true)`
/// takes that path on CPU tensors too (LibTorch's rope_pack), so tests cover it without a GPU.
bool untied_rope_pack(const at::Tensor& x);
void force_untied_rope_pack(bool on);

}  // namespace odyssey
