// The planner's bytes for each buffer the engine preallocates (planned_buffer_bytes): the TensorKind
// its step walk charges for that buffer, or 0 when the config allocates none.
#include <algorithm>

#include "engine/planner/plan_shapes.h"
#include "engine/planner/planner.h"

namespace odyssey {

using planner_detail::kind_bytes;
using planner_detail::make_shapes;
using planner_detail::PlanShapes;
using K = planner_detail::TensorKind;

int64_t planned_buffer_bytes(const RunConfig& cfg, PlannedBuffer buffer) {
  const PlanShapes s = make_shapes(cfg);
  auto bytes = [&](K kind) { return kind_bytes(kind, s); };
  auto shard = [&](const FlatShardLayout& l) { return planner_detail::sat_mul(l.shard_numel, 4); };
  auto device = [&](const FlatShardLayout& l) { return planner_detail::sat_mul(l.shard_numel, s.c); };
  switch (buffer) {
    case PlannedBuffer::UntiedQStage:
      return s.untied ? bytes(K::QStageHead) : 0;
    case PlannedBuffer::UntiedKvStage:
      return s.untied ? bytes(K::KvStageHead) : 0;
    case PlannedBuffer::UntiedKvGathered:
      return s.untied ? bytes(K::KvStageGathered) : 0;
    // the staging the walk holds through each pass of the stages: the widest exchange, queries or a KV range
    case PlannedBuffer::UntiedStaging:
      return s.untied && s.P > 1 ? bytes(K::StageStaging) : 0;
    // backward's K/V gradients in local layout get their own buffer only when wider than a stage's Q
    case PlannedBuffer::UntiedLocalGrad:
      return s.untied && s.max_kv_count > s.k ? bytes(K::KvStageLocal) : 0;
    case PlannedBuffer::UntiedKvAccum32:
      return s.untied ? bytes(K::KvStageAccum32) : 0;
    case PlannedBuffer::UntiedNormTile:
      return s.untied ? bytes(K::InputNormTile) : 0;
    case PlannedBuffer::MlpGate:
      return bytes(s.tiled_mlp ? K::FfnTile : K::Ffn);
    // a GPU target's fused kernel never holds a [tile, V] fp32 copy (FusedLossWorkspace instead)
    case PlannedBuffer::LossTileLogits32:
      return s.tiled_loss && !s.cuda_target ? bytes(K::LogitsTile32) : 0;
    case PlannedBuffer::BlockFull:
      return s.gathers ? bytes(K::BlockFull) : 0;
    case PlannedBuffer::EmbedFull:
      return s.gathers ? bytes(K::EmbedFull) : 0;
    case PlannedBuffer::HeadFull:
      return s.gathers ? bytes(K::HeadFull) : 0;
    case PlannedBuffer::BlockShard:
      return shard(s.block_layout);
    case PlannedBuffer::EmbedShard:
      return shard(s.embed_layout);
    case PlannedBuffer::HeadShard:
      return shard(s.head_layout);
    case PlannedBuffer::BlockPack:
      return bytes(K::BlockPack);
    case PlannedBuffer::EmbedPack:
      return bytes(K::EmbedPack);
    case PlannedBuffer::HeadPack:
      return bytes(K::HeadPack);
    case PlannedBuffer::BlockShardOut:
      return bytes(K::BlockShardOut);
    case PlannedBuffer::EmbedShardOut:
      return bytes(K::EmbedShardOut);
    case PlannedBuffer::HeadShardOut:
      return bytes(K::HeadShardOut);
    case PlannedBuffer::BlockShardCast:
      return bytes(K::BlockShardCast);
    case PlannedBuffer::EmbedShardCast:
      return bytes(K::EmbedShardCast);
    case PlannedBuffer::HeadShardCast:
      return bytes(K::HeadShardCast);
    case PlannedBuffer::BlockDeviceParams:
      return s.offload_optimizer ? device(s.block_layout) : 0;
    case PlannedBuffer::EmbedDeviceParams:
      return s.offload_optimizer ? device(s.embed_layout) : 0;
    case PlannedBuffer::HeadDeviceParams:
      return s.offload_optimizer ? device(s.head_layout) : 0;
    // blocks 1..L-2 only (offloaded_blocks): block 0's input is looked up again, the last stays
    case PlannedBuffer::OffloadSlot:
    case PlannedBuffer::OffloadPrefetchSlot:
      return s.offload && offloaded_blocks(s.L).count > 0
                 ? bytes(buffer == PlannedBuffer::OffloadSlot ? K::OffloadedInput : K::Hidden)
                 : 0;
    // the keeping blocks but the last (kept_attention_offloaded_blocks): the last one's stays on the device
    case PlannedBuffer::KeptAttentionHostCopy:
    case PlannedBuffer::KeptAttentionSlot:
      return s.offload_kept && kept_attention_offloaded_blocks(s.L, s.kept.count()).count > 0
                 ? bytes(buffer == PlannedBuffer::KeptAttentionHostCopy ? K::OffloadedKeptAttention
                                                                        : K::KeptAttentionPayload)
                 : 0;
    case PlannedBuffer::EmbedGradRows32:
      return bytes(K::EmbedGradRows32);
    case PlannedBuffer::Count:
      break;
  }
  return 0;
}

}  // namespace odyssey
