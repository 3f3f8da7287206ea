// Names of the engine's preallocated buffers and the flat groups' shard layout
// (engine/layout/planned_buffers.h). Host arithmetic only.
#include "engine/layout/planned_buffers.h"

#include <algorithm>

#include "engine/layout/saturating_bytes.h"

namespace odyssey {

const char* planned_buffer_name(PlannedBuffer buffer) {
  switch (buffer) {
    case PlannedBuffer::UntiedQStage:
      return "untied q stage";
    case PlannedBuffer::UntiedKvStage:
      return "untied kv stage";
    case PlannedBuffer::UntiedKvGathered:
      return "untied kv gathered";
    case PlannedBuffer::UntiedStaging:
      return "untied all-to-all staging";
    case PlannedBuffer::UntiedLocalGrad:
      return "untied local-layout gradient";
    case PlannedBuffer::UntiedKvAccum32:
      return "untied fp32 dK/dV accumulator";
    case PlannedBuffer::UntiedNormTile:
      return "untied input norm backward tile";
    case PlannedBuffer::MlpGate:
      return "MLP gate";
    case PlannedBuffer::LossTileLogits32:
      return "loss tile fp32 logits";
    case PlannedBuffer::BlockFull:
      return "block full";
    case PlannedBuffer::EmbedFull:
      return "embedding full";
    case PlannedBuffer::HeadFull:
      return "head full";
    case PlannedBuffer::BlockShard:
      return "block shard";
    case PlannedBuffer::EmbedShard:
      return "embedding shard";
    case PlannedBuffer::HeadShard:
      return "head shard";
    case PlannedBuffer::BlockPack:
      return "block packed gradients";
    case PlannedBuffer::EmbedPack:
      return "embedding packed gradients";
    case PlannedBuffer::HeadPack:
      return "head packed gradients";
    case PlannedBuffer::BlockShardOut:
      return "block reduce-scatter output";
    case PlannedBuffer::EmbedShardOut:
      return "embedding reduce-scatter output";
    case PlannedBuffer::HeadShardOut:
      return "head reduce-scatter output";
    case PlannedBuffer::BlockShardCast:
      return "block shard cast";
    case PlannedBuffer::EmbedShardCast:
      return "embedding shard cast";
    case PlannedBuffer::HeadShardCast:
      return "head shard cast";
    case PlannedBuffer::BlockDeviceParams:
      return "block device parameters";
    case PlannedBuffer::EmbedDeviceParams:
      return "embedding device parameters";
    case PlannedBuffer::HeadDeviceParams:
      return "head device parameters";
    case PlannedBuffer::OffloadSlot:
      return "offload host copy";
    case PlannedBuffer::OffloadPrefetchSlot:
      return "offload device slot";
    case PlannedBuffer::KeptAttentionHostCopy:
      return "kept attention host copy";
    case PlannedBuffer::KeptAttentionSlot:
      return "kept attention device slot";
    case PlannedBuffer::EmbedGradRows32:
      return "embedding gradient rows fp32";
    case PlannedBuffer::Count:
      break;
  }
  return "?";
}

PlannedBuffer group_buffer(ParamGroupKind kind, GroupBuffer buffer) {
  const int group = static_cast<int>(kind);  // Embedding, Block, Head
  static constexpr PlannedBuffer kFull[] = {PlannedBuffer::EmbedFull, PlannedBuffer::BlockFull,
                                            PlannedBuffer::HeadFull};
  static constexpr PlannedBuffer kShard[] = {PlannedBuffer::EmbedShard, PlannedBuffer::BlockShard,
                                             PlannedBuffer::HeadShard};
  static constexpr PlannedBuffer kPack[] = {PlannedBuffer::EmbedPack, PlannedBuffer::BlockPack,
                                            PlannedBuffer::HeadPack};
  static constexpr PlannedBuffer kDevice[] = {PlannedBuffer::EmbedDeviceParams, PlannedBuffer::BlockDeviceParams,
                                              PlannedBuffer::HeadDeviceParams};
  static constexpr PlannedBuffer kShardOut[] = {PlannedBuffer::EmbedShardOut, PlannedBuffer::BlockShardOut,
                                                PlannedBuffer::HeadShardOut};
  static constexpr PlannedBuffer kShardCast[] = {PlannedBuffer::EmbedShardCast, PlannedBuffer::BlockShardCast,
                                                 PlannedBuffer::HeadShardCast};
  switch (buffer) {
    case GroupBuffer::Full:
      return kFull[group];
    case GroupBuffer::Shard:
      return kShard[group];
    case GroupBuffer::Pack:
      return kPack[group];
    case GroupBuffer::DeviceParams:
      return kDevice[group];
    case GroupBuffer::ShardOut:
      return kShardOut[group];
    case GroupBuffer::ShardCast:
      return kShardCast[group];
  }
  return PlannedBuffer::Count;
}

bool gathers_from_cast(int64_t shards, int64_t compute_dtype_bytes, bool states_on_host) {
  return shards > 1 && compute_dtype_bytes != 4 && !states_on_host;
}

FlatShardLayout flat_shard_layout(int64_t numel, int64_t shards) {
  FlatShardLayout l;
  l.numel = std::max<int64_t>(0, numel);
  l.shards = std::max<int64_t>(1, shards);
  l.shard_numel = (l.numel + l.shards - 1) / l.shards;
  l.padded_numel = l.shard_numel * l.shards;
  return l;
}

bool keeps_gathered_copy(int64_t shards, int64_t compute_dtype_bytes, bool states_on_host) {
  return shards > 1 || (compute_dtype_bytes != 4 && !states_on_host);
}

OffloadedBlocks offloaded_blocks(int64_t n_layers) {
  OffloadedBlocks b;
  b.n_layers = n_layers;
  b.count = n_layers > 2 ? n_layers - 2 : 0;
  return b;
}

KeptAttentionBlocks kept_attention_blocks(int64_t n_layers, int64_t keep_attention_blocks) {
  KeptAttentionBlocks k;
  k.n_layers = std::max<int64_t>(0, n_layers);
  const int64_t keeping = keep_attention_blocks <= 0 ? k.n_layers : std::min(keep_attention_blocks, k.n_layers);
  k.first = k.n_layers - keeping;
  return k;
}

OffloadedBlocks kept_attention_offloaded_blocks(int64_t n_layers, int64_t keep_attention_blocks) {
  const KeptAttentionBlocks keeping = kept_attention_blocks(n_layers, keep_attention_blocks);
  OffloadedBlocks b;
  b.n_layers = n_layers;
  b.first = keeping.first;
  b.count = std::max<int64_t>(0, keeping.count() - 1);
  return b;
}

int64_t KeptAttentionPayload::offset(int64_t index) const {
  auto aligned = [](int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; };
  if (index <= 0) return 0;
  return aligned(out_bytes) + (index - 1) * aligned(lse_bytes);
}

KeptAttentionPayload kept_attention_payload(int64_t out_bytes, int64_t lse_bytes, int64_t lse_parts) {
  KeptAttentionPayload p;
  p.out_bytes = out_bytes;
  p.lse_bytes = lse_bytes;
  p.lse_parts = lse_parts;
  return p;
}

KeptAttentionPayload kept_attention_step_payload(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                                                 int64_t dtype_bytes, int64_t stage_heads, int64_t lse_seq) {
  const int64_t per_stage = std::max<int64_t>(1, stage_heads);
  return kept_attention_payload(sat_product({batch, seq, heads, head_dim, dtype_bytes}),  // [B, S, heads, hd]
                                sat_product({batch, per_stage, lse_seq, 4}),              // [B, k, S'] fp32
                                std::max<int64_t>(1, heads / per_stage));
}

}  // namespace odyssey
