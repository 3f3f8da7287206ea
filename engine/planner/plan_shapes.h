// The per-rank sizes the planner works with (local tokens, head layout, stages, tiles, parameter
// groups) and the tensor kinds it allocates, each with its bytes and its formula in words.
// Internal to engine/planner. defines: PlanShapes, TensorKind, kind_bytes, kind_formula, make_shapes
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "engine/config/run_config.h"
#include "engine/layout/heads.h"
#include "engine/layout/planned_buffers.h"
#include "engine/layout/tiles.h"

namespace odyssey::planner_detail {

/// Every kind of tensor the step walk allocates. The bytes of one tensor of a kind are fixed by the
/// config (kind_bytes); kind_formula prints them with the values plugged in.
enum class TensorKind : uint8_t {
  // activations, local layout [B, s, ...]
  Hidden,          ///< [B, s, d] in the compute dtype: block input/output, norms, residuals
  RowStat,         ///< [B, s] fp32: an RMSNorm's saved 1/rms
  QLocal,          ///< [B, s, H*hd]
  KvLocal,         ///< [B, s, Hkv*hd]
  KvLocalRep,      ///< [B, s, max(Hkv, P)*hd]: K or V with KV heads replicated up to the degree
  // activations, head layout after the all-to-all [B, S, heads/P, hd]
  QHead,           ///< [B, S, H/P, hd]
  KvHead,          ///< [B, S, max(1, Hkv/P), hd]
  Lse,             ///< [B, H/P, S] fp32 log-sum-exp of flash attention
  DqAccum,         ///< [B, S, H/P, hd] fp32: flash-attention backward's dq accumulator (FA-2's padding)
  SoftmaxD,        ///< [B, H/P, S] fp32: FlashAttention-2 backward's softmax_d, rowsum(dO * O)
  GqaExpanded,     ///< [B, S, H/P, hd]: flash backward's dK or dV at query-head count (GQA)
  // Untied Ulysses: one stage of heads_per_stage query heads (heads_per_stage/P per rank)
  QStageLocal,     ///< [B, s, heads_per_stage*hd]
  KvStageLocal,    ///< [B, s, kv_heads_per_stage*P*hd]
  QStageHead,      ///< [B, S, heads_per_stage/P, hd]
  KvStageHead,     ///< [B, S, kv heads per rank per stage, hd]
  DqAccumStage,     ///< [B, S, hps/P, hd] fp32: flash backward's dq accumulator of one stage
  SoftmaxDStage,    ///< [B, hps/P, S] fp32: FlashAttention-2 backward's softmax_d of one stage
  QStageRows,       ///< [hps, hd, d]: the rows of wq one stage projects with (index_select; its backward keeps them)
  KvStageRows,      ///< [P*kv/stage, hd, d]: the rows of wk or wv of one KV range (its backward keeps them)
  KvStageGathered,  ///< [B, S, hps/P, hd]: a stage's K or V gathered to its query heads' KV slots (0 when none gathers)
  KvStageAccum32,   ///< [B, S, kv/stage, hd] fp32: dK or dV summed over the stages of a range (0 when none needs it)
  GqaExpandedStage,///< one stage's dK or dV at the stage's query-head count
  InputNormTile,   ///< [norm tile rows, d]: one row tile of the Untied input norm's backward (input_norm_tile_rows)
  InputNormTile32, ///< [norm tile rows, d] fp32: the Untied input norm's 1/rms pass, one row tile (off a GPU)
  CpuFlashScratch, ///< the CPU flash-attention backward's per-thread blocks (one thread): attn and
                   ///< grad_attn [q block, kv block] fp32 (+ compute-dtype copies below fp32)
  CpuFlashForwardScratch, ///< the CPU flash-attention forward's per-thread buffer (one thread): qk
                          ///< [q block, kv block], row max and sum, output accumulator [q block, hd],
                          ///< fp32 (+ a compute-dtype qk block below fp32)
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
  FusedLossWorkspace,  ///< the fused linear + cross-entropy kernel's workspace (GPU profiles)
  // step inputs
  TokenIds,        ///< [B, s] int64 (token ids, labels, positions)
  RopeTable,       ///< [B, s, hd] cos or sin in the compute dtype
  // parameters and their gradients
  MasterShards,    ///< fp32 master shards of every group
  GradShards,      ///< fp32 gradient shards
  AdamMoments,     ///< exp_avg + exp_avg_sq shards
  DeviceParamShards,  ///< every group's shard in the compute dtype on the device (optimizer offload)
  BlockFull,       ///< one block's unsharded compute-dtype buffer
  EmbedFull,       ///< the embedding's unsharded buffer
  HeadFull,        ///< the head group's unsharded buffer (final norm [+ LM head])
  BlockShardCast,  ///< a block shard cast to the compute dtype for the all-gather
  AttnOutGrad,     ///< [d, H*hd] compute dtype: the o_proj weight's gradient (the backward's first)
  AttnProjGrads,   ///< wq, wk, wv (+ q/k norm) weight gradients of one block (compute dtype)
  AttnProjGrads32, ///< the same in fp32: the Untied backward's sums over its stages
  AttnNormGrad,    ///< [d] compute dtype: the attention RMSNorm weight's gradient (the backward's last)
  MlpWeightGrad,   ///< [f, d] compute dtype: one MLP projection's weight gradient (gate, up or down)
  MlpNormGrad,     ///< [d] compute dtype: the MLP RMSNorm weight's gradient (the backward's last)
  MlpWeightTile,   ///< one [f, d] product of one tile before it is added (0 unless bf16 on the CPU)
  MlpGradAccum,    ///< 3 x [f, d] fp32: the tiled MLP's weight gradients summed over the tiles (0 with fp32 weights: the gradients)
  HeadWeightGrad,  ///< [V, d] LM-head weight gradient (compute dtype)
  HeadGradAccum,   ///< [V, d] fp32 LM-head gradient accumulated over loss tiles
  EmbedGradDense,  ///< [V, d] dense embedding gradient (compute dtype)
  BlockPack,       ///< fp32 [N_block] packed gradients for the reduce-scatter
  HeadPack,        ///< fp32 [N_head] packed gradients
  EmbedPack,       ///< fp32 [N_embed] packed gradients
  BlockShardOut,   ///< fp32 [N_block / W] reduce-scatter output before it is added into grad
  TiedGradBack,    ///< [N_embed / W] fp32: the tied embedding's first gradient back from the host (offload, GPU)
  OptimizerTemp,   ///< the offloaded upload's fp32 staging over the largest shard (GPU, compute dtype not fp32)
  BlasWorkspaces,  ///< one cuBLAS workspace (GPU; BlasWorkspaces in engine/layout/planned_buffers.h)
  RuntimeOverhead, ///< CUDA context, NCCL, fragmentation: outside the allocator (hardware profile)
  // host
  OffloadedInput,  ///< [B, s, d] checkpointed block input in the host pool (GPU: a pinned slab region)
  Count
};
constexpr int kTensorKindCount = static_cast<int>(TensorKind::Count);

/// The planner's byte ceiling: 4 EiB, millions of times any machine's memory. Every byte count
/// is computed with saturating arithmetic that stops here, so no product or sum of an absurd (but
/// validated) config overflows int64; a plan that reaches it is beyond range and never fits.
constexpr int64_t kPlanBytesLimit = int64_t{1} << 62;
/// a x b, or kPlanBytesLimit when the product passes it (operands are non-negative).
inline int64_t sat_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) || out > kPlanBytesLimit ? kPlanBytesLimit : out;
}
/// The product of every factor, saturated as sat_mul.
inline int64_t sat_product(std::initializer_list<int64_t> factors) {
  int64_t out = 1;
  for (int64_t f : factors) out = sat_mul(out, f);
  return out;
}
/// a + b, or kPlanBytesLimit when the sum passes it (operands are non-negative).
inline int64_t sat_add(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) || out > kPlanBytesLimit ? kPlanBytesLimit : out;
}

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
  bool offload_optimizer = false;  ///< master, gradient and moment shards in the host pool
  /// memory.keep_attention under checkpointing: each block's attention output and LSE kept from
  /// its forward; the recompute runs no attention kernel (Untied: no stage at all)
  bool keep_attention = false;
  /// Document masking with a known length profile: the fraction of whole-sequence causal attention
  /// pairs the documents compute (DocumentLengthProfile::attention_fraction at S); 1 otherwise
  double attention_pair_fraction = 1.0;
  // the Untied stage schedule's names (UntiedStagePlan, engine/layout/heads.h); without Untied
  // Ulysses one stage of all the rank's heads
  int64_t k = 0;             ///< query heads per rank per stage (heads_per_stage / P; hq without Untied)
  int64_t stages = 1;        ///< hq / k
  int64_t max_kv_count = 0;  ///< KV heads per rank per stage: the widest range a stage reads (hkv without Untied)
  UntiedStageBuffers untied_buffers;  ///< the Untied Function's buffers (engine/layout/heads.h), elements
  SequenceTile mlp_tile, loss_tile;  ///< [B, n, f] and [B, n, V] tiles (engine/layout/tiles.h)
  int64_t norm_tile_rows = 0;        ///< the Untied input norm's row tiles (input_norm_tile_rows)
  int64_t fused_seq_tile = 0, fused_vocab_tile = 0;  ///< the fused loss kernel's tiles (GPU profiles)
  int64_t cpu_q_block = 0, cpu_kv_block = 0;  ///< the CPU flash kernel's blocks for a query length S
  /// FlashAttention-2's backward pads its own fp32 buffers (mha_bwd's seqlen_q_rounded and
  /// head_size_rounded): the query length to a multiple of 128, the head dim to one of 32 (256
  /// past 192). Equal to S and hd for every real model at lengths in steps of 1K.
  int64_t fa2_seq = 0, fa2_head_dim = 0;
  // parameters per group (elements) and their layout over the ranks
  int64_t n_block = 0, n_embed = 0, n_head = 0;
  int64_t n_attn_proj = 0;  ///< wq, wk, wv (+ q/k norm): the attention's weights less wo and its norm
  FlatShardLayout block_layout, embed_layout, head_layout;  ///< each group over the ranks (engine/layout/planned_buffers.h)
  bool gathers = true;   ///< unshard() allocates a compute-dtype buffer (false: resident, keeps_gathered_copy)
  // hardware
  bool cuda_target = true;  ///< the run takes the engine's CUDA path (runs_cuda_path)
  int64_t runtime_overhead = 0;
  int64_t ranks_per_node = 1;
  /// Bytes of one tensor of each kind, filled by make_shapes (the walk's inner loop reads these).
  int64_t bytes[kTensorKindCount] = {};
  /// A kind's bytes reached kPlanBytesLimit: the plan is beyond range (and never fits).
  bool beyond_range = false;
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
