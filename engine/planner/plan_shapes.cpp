// Derived per-rank sizes of a config (make_shapes), and each tensor kind's bytes filled from its
// rule (tensor_kinds.cpp). defines: make_shapes
#include "engine/planner/plan_shapes.h"

#include <algorithm>
#include <stdexcept>

#include "engine/config/sizes.h"
#include "engine/config/techniques.h"
#include "engine/layout/block_traffic.h"
#include "engine/layout/documents.h"
#include "engine/layout/schedule_rules.h"
#include "engine/layout/sdpa_fallback.h"
#include "engine/planner/planner.h"
#include "kernels/linear_cross_entropy_plan.h"

namespace odyssey::planner_detail {

PlanShapes make_shapes(const RunConfig& cfg) {
  // "auto" plans the sizes it resolves to (every candidate a concrete size: no recursion)
  if (cfg.memory.heads_per_stage == kHeadsPerStageAuto || cfg.memory.mlp_tile_tokens == kMlpTileTokensAuto)
    return make_shapes(with_planned_sizes(cfg));
  PlanShapes s;
  const ModelConfig& m = cfg.model;
  s.L = m.n_layers;
  s.d = m.d_model;
  s.H = m.n_heads;
  s.Hkv = m.n_kv_heads;
  s.hd = m.head_dim;
  s.q_dim = m.q_dim();
  s.kv_dim = m.kv_dim();
  s.f = m.d_ffn;
  s.V = m.vocab_size;
  s.qk_norm = m.qk_norm;
  s.tied = m.tie_embeddings;

  s.B = cfg.training.batch_size;
  s.S = cfg.training.seq_len;
  s.P = std::max<int64_t>(1, cfg.parallel.ulysses_degree);
  s.W = std::max<int64_t>(1, cfg.parallel.world_size);
  s.c = dtype_bytes(cfg.training.dtype);
  s.fsdp = cfg.parallel.fsdp;
  s.s = s.S / s.P;
  s.t = s.B * s.s;
  s.Th = s.B * s.S;
  s.hq = std::max<int64_t>(1, s.H / s.P);
  const UlyssesKvHeads kv = ulysses_kv_heads(s.Hkv, s.P);
  s.kv_replicated = kv.replicated();
  s.hkv_rep = kv.total;
  s.hkv = kv.per_rank;

  const MemoryConfig& mem = cfg.memory;
  s.ckpt = mem.activation_checkpointing;
  // A technique without the one it requires was refused by validate(); the shapes never quietly
  // switch it off (the registry's rule, engine/config/techniques.h).
  for (const TechniqueRequirement& broken : technique_requirement_issues(cfg))
    throw std::invalid_argument("planner: " + broken.text());
  s.offload = mem.offload_activations;
  s.tiled_mlp = mem.tiled_mlp;
  s.tiled_loss = mem.tiled_loss;
  s.untied = mem.untied_ulysses;
  s.keep_attention = s.ckpt && mem.keep_attention;
  s.offload_kept = s.keep_attention && s.offload && mem.offload_kept_attention;
  s.kept = kept_attention_blocks(s.L, mem.keep_attention_blocks);
  s.kept_count = s.keep_attention ? s.kept.count() : 0;
  if (cfg.training.document_mask && cfg.document_lengths)
    s.attention_pair_fraction = cfg.document_lengths->attention_fraction(cfg.training.seq_len);
  s.documents = cfg.training.document_mask;
  s.rope_rows = rope_position_rows(s.B, s.documents && cfg.training.document_positions == DocumentPositions::Restart);
  s.kernel_seq = s.documents ? longest_attention_segment(cfg.document_lengths.get(), s.S) : s.S;
  const LseKernelQuery lse_query = lse_kernel_query(cfg);
  s.lse_kernel = lse_attention_kernel(lse_query);
  s.standard_on_lse_kernel = sdpa_has_only_math(lse_query, s.hq, s.hkv);
  s.segment_calls = s.documents && !documents_run_varlen(lse_query);
  if (s.untied) {
    // The engine's own schedule (engine/layout/heads.h; a config that breaks its rules was refused
    // by validate() and throws here): k query heads per rank per stage, and the widest KV range a
    // stage reads, two KV heads when a stage straddles GQA groups (24/8 heads, P = 2, 4 per stage).
    const UntiedStagePlan plan = plan_untied_stages(m.n_heads, m.n_kv_heads, m.head_dim, s.P, mem.heads_per_stage);
    s.k = plan.k;
    s.stages = plan.stages;
    s.max_kv_count = plan.max_kv_count;
    s.untied_buffers = untied_stage_buffers(plan, s.B, s.s);
    s.untied_kv_accum_token_bytes = untied_kv_accumulator_token_bytes(plan, s.c);
  } else {
    s.k = s.hq;
    s.stages = 1;
    s.max_kv_count = s.hkv;
  }
  // tiles of n positions over all B sequences: [B, n, f] and [B, n, V] (engine/layout/tiles.h)
  s.mlp_tile = mlp_tile(mem, m, s.B, s.s);
  s.loss_tile = loss_tile(mem, m, s.B, s.s);
  s.norm_tile_rows = input_norm_tile_rows(s.t, s.d);

  s.n_block = m.block_params();
  s.n_attn_proj = m.attention_projection_params();
  s.n_embed = m.embedding_params();
  s.n_head = m.non_block_params() - s.n_embed;  // final norm (+ untied LM head)
  // the flat groups' layout over the ranks, as FlatParamGroup lays them out (engine/layout/planned_buffers.h)
  const int64_t shard_ways = s.fsdp ? s.W : 1;
  s.block_layout = flat_shard_layout(s.n_block, shard_ways);
  s.embed_layout = flat_shard_layout(s.n_embed, shard_ways);
  s.head_layout = flat_shard_layout(s.n_head, shard_ways);
  s.offload_optimizer = mem.offload_optimizer;
  s.gathers = keeps_gathered_copy(shard_ways, s.c, s.offload_optimizer);

  s.cuda_target = runs_cuda_path(cfg);
  s.defers_block_reduce_scatter =
      defers_block_reduce_scatter(defers_reduce_scatter(s.cuda_target), s.block_layout.shards > 1);
  s.runtime_overhead = static_cast<int64_t>(cfg.hardware.runtime_overhead_gib * kGiB);
  s.ranks_per_node = std::max<int64_t>(1, std::min(s.W, cfg.hardware.gpus_per_node));

  // FlashAttention-2's padded buffers (PlanShapes::fa2_seq)
  s.fa2_seq = (s.S + 127) / 128 * 128;
  s.fa2_head_dim = s.hd <= 192 ? (s.hd + 31) / 32 * 32 : 256;
  // PyTorch's CPU flash kernel (FlashAttentionKernel.cpp) picks its query block by the query length
  // (256 from 768 tokens, 64 from 192, else 32) and kv blocks of 512, both capped at the length:
  // one call's, the whole sequence or (document masking) the longest segment, whose blocks are
  // the largest any segment's call takes
  const int64_t n = s.kernel_seq;
  s.cpu_q_block = std::min<int64_t>(n >= 768 ? 256 : n >= 192 ? 64 : 32, n);
  s.cpu_kv_block = std::min<int64_t>(512, n);
  // The fused loss kernel's own plan of its workspace (one fp32 logits tile, its bf16 gradient, row
  // statistics and, in bf16, an fp32 dhidden accumulator), for the tile the engine gives it. A
  // shape the kernel refuses is beyond range (the GPU run would refuse it too).
  try {
    const kernels::FusedLossTiles tiles = kernels::fused_loss_tiles(s.B, s.loss_tile.positions, s.V);
    const kernels::LceTilePlan lce = kernels::plan_linear_cross_entropy(
        s.c == 4 ? kernels::KernelDtype::F32 : kernels::KernelDtype::BF16,
        kernels::LinearCrossEntropyShape{s.t, s.d, s.V, tiles.seq_tile, tiles.vocab_tile});
    s.fused_seq_tile = lce.seq_tile;
    s.fused_vocab_tile = lce.vocab_tile;
    s.fused_vocab_tiles = lce.n_vocab_tiles;
    s.fused_loss_workspace_bytes = static_cast<int64_t>(lce.bytes);
  } catch (const kernels::KernelError&) {
    s.fused_loss_workspace_bytes = kPlanBytesLimit;
  }

  // every kind's bytes from its rule, now that the sizes it reads are derived
  for (int k = 0; k < kTensorKindCount; ++k) {
    const int64_t bytes = tensor_kind_rule(static_cast<TensorKind>(k)).bytes(s);
    s.bytes[k] = bytes;
    s.beyond_range = s.beyond_range || bytes >= kPlanBytesLimit;
  }
  return s;
}

}  // namespace odyssey::planner_detail
