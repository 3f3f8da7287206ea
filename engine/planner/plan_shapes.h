// The per-rank sizes the planner works with (local tokens, head layout, stages, tiles, parameter
// groups) and the tensor kinds it allocates, each one rule with its shape, bytes and formula in
// words (the rules: tensor_kinds.cpp). Internal to engine/planner. defines: PlanShapes, TensorKind,
// TensorKindRule, tensor_kind_rule, make_shapes, kind_bytes, kind_formula, kind_shape
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/run_config.h"
#include "engine/layout/heads.h"
#include "engine/layout/planned_buffers.h"
#include "engine/layout/saturating_bytes.h"
#include "engine/layout/tiles.h"

namespace odyssey::planner_detail {

// the saturating byte arithmetic every planner count uses (engine/layout/saturating_bytes.h)
using ::odyssey::kPlanBytesLimit;
using ::odyssey::sat_add;
using ::odyssey::sat_mul;
using ::odyssey::sat_product;

/// Every kind of tensor the step walk allocates. What each kind is, its shape, its bytes (fixed by
/// the config: kind_bytes) and its formula with the values plugged in (kind_formula) are its rule,
/// kTensorKindRules in tensor_kinds.cpp: one rule a kind, in this order (checked at compile time).
enum class TensorKind : uint8_t {
  // activations, local layout [B, s, ...]
  Hidden,
  RowStat,
  QLocal,
  KvLocal,
  KvLocalRep,
  // activations, head layout after the all-to-all [B, S, heads/P, hd]
  QHead,
  KvHead,
  Lse,
  DqAccum,
  SoftmaxD,
  GqaExpanded,
  // Untied Ulysses: one stage of heads_per_stage query heads (heads_per_stage/P per rank)
  QStageLocal,
  KvStageLocal,
  QStageHead,
  KvStageHead,
  DqAccumStage,
  SoftmaxDStage,
  QStageRows,
  KvStageRows,
  KvStageGathered,
  KvStageAccum32,
  StageStaging,
  GqaExpandedStage,
  InputNormTile,
  InputNormTile32,
  // document masking: one segment's kernel results before they are copied into the whole tensors
  QSegment,
  KvSegment,
  LseSegment,
  QStageSegment,
  KvStageSegment,
  LseStageSegment,
  // the CPU flash-attention kernel's per-thread scratch
  CpuFlashScratch,
  CpuFlashForwardScratch,
  // MLP
  Ffn,
  FfnTile,
  HiddenTile,
  // loss
  Logits,
  Logits32,
  LogitsTile,
  LogitsTile32,
  HiddenLossTile,
  FusedLossWorkspace,
  // step inputs
  TokenIds,
  PositionIds,
  RopeTable,
  // parameters and their gradients
  MasterShards,
  GradShards,
  AdamMoments,
  DeviceParamShards,
  BlockFull,
  EmbedFull,
  HeadFull,
  BlockShardCast,
  EmbedShardCast,
  HeadShardCast,
  AttnOutGrad,
  AttnProjGrads,
  AttnProjGrads32,
  AttnNormGrad,
  MlpWeightGrad,
  MlpNormGrad,
  MlpWeightTile,
  MlpGradAccum,
  HeadWeightGrad,
  HeadGradAccum,
  EmbedGradDense,
  EmbedGradRows32,
  BlockPack,
  HeadPack,
  EmbedPack,
  BlockShardOut,
  EmbedShardOut,
  HeadShardOut,
  TiedGradBack,
  OptimizerTemp,
  BlasWorkspaces,
  RuntimeOverhead,
  KeptAttentionPayload,
  // host
  OffloadedInput,
  OffloadedKeptAttention,
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
  int64_t s = 0;               ///< local tokens per sequence, S / P
  int64_t t = 0;               ///< local tokens per rank, B * s
  int64_t Th = 0;              ///< tokens in the head layout, B * S
  int64_t hq = 0;              ///< query heads per rank in the head layout, H / P
  bool kv_replicated = false;  ///< Hkv < P: KV heads replicated to the degree (ulysses_kv_heads)
  int64_t hkv_rep = 0;         ///< KV heads after replication to the degree (Hkv, or P when fewer)
  int64_t hkv = 0;             ///< KV heads per rank in the head layout, hkv_rep / P
  // techniques
  bool ckpt = false, offload = false, tiled_mlp = false, tiled_loss = false, untied = false;
  bool offload_optimizer = false;  ///< master, gradient and moment shards in the host pool
  /// memory.keep_attention under checkpointing: each block's attention output and LSE kept from
  /// its forward; the recompute runs no attention kernel (Untied: no stage at all)
  bool keep_attention = false;
  /// memory.keep_attention_blocks: which blocks keep (the top ones; every block at 0), and how
  /// many (0 without kept attention): the others recompute their attention
  KeptAttentionBlocks kept;
  int64_t kept_count = 0;
  /// memory.offload_kept_attention (with kept attention and offload): the keeping blocks but the
  /// last send their kept attention to the host packed into one buffer (KeptAttentionPayload), and it comes back
  /// one block ahead of their backward (kept_attention_offloaded_blocks)
  bool offload_kept = false;
  /// Document masking with a known length profile: the fraction of whole-sequence causal attention
  /// pairs the documents compute (DocumentLengthProfile::attention_fraction at S); 1 otherwise
  double attention_pair_fraction = 1.0;
  /// training.document_mask: attention runs one kernel call per document segment of each row
  /// (engine/parallel/flash_attention.cpp), one segment's results beside the whole tensors at a time
  bool documents = false;
  /// rows of the RoPE positions and tables: 1, or B where positions restart in each document
  /// (rope_position_rows, engine/layout/documents.h)
  int64_t rope_rows = 1;
  /// documents run one kernel call per segment (the CPU, CUDA fp32), each segment's results beside
  /// the whole tensors; false where one variable-length call runs them all (documents_run_varlen,
  /// engine/layout/attention_kernels.h: CUDA half precision)
  bool segment_calls = false;
  /// The query length of the longest attention kernel call: S, or under document masking the
  /// longest segment (longest_attention_segment, engine/layout/documents.h: the longest document
  /// of the length profile, at most S; S without a profile)
  int64_t kernel_seq = 0;
  /// The kernel of the paths that need attention's log-sum-exp (Untied stages, kept attention,
  /// packed documents): lse_attention_kernel's answer for the run (engine/layout/attention_kernels.h).
  /// Its backward buffers are planned as FlashAttention-2's on every CUDA kernel (cuDNN's
  /// workspace is its own: flash_backward_buffers).
  LseKernel lse_kernel = LseKernel::CpuFlash;
  /// Standard attention runs lse_kernel too, not SDPA: SDPA has only its math backend for the call
  /// (sdpa_has_only_math: CUDA fp32 with fewer KV than query heads per rank)
  bool standard_on_lse_kernel = false;
  // the Untied stage schedule's names (UntiedStagePlan, engine/layout/heads.h); without Untied
  // Ulysses one stage of all the rank's heads
  int64_t k = 0;             ///< query heads per rank per stage (heads_per_stage / P; hq without Untied)
  int64_t stages = 1;        ///< hq / k
  int64_t max_kv_count = 0;  ///< KV heads per rank per stage: the widest range a stage reads (hkv without Untied)
  UntiedStageBuffers untied_buffers;  ///< the Untied Function's buffers (engine/layout/heads.h), elements
  /// the Untied backward's fp32 dK/dV accumulators' traffic, bytes a local token
  /// (untied_kv_accumulator_token_bytes, engine/layout/block_traffic.h); 0 without them
  double untied_kv_accum_token_bytes = 0;
  SequenceTile mlp_tile, loss_tile;                  ///< [B, n, f] and [B, n, V] tiles (engine/layout/tiles.h)
  int64_t norm_tile_rows = 0;                        ///< the Untied input norm's row tiles (input_norm_tile_rows)
  int64_t fused_seq_tile = 0, fused_vocab_tile = 0;  ///< the fused loss kernel's tiles (GPU profiles)
  int64_t fused_vocab_tiles = 1;                     ///< how many vocabulary tiles it runs (LceTilePlan)
  /// the fused loss kernel's own plan of its workspace for those tiles; kPlanBytesLimit when the
  /// kernel refuses the shape (beyond range: the GPU run would refuse it too)
  int64_t fused_loss_workspace_bytes = 0;
  int64_t cpu_q_block = 0, cpu_kv_block = 0;  ///< the CPU flash kernel's blocks for a query length kernel_seq
  /// FlashAttention-2's backward pads its own fp32 buffers (mha_bwd's seqlen_q_rounded and
  /// head_size_rounded): the query length to a multiple of 128, the head dim to one of 32 (256
  /// past 192). Equal to S and hd for every real model at lengths in steps of 1K.
  int64_t fa2_seq = 0, fa2_head_dim = 0;
  // parameters per group (elements) and their layout over the ranks
  int64_t n_block = 0, n_embed = 0, n_head = 0;
  int64_t n_attn_proj = 0;  ///< wq, wk, wv (+ q/k norm): the attention's weights less wo and its norm
  FlatShardLayout block_layout, embed_layout,
      head_layout;      ///< each group over the ranks (engine/layout/planned_buffers.h)
  bool gathers = true;  ///< unshard() allocates a compute-dtype buffer (false: resident, keeps_gathered_copy)
  // hardware
  bool cuda_target = true;  ///< the run takes the engine's CUDA path (runs_cuda_path)
  /// FSDP on that path: a block's reduce-scatter finishes under the next block's backward
  /// (defers_block_reduce_scatter, engine/layout/schedule_rules.h)
  bool defers_block_reduce_scatter = false;
  int64_t runtime_overhead = 0;
  int64_t ranks_per_node = 1;
  /// Bytes of one tensor of each kind, filled by make_shapes from the kinds' rules once the sizes
  /// above are derived (the walk's inner loop reads these).
  int64_t bytes[kTensorKindCount] = {};
  /// A kind's bytes reached kPlanBytesLimit: the plan is beyond range (and never fits).
  bool beyond_range = false;
};

/// One tensor kind, defined in one place: what it is, its shape, and its bytes and formula read
/// from the derived sizes. docs/planner.md's table of tensor kinds prints name, shape and meaning.
struct TensorKindRule {
  TensorKind kind;
  const char* name;                       ///< the enumerator's name, "Hidden"
  const char* shape;                      ///< "[B, s, d]" in docs/planner.md's notation; the compute dtype unless named
  const char* meaning;                    ///< what the tensor is: "a hidden state: ..."
  int64_t (*bytes)(const PlanShapes& s);  ///< bytes of one tensor, saturated at kPlanBytesLimit
  /// the bytes in words with the values plugged in: "1 x 384K tokens x 4096 x 2 B"
  std::string (*formula)(const PlanShapes& s);
};

/// The rule of `kind`: kTensorKindRules in tensor_kinds.cpp, one a kind in enum order.
const TensorKindRule& tensor_kind_rule(TensorKind kind);

/// Derives the sizes of a (valid) config, then every kind's bytes from its rule.
PlanShapes make_shapes(const RunConfig& cfg);

/// Bytes of one tensor of `kind`.
inline int64_t kind_bytes(TensorKind kind, const PlanShapes& s) { return s.bytes[static_cast<int>(kind)]; }

/// The formula of one tensor of `kind` with the values plugged in: "1 x 384K tokens x 4096 x 2 B".
inline std::string kind_formula(TensorKind kind, const PlanShapes& s) { return tensor_kind_rule(kind).formula(s); }

/// "[B, s, d]"-style shape of a kind (docs/planner.md's table of tensor kinds).
inline const char* kind_shape(TensorKind kind) { return tensor_kind_rule(kind).shape; }

}  // namespace odyssey::planner_detail
