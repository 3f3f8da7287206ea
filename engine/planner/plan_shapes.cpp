// Derived per-rank sizes of a config and the bytes and formula of every tensor kind the planner
// allocates (docs/planner.md lists them with the engine operation that creates each).
#include "engine/planner/plan_shapes.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <stdexcept>

#include "engine/config/sizes.h"
#include "engine/config/techniques.h"
#include "engine/layout/tile_grad_rules.h"
#include "engine/planner/planner.h"
#include "kernels/linear_cross_entropy_plan.h"

namespace odyssey::planner_detail {

namespace {

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* format, ...) {
  char buf[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

/// Parameter counts in decimal units: 218103808 -> "218.1M".
std::string params(int64_t n) {
  if (n >= 1000000000) return fmt("%.2fB", n / 1e9);
  if (n >= 1000000) return fmt("%.1fM", n / 1e6);
  if (n >= 10000) return fmt("%.1fK", n / 1e3);
  return std::to_string(n);
}

std::string tokens(int64_t n) { return format_size(n) + " tokens"; }

}  // namespace

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
  s.hkv_rep = std::max(s.Hkv, s.P);
  s.hkv = std::max<int64_t>(1, s.hkv_rep / s.P);

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
  if (cfg.training.document_mask && cfg.document_lengths)
    s.attention_pair_fraction = cfg.document_lengths->attention_fraction(cfg.training.seq_len);
  if (s.untied) {
    // The engine's own schedule (engine/layout/heads.h; a config that breaks its rules was refused
    // by validate() and throws here): k query heads per rank per stage, and the widest KV range a
    // stage reads, two KV heads when a stage straddles GQA groups (24/8 heads, P = 2, 4 per stage).
    const UntiedStagePlan plan = plan_untied_stages(m.n_heads, m.n_kv_heads, m.head_dim, s.P, mem.heads_per_stage);
    s.k = plan.k;
    s.stages = plan.stages;
    s.max_kv_count = plan.max_kv_count;
    s.untied_buffers = untied_stage_buffers(plan, s.B, s.s);
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
  s.n_attn_proj = s.d * s.q_dim + 2 * s.d * s.kv_dim + (s.qk_norm ? 2 * s.hd : 0);
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
  s.runtime_overhead = static_cast<int64_t>(cfg.hardware.runtime_overhead_gib * kGiB);
  s.ranks_per_node = std::max<int64_t>(1, std::min(s.W, cfg.hardware.gpus_per_node));

  const int64_t c = s.c;
  auto set = [&](TensorKind k, int64_t v) {
    s.bytes[static_cast<int>(k)] = v;
    s.beyond_range = s.beyond_range || v >= kPlanBytesLimit;
  };
  set(TensorKind::Hidden, sat_product({s.t, s.d, c}));
  set(TensorKind::RowStat, sat_product({s.t, 4}));
  set(TensorKind::QLocal, sat_product({s.t, s.q_dim, c}));
  set(TensorKind::KvLocal, sat_product({s.t, s.kv_dim, c}));
  set(TensorKind::KvLocalRep, sat_product({s.t, s.hkv_rep, s.hd, c}));
  set(TensorKind::QHead, sat_product({s.Th, s.hq, s.hd, c}));
  set(TensorKind::KvHead, sat_product({s.Th, s.hkv, s.hd, c}));
  set(TensorKind::Lse, sat_product({s.Th, s.hq, 4}));
  s.fa2_seq = (s.S + 127) / 128 * 128;
  s.fa2_head_dim = s.hd <= 192 ? (s.hd + 31) / 32 * 32 : 256;
  set(TensorKind::DqAccum, sat_product({s.B, s.fa2_seq, s.hq, s.fa2_head_dim, 4}));
  set(TensorKind::SoftmaxD, sat_product({s.B, s.fa2_seq, s.hq, 4}));
  set(TensorKind::GqaExpanded, sat_product({s.Th, s.hq, s.hd, c}));
  set(TensorKind::QStageLocal, sat_product({s.t, s.k, s.P, s.hd, c}));
  set(TensorKind::KvStageLocal, sat_product({s.t, s.max_kv_count, s.P, s.hd, c}));
  set(TensorKind::QStageHead, sat_product({s.Th, s.k, s.hd, c}));
  set(TensorKind::KvStageHead, sat_product({s.Th, s.max_kv_count, s.hd, c}));
  set(TensorKind::DqAccumStage, sat_product({s.B, s.fa2_seq, s.k, s.fa2_head_dim, 4}));
  set(TensorKind::SoftmaxDStage, sat_product({s.B, s.fa2_seq, s.k, 4}));
  set(TensorKind::QStageRows, sat_product({s.P, s.k, s.hd, s.d, c}));
  set(TensorKind::KvStageRows, sat_product({s.P, s.max_kv_count, s.hd, s.d, c}));
  // the engine's buffers for stages that gather K/V per query head, and its fp32 dK/dV accumulators
  set(TensorKind::KvStageGathered, sat_product({s.untied_buffers.kv_gathered, c}));
  set(TensorKind::KvStageAccum32, sat_product({s.untied_buffers.kv_accum_fp32, 4}));
  set(TensorKind::GqaExpandedStage, sat_product({s.Th, s.k, s.hd, c}));
  set(TensorKind::InputNormTile, sat_product({s.norm_tile_rows, s.d, c}));
  set(TensorKind::InputNormTile32, sat_product({s.norm_tile_rows, s.d, 4}));
  // PyTorch's CPU flash kernel (FlashAttentionKernel.cpp) picks its query block by the query length
  // (256 from 768 tokens, 64 from 192, else 32) and kv blocks of 512, both capped at the length.
  s.cpu_q_block = std::min<int64_t>(s.S >= 768 ? 256 : s.S >= 192 ? 64 : 32, s.S);
  s.cpu_kv_block = std::min<int64_t>(512, s.S);
  set(TensorKind::CpuFlashScratch, sat_product({2, s.cpu_q_block, s.cpu_kv_block, (4 + (c < 4 ? c : 0))}));
  // ATen's cpu_flash_attention forward: size_per_thread = q*kv + q + q + q*hd accumulator floats,
  // and a reduced-type [q, kv] copy below fp32 (seen on PyTorch 2.11: 70144 B at q 64, kv 256, hd 16)
  set(TensorKind::CpuFlashForwardScratch,
      sat_product({s.cpu_q_block, s.cpu_kv_block + 2 + s.hd, 4}) +
          (c < 4 ? sat_product({s.cpu_q_block, s.cpu_kv_block, c}) : 0));
  set(TensorKind::Ffn, sat_product({s.t, s.f, c}));
  set(TensorKind::FfnTile, sat_product({s.mlp_tile.rows, s.f, c}));
  set(TensorKind::HiddenTile, sat_product({s.mlp_tile.rows, s.d, c}));
  set(TensorKind::Logits, sat_product({s.t, s.V, c}));
  set(TensorKind::Logits32, sat_product({s.t, s.V, 4}));
  set(TensorKind::LogitsTile, sat_product({s.loss_tile.rows, s.V, c}));
  set(TensorKind::LogitsTile32, sat_product({s.loss_tile.rows, s.V, 4}));
  set(TensorKind::HiddenLossTile, sat_product({s.loss_tile.rows, s.d, c}));
  // The kernel's own plan of its workspace (one fp32 logits tile, its bf16 gradient, row statistics
  // and, in bf16, an fp32 dhidden accumulator), for the tile the engine gives it. A shape the
  // kernel refuses is beyond range (the GPU run would refuse it too).
  try {
    const kernels::FusedLossTiles tiles = kernels::fused_loss_tiles(s.B, s.loss_tile.positions, s.V);
    const kernels::LceTilePlan lce = kernels::plan_linear_cross_entropy(
        c == 4 ? kernels::KernelDtype::F32 : kernels::KernelDtype::BF16,
        kernels::LinearCrossEntropyShape{s.t, s.d, s.V, tiles.seq_tile, tiles.vocab_tile});
    s.fused_seq_tile = lce.seq_tile;
    s.fused_vocab_tile = lce.vocab_tile;
    set(TensorKind::FusedLossWorkspace, static_cast<int64_t>(lce.bytes));
  } catch (const kernels::KernelError&) {
    set(TensorKind::FusedLossWorkspace, kPlanBytesLimit);
  }
  set(TensorKind::TokenIds, sat_product({s.t, 8}));
  set(TensorKind::RopeTable, sat_product({s.t, s.hd, c}));
  const int64_t shard_elems = sat_add(sat_mul(s.L, s.block_layout.shard_numel), s.embed_layout.shard_numel + s.head_layout.shard_numel);
  set(TensorKind::MasterShards, sat_product({shard_elems, 4}));
  set(TensorKind::GradShards, sat_product({shard_elems, 4}));
  set(TensorKind::AdamMoments, sat_product({shard_elems, 8}));
  set(TensorKind::DeviceParamShards, s.offload_optimizer ? sat_product({shard_elems, c}) : 0);
  // gathered and packed buffers hold the padded group (shard x ranks), as the engine allocates them
  set(TensorKind::BlockFull, sat_product({s.block_layout.padded_numel, c}));
  set(TensorKind::EmbedFull, sat_product({s.embed_layout.padded_numel, c}));
  set(TensorKind::HeadFull, sat_product({s.head_layout.padded_numel, c}));
  // fp32 compute gathers straight from the master shard, an offloaded optimizer from the device's
  // compute-dtype shard (FlatParamGroup::unshard_async): no cast
  set(TensorKind::BlockShardCast,
      s.fsdp && s.W > 1 && c != 4 && !s.offload_optimizer ? sat_product({s.block_layout.shard_numel, c}) : 0);
  set(TensorKind::AttnOutGrad, sat_product({s.d, s.q_dim, c}));
  set(TensorKind::AttnProjGrads, sat_product({s.n_attn_proj, c}));
  set(TensorKind::AttnProjGrads32, sat_product({s.n_attn_proj, 4}));
  set(TensorKind::AttnNormGrad, sat_product({s.d, c}));
  set(TensorKind::MlpWeightGrad, sat_product({s.f, s.d, c}));
  set(TensorKind::MlpNormGrad, sat_product({s.d, c}));
  // the tiled MLP's weight gradients over its tiles (engine/layout/tile_grad_rules.h)
  set(TensorKind::MlpWeightTile,
      tile_weight_grad_needs_temporary(c == 4, s.cuda_target) ? sat_product({s.d, s.f, c}) : 0);
  set(TensorKind::MlpGradAccum, mlp_tile_grads_need_accumulators(c == 4) ? sat_product({3, s.d, s.f, 4}) : 0);
  set(TensorKind::HeadWeightGrad, sat_product({s.V, s.d, c}));
  set(TensorKind::HeadGradAccum, sat_product({s.V, s.d, 4}));
  set(TensorKind::EmbedGradDense, sat_product({s.n_embed, 4}));
  set(TensorKind::BlockPack, sat_product({s.block_layout.padded_numel, 4}));
  set(TensorKind::HeadPack, sat_product({s.head_layout.padded_numel, 4}));  // tied: the embedding packs its own
  set(TensorKind::EmbedPack, sat_product({s.embed_layout.padded_numel, 4}));
  set(TensorKind::BlockShardOut, s.fsdp && s.W > 1 ? sat_product({s.block_layout.shard_numel, 4}) : 0);
  // The tied embedding's second gradient contribution on a GPU with the states offloaded: the
  // first (the LM head's, already on the host) comes back up for the sum (accumulate_gradient).
  set(TensorKind::TiedGradBack,
      s.tied && s.offload_optimizer && s.cuda_target ? sat_product({s.embed_layout.shard_numel, 4}) : 0);
  // On a GPU with the states offloaded, [largest shard] fp32: the upload's device staging buffer
  // for the cast (FlatParamGroup::refresh_device_params; an fp32 run copies straight into the
  // parameters). Both AdamW passes are fused, without a temporary: ATen's kernel on the device
  // (AdamW::device_pass), the host's pass on the CPU (engine/train/optimizer.cpp).
  const bool optimizer_temp = s.cuda_target && s.offload_optimizer && s.c != 4;
  set(TensorKind::OptimizerTemp,
      !optimizer_temp ? 0 : sat_product({std::max({s.block_layout.shard_numel, s.embed_layout.shard_numel, s.head_layout.shard_numel}), 4}));
  set(TensorKind::BlasWorkspaces, s.cuda_target ? BlasWorkspaces::kBytesEach : 0);
  set(TensorKind::RuntimeOverhead, s.runtime_overhead);
  set(TensorKind::OffloadedInput, sat_product({s.t, s.d, c}));
  return s;
}

std::string kind_formula(TensorKind kind, const PlanShapes& s) {
  const long long B = s.B, c = s.c, d = s.d, hd = s.hd;
  const std::string st = tokens(s.s), St = tokens(s.S);
  const std::string fa2_St = tokens(s.fa2_seq);  // FA-2's padded query length (S in steps of 128)
  const long long fa2_hd = s.fa2_head_dim;
  // a tile of n positions over B sequences: "4K tokens" for B = 1, "2 x 4K tokens" otherwise
  auto tile_text = [&](const SequenceTile& t) {
    return s.B == 1 ? tokens(t.positions) : fmt("%lld x %s", B, tokens(t.positions).c_str());
  };
  const std::string tile = tile_text(s.mlp_tile), ltile = tile_text(s.loss_tile);
  switch (kind) {
    case TensorKind::Hidden:
    case TensorKind::OffloadedInput: return fmt("%lld x %s x %lld x %lld B", B, st.c_str(), d, c);
    case TensorKind::RowStat: return fmt("%lld x %s x 4 B", B, st.c_str());
    case TensorKind::QLocal:
      return fmt("%lld x %s x %lld heads x %lld x %lld B", B, st.c_str(), (long long)s.H, hd, c);
    case TensorKind::KvLocal:
      return fmt("%lld x %s x %lld KV heads x %lld x %lld B", B, st.c_str(), (long long)s.Hkv, hd, c);
    case TensorKind::KvLocalRep:
      return fmt("%lld x %s x max(%lld, P=%lld) KV heads x %lld x %lld B", B, st.c_str(), (long long)s.Hkv,
                 (long long)s.P, hd, c);
    case TensorKind::QHead:
    case TensorKind::GqaExpanded:
      return fmt("%lld x %s x %lld heads x %lld x %lld B", B, St.c_str(), (long long)s.hq, hd, c);
    case TensorKind::KvHead:
      return fmt("%lld x %s x %lld KV head%s x %lld x %lld B", B, St.c_str(), (long long)s.hkv,
                 s.hkv == 1 ? "" : "s", hd, c);
    case TensorKind::Lse: return fmt("%lld x %lld heads x %s x 4 B", B, (long long)s.hq, St.c_str());
    case TensorKind::DqAccum:
      return fmt("%lld x %s x %lld heads x %lld x 4 B (fp32)", B, fa2_St.c_str(), (long long)s.hq, fa2_hd);
    case TensorKind::SoftmaxD: return fmt("%lld x %lld heads x %s x 4 B", B, (long long)s.hq, fa2_St.c_str());
    case TensorKind::QStageLocal:
      return fmt("%lld x %s x %lld heads x %lld x %lld B", B, st.c_str(), (long long)(s.k * s.P), hd, c);
    case TensorKind::KvStageLocal:
      return fmt("%lld x %s x %lld KV heads x %lld x %lld B", B, st.c_str(), (long long)(s.max_kv_count * s.P), hd, c);
    case TensorKind::QStageHead:
    case TensorKind::GqaExpandedStage:
      return fmt("%lld x %s x %lld head%s x %lld x %lld B", B, St.c_str(), (long long)s.k, s.k == 1 ? "" : "s",
                 hd, c);
    case TensorKind::KvStageHead:
      return fmt("%lld x %s x %lld KV head%s x %lld x %lld B", B, St.c_str(), (long long)s.max_kv_count,
                 s.max_kv_count == 1 ? "" : "s", hd, c);
    case TensorKind::KvStageGathered:
      return fmt("%lld x %s x %lld head%s x %lld x %lld B (K/V per query head)", B, St.c_str(), (long long)s.k,
                 s.k == 1 ? "" : "s", hd, c);
    case TensorKind::KvStageAccum32:
      return fmt("%lld x %s x %lld KV head%s x %lld x 4 B (fp32)", B, St.c_str(), (long long)s.max_kv_count,
                 s.max_kv_count == 1 ? "" : "s", hd);
    case TensorKind::DqAccumStage:
      return fmt("%lld x %s x %lld head%s x %lld x 4 B (fp32)", B, fa2_St.c_str(), (long long)s.k,
                 s.k == 1 ? "" : "s", fa2_hd);
    case TensorKind::SoftmaxDStage:
      return fmt("%lld x %lld head%s x %s x 4 B", B, (long long)s.k, s.k == 1 ? "" : "s", fa2_St.c_str());
    case TensorKind::QStageRows:
      return fmt("%lld heads x %lld x %lld x %lld B", (long long)(s.P * s.k), hd, d, c);
    case TensorKind::KvStageRows:
      return fmt("%lld KV heads x %lld x %lld x %lld B", (long long)(s.P * s.max_kv_count), hd, d, c);
    case TensorKind::CpuFlashScratch:
      return fmt("2 x %lld x %lld x %s (one thread's attn and grad_attn blocks)", (long long)s.cpu_q_block,
                 (long long)s.cpu_kv_block, c < 4 ? fmt("(4 + %lld) B", c).c_str() : "4 B");
    case TensorKind::CpuFlashForwardScratch:
      return fmt("%lld x (%lld + 2 + %lld) x 4 B%s (one thread's qk block, row max and sum, output accumulator)",
                 (long long)s.cpu_q_block, (long long)s.cpu_kv_block, hd,
                 c < 4 ? fmt(" + %lld x %lld x %lld B", (long long)s.cpu_q_block, (long long)s.cpu_kv_block, c).c_str()
                       : "");
    case TensorKind::Ffn: return fmt("%lld x %s x %lld x %lld B", B, st.c_str(), (long long)s.f, c);
    case TensorKind::FfnTile: return fmt("%s x %lld x %lld B", tile.c_str(), (long long)s.f, c);
    case TensorKind::HiddenTile: return fmt("%s x %lld x %lld B", tile.c_str(), d, c);
    case TensorKind::Logits: return fmt("%lld x %s x %lld vocab x %lld B", B, st.c_str(), (long long)s.V, c);
    case TensorKind::Logits32: return fmt("%lld x %s x %lld vocab x 4 B", B, st.c_str(), (long long)s.V);
    case TensorKind::LogitsTile: return fmt("%s x %lld vocab x %lld B", ltile.c_str(), (long long)s.V, c);
    case TensorKind::LogitsTile32: return fmt("%s x %lld vocab x 4 B", ltile.c_str(), (long long)s.V);
    case TensorKind::HiddenLossTile: return fmt("%s x %lld x %lld B", ltile.c_str(), d, c);
    case TensorKind::FusedLossWorkspace:
      return fmt("%s x %lld vocab fp32 logits tile%s + 3 x %s fp32 row stats%s", tokens(s.fused_seq_tile).c_str(),
                 (long long)s.fused_vocab_tile, c != 4 ? " + its bf16 gradient" : "",
                 tokens(s.fused_seq_tile).c_str(), c != 4 ? fmt(" + %s x %lld fp32 dhidden", tokens(s.fused_seq_tile).c_str(), d).c_str() : "");
    case TensorKind::TokenIds: return fmt("%lld x %s x 8 B", B, st.c_str());
    case TensorKind::RopeTable: return fmt("%lld x %s x %lld x %lld B", B, st.c_str(), hd, c);
    case TensorKind::MasterShards:
    case TensorKind::GradShards:
    case TensorKind::AdamMoments: {
      const char* per = kind == TensorKind::AdamMoments ? "8 B (exp_avg + exp_avg_sq)" : "4 B";
      const std::string ways = s.fsdp ? fmt(" / %lld ranks", (long long)s.W) : std::string(" (unsharded)");
      return fmt("(%lld blocks x %s + %s embedding + %s head) params%s x %s", (long long)s.L,
                 params(s.n_block).c_str(), params(s.n_embed).c_str(), params(s.n_head).c_str(), ways.c_str(), per);
    }
    case TensorKind::DeviceParamShards: {
      const std::string ways = s.fsdp ? fmt(" / %lld ranks", (long long)s.W) : std::string(" (unsharded)");
      return fmt("(%lld blocks x %s + %s embedding + %s head) params%s x %lld B on the device", (long long)s.L,
                 params(s.n_block).c_str(), params(s.n_embed).c_str(), params(s.n_head).c_str(), ways.c_str(), c);
    }
    case TensorKind::BlockFull: return fmt("%s params x %lld B", params(s.n_block).c_str(), c);
    case TensorKind::EmbedFull: return fmt("%s params x %lld B", params(s.n_embed).c_str(), c);
    case TensorKind::HeadFull: return fmt("%s params x %lld B", params(s.n_head).c_str(), c);
    case TensorKind::InputNormTile: return fmt("%s x %lld x %lld B", tokens(s.norm_tile_rows).c_str(), d, c);
    case TensorKind::InputNormTile32: return fmt("%s x %lld x 4 B (fp32)", tokens(s.norm_tile_rows).c_str(), d);
    case TensorKind::BlockShardCast:
      return fmt("%s params / %lld ranks x %lld B", params(s.n_block).c_str(), (long long)s.W, c);
    case TensorKind::AttnOutGrad: return fmt("%lld x %lld x %lld B", d, (long long)s.q_dim, c);
    case TensorKind::AttnProjGrads: return fmt("%s q/k/v params x %lld B", params(s.n_attn_proj).c_str(), c);
    case TensorKind::AttnProjGrads32: return fmt("%s q/k/v params x 4 B (fp32)", params(s.n_attn_proj).c_str());
    case TensorKind::AttnNormGrad: return fmt("%lld x %lld B", d, c);
    case TensorKind::MlpWeightGrad: return fmt("%lld x %lld x %lld B", (long long)s.f, d, c);
    case TensorKind::MlpNormGrad: return fmt("%lld x %lld B", d, c);
    case TensorKind::MlpWeightTile: return fmt("%lld x %lld x %lld B", (long long)s.f, d, c);
    case TensorKind::MlpGradAccum: return fmt("3 x %lld x %lld x 4 B (fp32)", (long long)s.f, d);
    case TensorKind::HeadWeightGrad:
    case TensorKind::EmbedGradDense: return fmt("%lld vocab x %lld x 4 B", (long long)s.V, d);
    case TensorKind::HeadGradAccum: return fmt("%lld vocab x %lld x 4 B (fp32)", (long long)s.V, d);
    case TensorKind::BlockPack: return fmt("%s params x 4 B", params(s.n_block).c_str());
    case TensorKind::HeadPack: return fmt("%s params x 4 B", params(s.n_head).c_str());
    case TensorKind::EmbedPack: return fmt("%s params x 4 B", params(s.n_embed).c_str());
    case TensorKind::BlockShardOut:
      return fmt("%s params / %lld ranks x 4 B", params(s.n_block).c_str(), (long long)s.W);
    case TensorKind::TiedGradBack: return fmt("%s params / %lld ranks x 4 B (the embedding's shard)", params(s.n_embed).c_str(), static_cast<long long>(s.fsdp ? s.W : 1));
    case TensorKind::OptimizerTemp: return "largest shard x 4 B (the offloaded upload's fp32 staging for the cast)";
    case TensorKind::BlasWorkspaces:
      return fmt("CUBLAS_WORKSPACE_CONFIG=%s (%lld KiB x %lld)", BlasWorkspaces::config().c_str(),
                 (long long)BlasWorkspaces::kChunkKiB, (long long)BlasWorkspaces::kChunks);
    case TensorKind::RuntimeOverhead: return "hardware.runtime_overhead_gib";
    case TensorKind::Count: break;
  }
  return "";
}

const char* kind_shape(TensorKind kind) {
  switch (kind) {
    case TensorKind::Hidden: return "[B, s, d]";
    case TensorKind::RowStat: return "[B, s] fp32";
    case TensorKind::QLocal: return "[B, s, H*hd]";
    case TensorKind::KvLocal: return "[B, s, Hkv*hd]";
    case TensorKind::KvLocalRep: return "[B, s, max(Hkv,P)*hd]";
    case TensorKind::QHead: return "[B, S, H/P, hd]";
    case TensorKind::KvHead: return "[B, S, max(1,Hkv/P), hd]";
    case TensorKind::Lse: return "[B, H/P, S] fp32";
    case TensorKind::DqAccum: return "[B, S, H/P, hd] fp32";
    case TensorKind::SoftmaxD: return "[B, H/P, S] fp32";
    case TensorKind::GqaExpanded: return "[B, S, H/P, hd]";
    case TensorKind::QStageLocal: return "[B, s, hps*hd]";
    case TensorKind::KvStageLocal: return "[B, s, kv_stage*hd]";
    case TensorKind::QStageHead: return "[B, S, hps/P, hd]";
    case TensorKind::KvStageHead: return "[B, S, kv/stage, hd]";
    case TensorKind::DqAccumStage: return "[B, S, hps/P, hd] fp32";
    case TensorKind::SoftmaxDStage: return "[B, hps/P, S] fp32";
    case TensorKind::QStageRows: return "[hps, hd, d]";
    case TensorKind::KvStageRows: return "[P*kv/stage, hd, d]";
    case TensorKind::KvStageGathered: return "[B, S, hps/P, hd]";
    case TensorKind::KvStageAccum32: return "[B, S, kv/stage, hd] fp32";
    case TensorKind::GqaExpandedStage: return "[B, S, hps/P, hd]";
    case TensorKind::InputNormTile: return "[norm tile, d]";
    case TensorKind::InputNormTile32: return "[norm tile, d] fp32";
    case TensorKind::CpuFlashScratch: return "[2, q block, kv block] fp32";
    case TensorKind::CpuFlashForwardScratch: return "[q block, kv block + 2 + hd] fp32";
    case TensorKind::Ffn: return "[B, s, f]";
    case TensorKind::FfnTile: return "[tile, f]";
    case TensorKind::HiddenTile: return "[tile, d]";
    case TensorKind::Logits: return "[B, s, V]";
    case TensorKind::Logits32: return "[B, s, V] fp32";
    case TensorKind::LogitsTile: return "[tile, V]";
    case TensorKind::LogitsTile32: return "[tile, V] fp32";
    case TensorKind::HiddenLossTile: return "[tile, d]";
    case TensorKind::FusedLossWorkspace: return "[seq tile, vocab tile] fp32 + row stats";
    case TensorKind::TokenIds: return "[B, s] int64";
    case TensorKind::RopeTable: return "[B, s, hd]";
    case TensorKind::OffloadedInput: return "[B, s, d] host";
    default: return "";
  }
}

}  // namespace odyssey::planner_detail
