// The buffers the engine preallocates, each named by the planner term that predicts its bytes, and
// the flat parameter groups' shard layout: defined once, for the engine, the planner and the test.
// defines: PlannedBuffer, kPlannedBufferCount, planned_buffer_name, ParamGroupKind, group_buffer,
//          FlatShardLayout, flat_shard_layout, keeps_gathered_copy, OffloadedBlocks, offloaded_blocks,
//          KeptAttentionBlocks, kept_attention_blocks, kept_attention_offloaded_blocks,
//          KeptAttentionPayload, kept_attention_payload, kept_attention_step_payload, BlasWorkspaces
//
// No LibTorch. The engine notes each buffer it allocates under its tag (engine/telemetry/
// planned_buffer_log.h); the planner answers planned_buffer_bytes(cfg, tag) from the TensorKind its
// step walk charges (engine/planner/planner.h); tests/parallel/planned_buffers_test.cpp asserts
// they agree byte for byte over every flavor, degree, stage size, batch and GQA ratio.
#pragma once

#include <cstdint>
#include <string>

namespace odyssey {

/// One kind of preallocated engine buffer. The comment gives its shape and the planner's term.
enum class PlannedBuffer : uint8_t {
  // The Untied Function's stage buffers (engine/parallel/untied_attention.cpp; UntiedStageBuffers)
  UntiedQStage,      ///< [B, S, k, hd]: one stage's q, o, d o in head layout        (QStageHead)
  UntiedKvStage,     ///< [B, S, max_kv_count, hd]: one KV range's K or V              (KvStageHead)
  UntiedKvGathered,  ///< [B, S, k, hd]: K or V gathered to a stage's query heads      (KvStageGathered)
  UntiedStaging,  ///< [P, B, s, max(k, max_kv_count), hd]: all-to-all staging      (the widest of QStageLocal, KvStageLocal)
  UntiedLocalGrad,  ///< [B, s, P*max_kv_count, hd]: backward's local-layout K/V gradient when wider than a stage (KvStageLocal)
  UntiedKvAccum32,  ///< [B, S, max_kv_count, hd] fp32: a dK or dV accumulator       (KvStageAccum32)
  UntiedNormTile,   ///< [rows, d]: one full row tile of the input norm's backward    (InputNormTile)
  // Sequence tiles (engine/layout/tiles.h)
  MlpGate,           ///< [B, n, f]: the MLP's gate projection, n = the tile or all s   (FfnTile or Ffn)
  LossTileLogits32,  ///< [B, n, V] fp32: one loss tile's logits                        (LogitsTile32)
  // Flat parameter groups (engine/parallel/flat_group.cpp), per group kind
  // [padded] compute dtype: the gathered group (BlockFull, EmbedFull, HeadFull)
  BlockFull,
  EmbedFull,
  HeadFull,
  // [shard] fp32: master, gradient and each AdamW moment
  BlockShard,
  EmbedShard,
  HeadShard,
  // [padded] fp32: packed gradients for the reduction (BlockPack, EmbedPack, HeadPack)
  BlockPack,
  EmbedPack,
  HeadPack,
  // [shard] fp32: the reduce-scatter's output (BlockShardOut, EmbedShardOut, HeadShardOut)
  BlockShardOut,
  EmbedShardOut,
  HeadShardOut,
  // [shard] compute dtype: the shard cast for the all-gather (BlockShardCast, EmbedShardCast, HeadShardCast)
  BlockShardCast,
  EmbedShardCast,
  HeadShardCast,
  // [shard] compute dtype on the device while the fp32 states are offloaded (DeviceParamShards)
  BlockDeviceParams,
  EmbedDeviceParams,
  HeadDeviceParams,
  // Activation offload (engine/memory/offload.cpp)
  OffloadSlot,          ///< [B, s, d] host: one checkpointed block input                  (OffloadedInput)
  OffloadPrefetchSlot,  ///< [B, s, d] device: one of the two slots inputs come back into (Hidden)
  // Kept attention offloaded with the block inputs (memory.offload_kept_attention): one block's
  // kept output and log-sum-exp packed into bytes (KeptAttentionPayload)
  KeptAttentionHostCopy,  ///< [payload] uint8 host: one block's kept attention   (OffloadedKeptAttention)
  KeptAttentionSlot,  ///< [payload] uint8 device: packed for the copy, or one of the two slots it comes back into (KeptAttentionPayload)
  // The embedding's backward (engine/model/head.cpp)
  EmbedGradRows32,  ///< [B*s, d] fp32: dx's rows cast for the scatter, a copy only in bf16 (EmbedGradRows32)
  Count
};
constexpr int kPlannedBufferCount = static_cast<int>(PlannedBuffer::Count);

/// "untied q stage", "block full", ...: the name a test failure prints.
const char* planned_buffer_name(PlannedBuffer buffer);

/// Which flat parameter group a buffer belongs to: its tags differ (the planner sizes each).
enum class ParamGroupKind : uint8_t { Embedding, Block, Head };

/// The buffers every flat group has, by group kind.
enum class GroupBuffer : uint8_t { Full, Shard, Pack, ShardOut, ShardCast, DeviceParams };

/// The tag of `buffer` in a group of `kind`.
PlannedBuffer group_buffer(ParamGroupKind kind, GroupBuffer buffer);

/// How a flat group of `numel` parameters is laid out over `shards` ranks: each rank owns
/// shard_numel = ceil(numel / shards) elements, and the gathered and packed buffers hold
/// padded_numel = shard_numel x shards (the padding is never a parameter).
struct FlatShardLayout {
  int64_t numel = 0;
  int64_t shards = 1;
  int64_t shard_numel = 0;
  int64_t padded_numel = 0;
};
FlatShardLayout flat_shard_layout(int64_t numel, int64_t shards);

/// Whether a flat group gathers its parameters into a transient `full` buffer: when sharded (the
/// all-gather's output) or when the compute dtype is not fp32 (the cast). Otherwise `full` is
/// resident: the master itself (memory: no second copy of the parameters at W = 1, FSDP or not),
/// or, with the optimizer states offloaded (`states_on_host`), the device's compute-dtype copy.
bool keeps_gathered_copy(int64_t shards, int64_t compute_dtype_bytes, bool states_on_host = false);

/// Whether a sharded flat group's all-gather reads its shard cast to the compute dtype, a [shard]
/// buffer of its own (ShardCast): sharded, and neither fp32 (the gather reads the master shard)
/// nor the states offloaded (it reads the device's compute-dtype copy). FlatParamGroup::unshard_async
/// casts by it; the planner charges it for every group kind.
bool gathers_from_cast(int64_t shards, int64_t compute_dtype_bytes, bool states_on_host);

/// Activation offload: which checkpointed block inputs go to the host. Block 0's input is the
/// embedding of the token ids, so its backward looks it up again (one gather of the embedding)
/// instead of keeping a host copy and prefetching it (memory: one [B, s, d] of host memory less
/// per rank, 8 GiB at 8M tokens for Llama3-8B on 8 ranks, and no prefetch slot during block 1's
/// backward). The last block's input stays on the device (its backward comes first). So blocks
/// 1..n_layers-2 are offloaded; with two blocks or fewer, none.
struct OffloadedBlocks {
  int64_t n_layers = 0;
  int64_t first = 1;  ///< the lowest offloaded block
  int64_t count = 0;  ///< blocks first..first+count-1 (the CUDA slab's regions)
  bool holds(int64_t layer) const { return layer >= first && layer < first + count; }
  /// Block `layer`'s input is recomputed from the token ids instead of offloaded.
  bool embeds(int64_t layer) const { return layer == 0 && first == 1 && n_layers > 1; }
};
OffloadedBlocks offloaded_blocks(int64_t n_layers);

/// Kept attention (memory.keep_attention): which blocks keep their attention output and
/// log-sum-exp, the top `memory.keep_attention_blocks` (0: every block). The top ones because their
/// backward runs first: what they keep is freed first. The others recompute their attention.
struct KeptAttentionBlocks {
  int64_t n_layers = 0;
  int64_t first = 0;  ///< the lowest block that keeps
  bool keeps(int64_t layer) const { return layer >= first && layer < n_layers; }
  int64_t count() const { return n_layers - first; }
};
KeptAttentionBlocks kept_attention_blocks(int64_t n_layers, int64_t keep_attention_blocks);

/// Kept attention offloaded beside the inputs (memory.offload_kept_attention): the keeping blocks
/// but the last send what they keep to the host; the last block's stays on the device (its
/// backward comes first). Block 0 is offloaded too when it keeps: unlike its input, its attention
/// cannot be looked up again.
OffloadedBlocks kept_attention_offloaded_blocks(int64_t n_layers, int64_t keep_attention_blocks);

/// How one block's kept attention travels to the host and back as one byte buffer: the output
/// first, then each log-sum-exp part (one per Untied stage, or one), each part starting at a
/// multiple of kAlignment bytes (memory: one copy per block each way, and every part's pointer
/// aligned as cuDNN's and FlashAttention's kernels read it). Pure arithmetic: the engine packs by
/// it (pack_kept_attention, engine/parallel/kept_attention.h), the planner charges its bytes.
struct KeptAttentionPayload {
  static constexpr int64_t kAlignment = 256;
  int64_t out_bytes = 0;  ///< the kept output, [B, h, S, hd] or Untied's [B, s, H*hd], compute dtype
  int64_t lse_bytes = 0;  ///< one log-sum-exp part, [B, k, S] fp32
  int64_t lse_parts = 0;  ///< how many (the Untied stages; 1 for standard attention)
  /// Where part `index` starts: 0 the output, 1.. the log-sum-exp parts.
  int64_t offset(int64_t index) const;
  /// The whole buffer: the end of the last part.
  int64_t bytes() const { return offset(lse_parts + 1); }
};
KeptAttentionPayload kept_attention_payload(int64_t out_bytes, int64_t lse_bytes, int64_t lse_parts);
/// One block's kept attention on a rank, for `batch` sequences of `seq` tokens in the head layout
/// (the whole sequence, S = P x s): the output [B, S, heads, hd] at `dtype_bytes` (the Untied
/// stages' [B, s, P x heads x hd], the same bytes), then one [B, stage_heads, lse_seq] fp32
/// log-sum-exp per stage, heads / stage_heads of them (one without the Untied stages: stage_heads =
/// heads); lse_seq is lse_positions(the kernel, S) (engine/layout/attention_kernels.h: the
/// memory-efficient kernel pads it). The planner charges it; the engine sizes the host store by it
/// at setup and at each step, and the store refuses a packed payload of other bytes (memory: the
/// pinned slab is made at setup and again only when a live memory change alters it). Products
/// saturate at kPlanBytesLimit (engine/layout/saturating_bytes.h).
KeptAttentionPayload kept_attention_step_payload(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                                                 int64_t dtype_bytes, int64_t stage_heads, int64_t lse_seq);

/// cuBLAS's workspaces on a CUDA rank. LibTorch gives each (cuBLAS handle, stream) pair one
/// workspace from the caching allocator, which cuBLASLt shares, and keeps it for the process's
/// life; a handle belongs to a thread. A rank runs GEMMs on two threads, both on the default
/// stream: its own (the forward, the loss) and autograd's worker thread for its device (every
/// backward node, the recompute included). So two workspaces a device (measured on an H200,
/// 2026-11-27: 32 MiB appear in block 0's first GEMM of step 1 and 32 MiB more in the backward,
/// and from step 2 on both are there from the first phase). The engine makes both before the first
/// step (prepare_blas_workspaces, engine/telemetry/cuda_runtime.h) and sets their size on every
/// GPU to PyTorch's Hopper and Blackwell default (CUBLAS_WORKSPACE_CONFIG=:4096:8, 4096 KiB x 8;
/// older GPUs default to 8.125 MiB), so the planner's term holds on any device.
struct BlasWorkspaces {
  static constexpr int64_t kChunkKiB = 4096;                         ///< CUBLAS_WORKSPACE_CONFIG's :SIZE (KiB)
  static constexpr int64_t kChunks = 8;                              ///< and :COUNT
  static constexpr int64_t kBytesEach = kChunkKiB * 1024 * kChunks;  ///< 32 MiB
  static constexpr int64_t kThreads = 2;                             ///< the rank's thread and autograd's device thread
  /// CUBLAS_WORKSPACE_CONFIG's value for this size: ":4096:8".
  static std::string config() { return ":" + std::to_string(kChunkKiB) + ":" + std::to_string(kChunks); }
};

}  // namespace odyssey
