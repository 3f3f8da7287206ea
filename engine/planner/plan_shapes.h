// The per-rank sizes the planner works with (local tokens, head layout, stages, tiles, parameter
// groups) and the tensor kinds it allocates, each with its bytes and its formula in words.
// Internal to engine/planner. defines: PlanShapes, TensorKind, kind_bytes, kind_formula, make_shapes
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/run_config.h"

namespace odyssey::planner_detail {

/// Bytes of LibTorch's CPU generator state (mt19937 + normal cache), which checkpointing saves per
/// block; a CPU tensor, so it is device memory only on CPU runs.
constexpr int64_t kCpuGeneratorStateBytes = 5056;

/// Every kind of tensor the step walk allocates. The bytes of one tensor of a kind are fixed by the
/// config (kind_bytes); kind_formula prints them with the values plugged in.
enum class TensorKind : uint8_t {
  // activations, local layout [B, s, ...]
  Hidden,          ///< [B, s, d] in the compute dtype: block input/output, norms, residuals
  Hidden32,        ///< [B, s, d] fp32: RMSNorm backward's temporaries (CPU formula)
  RowStat,         ///< [B, s] fp32: an RMSNorm's saved 1/rms
  QLocal,          ///< [B, s, H*hd]
  KvLocal,         ///< [B, s, Hkv*hd]
  KvLocalRep,      ///< [B, s, max(Hkv, P)*hd]: K or V with KV heads replicated up to the degree
  // activations, head layout after the all-to-all [B, S, heads/P, hd]
  QHead,           ///< [B, S, H/P, hd]
  KvHead,          ///< [B, S, max(1, Hkv/P), hd]
  Lse,             ///< [B, H/P, S] fp32 log-sum-exp of flash attention
  DqAccum,         ///< [B, S, H/P, hd] fp32: flash-attention backward's dq accumulator
  GqaExpanded,     ///< [B, S, H/P, hd]: flash backward's dK or dV at query-head count (GQA)
  FlashFwdScratch, ///< CPU flash forward's per-thread fp32 blocks (one intra-op thread); 0 on GPUs
  FlashBwdScratch, ///< CPU flash backward's per-thread fp32 blocks (one intra-op thread); 0 on GPUs
  // Untied Ulysses: one stage of heads_per_stage query heads (heads_per_stage/P per rank)
  QStageLocal,     ///< [B, s, heads_per_stage*hd]
  KvStageLocal,    ///< [B, s, P*n*hd]: one KV range (n KV heads per rank) before its all-to-all
  QStageHead,      ///< [B, S, heads_per_stage/P, hd]
  KvStageHead,     ///< [B, S, n, hd]: one KV range in the head layout
  KvStageHead32,   ///< [B, S, n, hd] fp32: dK/dV accumulator of a range spanning several stages
  DqAccumStage,    ///< fp32 dq accumulator of one stage (GPU flash)
  UntiedStaging,   ///< [P, B, s, max(k, n), hd]: the all-to-all staging buffer every stage reuses
  UntiedLocFlat,   ///< [B, s, P*n, hd]: local-layout K/V gradient buffer when n > k (else o_h's)
  UntiedQRows,     ///< [P*k*hd, d]: the stage's Q weight rows (index_select) or their gradient
  UntiedKvRows,    ///< [P*n*hd, d]: the range's K or V weight rows or their gradient
  UntiedWqAccum,   ///< [H*hd, d] fp32 accumulator of Wq's gradient
  UntiedWkvAccum,  ///< [Hkv*hd, d] fp32 accumulator of Wk's or Wv's gradient
  // MLP
  Ffn,             ///< [B, s, f]
  FfnTile,         ///< [tile, f]
  HiddenTile,      ///< [tile, d]
  // loss
  Logits,          ///< [B, s, V] compute dtype
  Logits32,        ///< [B, s, V] fp32
  LogitsTile,      ///< [loss_tile, V] compute dtype
  LogitsTile32,    ///< [loss_tile, V] fp32
  HiddenLossTile,  ///< [loss_tile, d]
  // step inputs
  TokenIds,        ///< [B, s] int64 (token ids, labels)
  PositionIds,     ///< [s] int64 global positions
  AnswerMask,      ///< [B, s] bool (long-range task)
  RopeTable,       ///< [s, hd/2] fp32 cos or sin
  CkptRngState,    ///< CPU generator state saved per checkpointed block (device pool on CPU runs only)
  // parameters and their gradients
  MasterShards,    ///< fp32 master shards of every group
  GradShards,      ///< fp32 gradient shards
  AdamMoments,     ///< exp_avg + exp_avg_sq shards
  BlockFull,       ///< one block's unsharded compute-dtype buffer
  EmbedFull,       ///< the embedding's unsharded buffer
  HeadFull,        ///< the head group's unsharded buffer (final norm [+ LM head])
  BlockShardCast,  ///< a block shard cast to the compute dtype for the all-gather
  WoGrad,          ///< [d, H*hd] o_proj weight gradient (compute dtype)
  WqGrad,          ///< [H*hd, d] q-projection weight gradient
  WkvGrad,         ///< [Hkv*hd, d] k- or v-projection weight gradient
  NormGrad,        ///< [d] RMSNorm weight gradient
  HeadNormGrad,    ///< [hd] q/k head-norm weight gradient (qk-norm)
  MlpWeightTile,   ///< one [f, d] MLP weight gradient (of the block, or of one tile)
  MlpWeightAccum32,///< [f, d] fp32 accumulator of a tiled MLP weight gradient (compute dtype not fp32)
  HeadWeightGrad,  ///< [V, d] LM-head weight gradient (compute dtype)
  HeadGradAccum,   ///< [V, d] fp32 LM-head gradient accumulated over loss tiles
  EmbedGradDense,  ///< fp32 [N_embed padded] dense embedding gradient (index_add_ target)
  BlockPack,       ///< fp32 [N_block padded] packed gradients for the reduce-scatter
  HeadPack,        ///< fp32 [N_head padded] packed gradients (tied: the final norm only)
  TiedEmbedPack,   ///< fp32 [N_embed padded] packed LM-head gradient of tied embeddings
  BlockShardOut,   ///< fp32 [N_block / W] reduce-scatter output before it is added into grad
  EmbedShardOut,   ///< fp32 [N_embed / W] reduce-scatter output (FSDP)
  HeadShardOut,    ///< fp32 [N_head / W] reduce-scatter output (FSDP)
  OptimizerTemp,   ///< fp32 AdamW denominator over the largest shard
  RuntimeOverhead, ///< CUDA context, NCCL, cuBLAS workspace, fragmentation (hardware profile)
  // host
  OffloadedInput,  ///< [B, s, d] checkpointed block input in the host pool
  PinnedStaging,   ///< [B, s, d] pinned transfer slot (D2H in forward, H2D prefetch in backward)
  Count
};
constexpr int kTensorKindCount = static_cast<int>(TensorKind::Count);

/// Per-rank sizes of one config. All counts are elements unless named *_bytes.
struct PlanShapes {
  // model
  int64_t L = 0, d = 0, H = 0, Hkv = 0, hd = 0, q_dim = 0, kv_dim = 0, f = 0, V = 0;
  bool qk_norm = false, tied = false;
  // step and parallelism
  int64_t B = 0, S = 0, P = 1, W = 1, c = 4;  ///< c: compute dtype bytes
  bool fsdp = false;
  int64_t s = 0;         ///< local tokens per sequence, S / P
  int64_t t = 0;         ///< local tokens per rank, B * s
  int64_t Th = 0;        ///< tokens in the head layout, B * S
  int64_t hq = 0;        ///< query heads per rank in the head layout, H / P
  int64_t hkv_rep = 0;   ///< KV heads after replication to the degree, max(Hkv, P)
  int64_t hkv = 0;       ///< KV heads per rank in the head layout, hkv_rep / P
  // techniques
  bool ckpt = false, offload = false, tiled_mlp = false, tiled_loss = false, untied = false;
  int64_t hps = 0;       ///< query heads per stage over all ranks
  int64_t hs = 0;        ///< query heads per rank per stage, hps / P
  int64_t stages = 1;    ///< hq / hs
  int64_t khs = 0;       ///< KV heads per rank of one KV range (the engine's max_kv_count)
  int64_t stages_per_range = 1;  ///< Untied stages sharing one KV range (projected and sent once)
  bool kv_direct = true;  ///< each KV range is one stage: no dK/dV accumulators
  bool kv_straddle = false;  ///< stages straddle GQA groups: K/V gathered to the stage's query heads
  int64_t qsplit = 0, kvsplit = 0;  ///< CPU flash kernel block sizes for sequence S
  int64_t mlp_tile = 0, mlp_tiles = 1, loss_tile = 0, loss_tiles = 1;
  // parameters per group and their shards (elements)
  int64_t n_block = 0, n_embed = 0, n_head = 0, n_attn = 0, n_mlp = 0;
  int64_t shard_block = 0, shard_embed = 0, shard_head = 0;
  int64_t shard_ways = 1;  ///< W with FSDP, else 1 (groups are padded to a multiple of it)
  bool gathers = true;   ///< unshard() allocates a compute-dtype buffer (false: fp32 without FSDP)
  // hardware
  bool cuda_target = true;  ///< the hardware profile is a GPU (pinned staging, GPU flash kernels)
  bool long_range = false;  ///< the long-range task (an answer mask per token)
  int64_t runtime_overhead = 0;
  int64_t ranks_per_node = 1;
  /// Bytes of one tensor of each kind, filled by make_shapes (the walk's inner loop reads these).
  int64_t bytes[kTensorKindCount] = {};
};

/// Derives the shapes of a (valid) config.
PlanShapes make_shapes(const RunConfig& cfg);

/// Bytes of one tensor of `kind`.
inline int64_t kind_bytes(TensorKind kind, const PlanShapes& s) { return s.bytes[static_cast<int>(kind)]; }

/// The formula of one tensor of `kind` with the values plugged in: "1 x 384K tok x 4096 x 2 B".
std::string kind_formula(TensorKind kind, const PlanShapes& s);

/// "[B, s, d]"-style shape description of a kind (for the docs and terms).
const char* kind_shape(TensorKind kind);

}  // namespace odyssey::planner_detail
