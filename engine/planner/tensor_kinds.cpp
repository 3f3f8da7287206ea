// The tensor kinds the planner allocates, one rule each: what the tensor is, its shape, its bytes and
// its formula in words, in enum order (docs/planner.md's table of tensor kinds is printed from here).
// defines: kTensorKindRules, tensor_kind_rule, tensor_kind_docs
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "engine/config/sizes.h"
#include "engine/util/printf_string.h"
#include "engine/layout/documents.h"
#include "engine/layout/tile_grad_rules.h"
#include "engine/planner/plan_shapes.h"
#include "engine/planner/planner.h"

namespace odyssey::planner_detail {

namespace {

using ll = long long;

/// Parameter counts in decimal units: 218103808 -> "218.1M".
std::string params(int64_t n) {
  if (n >= 1000000000) return printf_string("%.2fB", n / 1e9);
  if (n >= 1000000) return printf_string("%.1fM", n / 1e6);
  if (n >= 10000) return printf_string("%.1fK", n / 1e3);
  return std::to_string(n);
}

std::string tokens(int64_t n) { return format_size(n) + " tokens"; }
const char* plural(int64_t n) { return n == 1 ? "" : "s"; }

// The pieces the formulas share: local tokens s, the sequence S, FA-2's padded query length (S in
// steps of 128), and a tile of n positions over B sequences ("4K tokens" for B = 1, "2 x 4K tokens")
std::string local_tokens(const PlanShapes& s) { return tokens(s.s); }
std::string seq_tokens(const PlanShapes& s) { return tokens(s.S); }
std::string fa2_tokens(const PlanShapes& s) { return tokens(s.fa2_seq); }
std::string tile_text(const PlanShapes& s, const SequenceTile& tile) {
  return s.B == 1 ? tokens(tile.positions) : printf_string("%lld x %s", ll(s.B), tokens(tile.positions).c_str());
}

/// A sharded group's reduce-scatter output, [shard] fp32 (0 unsharded: the pack is the result).
int64_t shard_out_bytes(const FlatShardLayout& layout) {
  return layout.shards > 1 ? sat_product({layout.shard_numel, 4}) : 0;
}
/// A sharded group's shard cast for the all-gather, [shard] compute dtype (gathers_from_cast).
int64_t shard_cast_bytes(const PlanShapes& s, const FlatShardLayout& layout) {
  return gathers_from_cast(layout.shards, s.c, s.offload_optimizer) ? sat_product({layout.shard_numel, s.c}) : 0;
}
/// "218.1M params / 8 ranks x 4 B"
std::string shard_text(const PlanShapes& s, int64_t numel, int64_t element_bytes) {
  return printf_string("%s params / %lld ranks x %lld B", params(numel).c_str(), ll(s.W), ll(element_bytes));
}

/// Every group's shard, summed: L blocks, the embedding and the head (elements).
int64_t all_shards_numel(const PlanShapes& s) {
  return sat_add(sat_mul(s.L, s.block_layout.shard_numel), s.embed_layout.shard_numel + s.head_layout.shard_numel);
}
/// "(32 blocks x 218.1M + 525.3M embedding + 525.3M head) params / 8 ranks"
std::string all_shards_text(const PlanShapes& s) {
  const std::string ways =
      s.fsdp ? printf_string(" / %lld rank%s", ll(s.W), s.W == 1 ? "" : "s") : std::string(" (unsharded)");
  return printf_string("(%lld blocks x %s + %s embedding + %s head) params%s", ll(s.L), params(s.n_block).c_str(),
                       params(s.n_embed).c_str(), params(s.n_head).c_str(), ways.c_str());
}

// Formulas several kinds share (one [B, s, d], one head-layout [B, S, H/P, hd], one stage's).
std::string hidden_formula(const PlanShapes& s) {
  return printf_string("%lld x %s x %lld x %lld B", ll(s.B), local_tokens(s).c_str(), ll(s.d), ll(s.c));
}
std::string q_head_formula(const PlanShapes& s) {
  return printf_string("%lld x %s x %lld heads x %lld x %lld B", ll(s.B), seq_tokens(s).c_str(), ll(s.hq), ll(s.hd),
                       ll(s.c));
}
/// "1 x 96K tokens (the longest segment)": one row's segment under document masking
std::string segment_tokens(const PlanShapes& s) { return "1 x " + tokens(s.kernel_seq) + " (the longest segment)"; }
std::string q_stage_head_formula(const PlanShapes& s) {
  return printf_string("%lld x %s x %lld head%s x %lld x %lld B", ll(s.B), seq_tokens(s).c_str(), ll(s.k), plural(s.k),
                       ll(s.hd), ll(s.c));
}

/// A log-sum-exp's last dim over `positions` query positions as the rank's kernel returns it
/// (lse_positions: the memory-efficient kernel pads it to a multiple of 32), and its text.
int64_t lse_seq(const PlanShapes& s, int64_t positions) { return lse_positions(s.lse_kernel, positions); }
std::string lse_tokens(const PlanShapes& s, int64_t positions) {
  const int64_t padded = lse_seq(s, positions);
  return padded == positions
             ? tokens(positions)
             : tokens(padded) + " (" + tokens(positions) + " padded to 32 by the memory-efficient kernel)";
}

/// One block's kept attention as it travels (KeptAttentionPayload, engine/layout/planned_buffers.h):
/// the output [B, S, H/P, hd] (Untied's [B, s, H*hd], the same bytes), then one [B, k, S] fp32
/// log-sum-exp per stage (one stage of all the rank's heads without Untied Ulysses; S padded to 32
/// on the memory-efficient kernel: lse_positions).
KeptAttentionPayload kept_payload(const PlanShapes& s) {
  return kept_attention_step_payload(s.B, s.S, s.hq, s.hd, s.c, s.k, lse_seq(s, s.S));
}
std::string kept_payload_formula(const PlanShapes& s) {
  return printf_string("(%s) + %lld stage%s x (%lld x %s x %lld head%s x 4 B), each part from a multiple of %lld B",
                       q_head_formula(s).c_str(), ll(s.stages), plural(s.stages), ll(s.B), lse_tokens(s, s.S).c_str(),
                       ll(s.k), plural(s.k), ll(KeptAttentionPayload::kAlignment));
}

/// KIND(Hidden): the enumerator and its name, so the two cannot differ.
#define KIND(name) TensorKind::name, #name

// One rule a kind, in enum order. Shapes use docs/planner.md's notation, with hps the query heads
// of one Untied stage over all ranks (heads_per_stage) and kvs the KV heads a stage reads per rank.
// The table is laid out by hand, one kind to a few lines (clang-format would put every lambda on
// three lines and double its length).
// clang-format off
constexpr TensorKindRule kTensorKindRules[] = {
    // activations, local layout [B, s, ...]
    {KIND(Hidden), "[B, s, d]",
     "a hidden state: block input and output, norm outputs, residuals, the gradients between them",
     [](const PlanShapes& s) { return sat_product({s.t, s.d, s.c}); }, hidden_formula},
    {KIND(RowStat), "[B, s] fp32", "an RMSNorm's saved 1/rms; the fused loss's per-token loss",
     [](const PlanShapes& s) { return sat_product({s.t, 4}); },
     [](const PlanShapes& s) { return printf_string("%lld x %s x 4 B", ll(s.B), local_tokens(s).c_str()); }},
    {KIND(QLocal), "[B, s, H*hd]",
     "query width, local layout: the q projection, its head norm and RoPE, the attention output before "
     "o_proj, their gradients",
     [](const PlanShapes& s) { return sat_product({s.t, s.q_dim, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld heads x %lld x %lld B", ll(s.B), local_tokens(s).c_str(), ll(s.H), ll(s.hd),
                  ll(s.c));
     }},
    {KIND(KvLocal), "[B, s, Hkv*hd]", "the k or v projection, its head norm and RoPE, their gradients",
     [](const PlanShapes& s) { return sat_product({s.t, s.kv_dim, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld KV heads x %lld x %lld B", ll(s.B), local_tokens(s).c_str(), ll(s.Hkv),
                  ll(s.hd), ll(s.c));
     }},
    {KIND(KvLocalRep), "[B, s, max(Hkv, P)*hd]", "K or V with its KV heads replicated up to the Ulysses degree",
     [](const PlanShapes& s) { return sat_product({s.t, s.hkv_rep, s.hd, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x max(%lld, P=%lld) KV heads x %lld x %lld B", ll(s.B), local_tokens(s).c_str(),
                  ll(s.Hkv), ll(s.P), ll(s.hd), ll(s.c));
     }},
    // activations, head layout after the all-to-all [B, S, heads/P, hd]
    {KIND(QHead), "[B, S, H/P, hd]", "queries or the attention output in the head layout; flash backward's dq",
     [](const PlanShapes& s) { return sat_product({s.Th, s.hq, s.hd, s.c}); }, q_head_formula},
    {KIND(KvHead), "[B, S, max(1, Hkv/P), hd]", "K or V in the head layout; flash backward's dK or dV",
     [](const PlanShapes& s) { return sat_product({s.Th, s.hkv, s.hd, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld KV head%s x %lld x %lld B", ll(s.B), seq_tokens(s).c_str(), ll(s.hkv),
                  plural(s.hkv), ll(s.hd), ll(s.c));
     }},
    {KIND(Lse), "[B, H/P, S'] fp32", "flash attention's log-sum-exp (S' = S padded as its kernel pads it)",
     [](const PlanShapes& s) { return sat_product({s.B, lse_seq(s, s.S), s.hq, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %lld heads x %s x 4 B", ll(s.B), ll(s.hq), lse_tokens(s, s.S).c_str());
     }},
    // FlashAttention-2's backward pads its own fp32 buffers (PlanShapes::fa2_seq, fa2_head_dim)
    {KIND(DqAccum), "[B, S, H/P, hd] fp32",
     "flash-attention backward's dq accumulator (FlashAttention-2 pads S to 128 and hd to 32)",
     [](const PlanShapes& s) { return sat_product({s.B, s.fa2_seq, s.hq, s.fa2_head_dim, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld heads x %lld x 4 B (fp32)", ll(s.B), fa2_tokens(s).c_str(), ll(s.hq),
                  ll(s.fa2_head_dim));
     }},
    {KIND(SoftmaxD), "[B, H/P, S] fp32", "FlashAttention-2 backward's softmax_d, rowsum(dO * O) (S padded to 128)",
     [](const PlanShapes& s) { return sat_product({s.B, s.fa2_seq, s.hq, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %lld heads x %s x 4 B", ll(s.B), ll(s.hq), fa2_tokens(s).c_str());
     }},
    {KIND(GqaExpanded), "[B, S, H/P, hd]", "flash backward's dK or dV at the query-head count (GQA)",
     [](const PlanShapes& s) { return sat_product({s.Th, s.hq, s.hd, s.c}); }, q_head_formula},
    // Untied Ulysses: one stage of hps query heads (hps/P = k per rank)
    {KIND(QStageLocal), "[B, s, hps*hd]",
     "one stage's q projection or output slice, local layout; its d o in backward",
     [](const PlanShapes& s) { return sat_product({s.t, s.k, s.P, s.hd, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld heads x %lld x %lld B", ll(s.B), local_tokens(s).c_str(), ll(s.k * s.P),
                  ll(s.hd), ll(s.c));
     }},
    {KIND(KvStageLocal), "[B, s, P*kvs*hd]", "one stage's k or v projection, local layout",
     [](const PlanShapes& s) { return sat_product({s.t, s.max_kv_count, s.P, s.hd, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld KV heads x %lld x %lld B", ll(s.B), local_tokens(s).c_str(),
                  ll(s.max_kv_count * s.P), ll(s.hd), ll(s.c));
     }},
    {KIND(QStageHead), "[B, S, hps/P, hd]", "one stage's attention output, d o or dq in the head layout",
     [](const PlanShapes& s) { return sat_product({s.Th, s.k, s.hd, s.c}); }, q_stage_head_formula},
    {KIND(KvStageHead), "[B, S, kvs, hd]", "one stage's flash backward dK or dV",
     [](const PlanShapes& s) { return sat_product({s.Th, s.max_kv_count, s.hd, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld KV head%s x %lld x %lld B", ll(s.B), seq_tokens(s).c_str(), ll(s.max_kv_count),
                  plural(s.max_kv_count), ll(s.hd), ll(s.c));
     }},
    {KIND(DqAccumStage), "[B, S, hps/P, hd] fp32", "flash backward's dq accumulator of one stage (padded as DqAccum)",
     [](const PlanShapes& s) { return sat_product({s.B, s.fa2_seq, s.k, s.fa2_head_dim, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld head%s x %lld x 4 B (fp32)", ll(s.B), fa2_tokens(s).c_str(), ll(s.k),
                  plural(s.k), ll(s.fa2_head_dim));
     }},
    {KIND(SoftmaxDStage), "[B, hps/P, S] fp32", "FlashAttention-2 backward's softmax_d of one stage",
     [](const PlanShapes& s) { return sat_product({s.B, s.fa2_seq, s.k, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %lld head%s x %s x 4 B", ll(s.B), ll(s.k), plural(s.k), fa2_tokens(s).c_str());
     }},
    {KIND(QStageRows), "[hps, hd, d]",
     "the rows of wq one stage projects with (index_select; its backward keeps them)",
     [](const PlanShapes& s) { return sat_product({s.P, s.k, s.hd, s.d, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld heads x %lld x %lld x %lld B", ll(s.P * s.k), ll(s.hd), ll(s.d), ll(s.c));
     }},
    {KIND(KvStageRows), "[P*kvs, hd, d]", "the rows of wk or wv of one KV range (its backward keeps them)",
     [](const PlanShapes& s) { return sat_product({s.P, s.max_kv_count, s.hd, s.d, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld KV heads x %lld x %lld x %lld B", ll(s.P * s.max_kv_count), ll(s.hd), ll(s.d), ll(s.c));
     }},
    // the engine's buffers for stages that gather K/V per query head, and its fp32 dK/dV
    // accumulators (UntiedStageBuffers, engine/layout/heads.h: 0 when no stage needs one)
    {KIND(KvStageGathered), "[B, S, hps/P, hd]",
     "a stage's K or V gathered to its query heads' KV slots (0 when no stage gathers)",
     [](const PlanShapes& s) { return sat_product({s.untied_buffers.kv_gathered, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld head%s x %lld x %lld B (K/V per query head)", ll(s.B), seq_tokens(s).c_str(),
                  ll(s.k), plural(s.k), ll(s.hd), ll(s.c));
     }},
    {KIND(KvStageAccum32), "[B, S, kvs, hd] fp32",
     "dK or dV summed over the stages of a KV range (0 when no range needs it)",
     [](const PlanShapes& s) { return sat_product({s.untied_buffers.kv_accum_fp32, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld KV head%s x %lld x 4 B (fp32)", ll(s.B), seq_tokens(s).c_str(),
                  ll(s.max_kv_count), plural(s.max_kv_count), ll(s.hd));
     }},
    {KIND(StageStaging), "[P, B, s, max(hps/P, kvs), hd]",
     "the Untied stages' all-to-all staging: allocated once per pass, every exchange goes through it (0 at P = 1)",
     [](const PlanShapes& s) { return sat_product({s.untied_buffers.staging, s.c}); },
     [](const PlanShapes& s) {
       // the heads of the widest exchange, from the staging the layout sized (0 at P = 1)
       const int64_t widest = s.untied_buffers.staging / std::max<int64_t>(1, s.P * s.B * s.s * s.hd);
       return printf_string("%lld ranks x %lld x %s x %lld head%s x %lld x %lld B", ll(s.P), ll(s.B),
                  local_tokens(s).c_str(), ll(widest), plural(widest), ll(s.hd), ll(s.c));
     }},
    {KIND(GqaExpandedStage), "[B, S, hps/P, hd]",
     "one stage's dK or dV at its query-head count (GQA); its K or V repeated to the query heads",
     [](const PlanShapes& s) { return sat_product({s.Th, s.k, s.hd, s.c}); }, q_stage_head_formula},
    {KIND(InputNormTile), "[norm tile, d]",
     "one row tile of the Untied input norm's backward (input_norm_tile_rows)",
     [](const PlanShapes& s) { return sat_product({s.norm_tile_rows, s.d, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld x %lld B", tokens(s.norm_tile_rows).c_str(), ll(s.d), ll(s.c));
     }},
    {KIND(InputNormTile32), "[norm tile, d] fp32", "the Untied input norm's 1/rms pass, one row tile (off the CUDA path)",
     [](const PlanShapes& s) { return sat_product({s.norm_tile_rows, s.d, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld x 4 B (fp32)", tokens(s.norm_tile_rows).c_str(), ll(s.d));
     }},
    // Document masking (engine/parallel/flash_attention.cpp): one kernel call per segment of a row,
    // n = kernel_seq tokens at most; its results exist beside the whole output, LSE or gradients
    // until copied into them. 0 bytes without document masking and on CUDA in half precision, where
    // one variable-length call writes the whole ones (PlanShapes::segment_calls).
    {KIND(QSegment), "[n, H/P, hd]",
     "document masking: one segment's attention output (forward) or dq (backward) before it is copied "
     "into the whole tensor; n the longest segment",
     [](const PlanShapes& s) { return s.segment_calls ? sat_product({s.kernel_seq, s.hq, s.hd, s.c}) : 0; },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld heads x %lld x %lld B", segment_tokens(s).c_str(), ll(s.hq), ll(s.hd), ll(s.c));
     }},
    {KIND(KvSegment), "[n, max(1, Hkv/P), hd]", "document masking: one segment's dK or dV before it is copied in",
     [](const PlanShapes& s) { return s.segment_calls ? sat_product({s.kernel_seq, s.hkv, s.hd, s.c}) : 0; },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld KV head%s x %lld x %lld B", segment_tokens(s).c_str(), ll(s.hkv), plural(s.hkv),
                  ll(s.hd), ll(s.c));
     }},
    {KIND(LseSegment), "[H/P, n'] fp32", "document masking: one segment's log-sum-exp before it is copied in",
     [](const PlanShapes& s) { return s.segment_calls ? sat_product({lse_seq(s, s.kernel_seq), s.hq, 4}) : 0; },
     [](const PlanShapes& s) {
       return printf_string("%lld heads x 1 x %s (the longest segment) x 4 B", ll(s.hq), lse_tokens(s, s.kernel_seq).c_str());
     }},
    {KIND(QStageSegment), "[n, hps/P, hd]", "document masking: one Untied stage's segment output or dq",
     [](const PlanShapes& s) { return s.segment_calls ? sat_product({s.kernel_seq, s.k, s.hd, s.c}) : 0; },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld head%s x %lld x %lld B", segment_tokens(s).c_str(), ll(s.k), plural(s.k), ll(s.hd),
                  ll(s.c));
     }},
    {KIND(KvStageSegment), "[n, kvs, hd]", "document masking: one Untied stage's segment dK or dV",
     [](const PlanShapes& s) { return s.segment_calls ? sat_product({s.kernel_seq, s.max_kv_count, s.hd, s.c}) : 0; },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld KV head%s x %lld x %lld B", segment_tokens(s).c_str(), ll(s.max_kv_count),
                  plural(s.max_kv_count), ll(s.hd), ll(s.c));
     }},
    {KIND(LseStageSegment), "[hps/P, n'] fp32", "document masking: one Untied stage's segment log-sum-exp",
     [](const PlanShapes& s) { return s.segment_calls ? sat_product({lse_seq(s, s.kernel_seq), s.k, 4}) : 0; },
     [](const PlanShapes& s) {
       return printf_string("%lld head%s x 1 x %s (the longest segment) x 4 B", ll(s.k), plural(s.k),
                            lse_tokens(s, s.kernel_seq).c_str());
     }},
    // the CPU flash-attention kernel's per-thread scratch (blocks: PlanShapes::cpu_q_block)
    {KIND(CpuFlashScratch), "[2, q block, kv block] fp32",
     "the CPU flash-attention backward's per-thread attn and grad_attn blocks (one thread; with "
     "compute-dtype copies below fp32)",
     [](const PlanShapes& s) { return sat_product({2, s.cpu_q_block, s.cpu_kv_block, (4 + (s.c < 4 ? s.c : 0))}); },
     [](const PlanShapes& s) {
       return printf_string("2 x %lld x %lld x %s (one thread's attn and grad_attn blocks)", ll(s.cpu_q_block),
                  ll(s.cpu_kv_block), s.c < 4 ? printf_string("(4 + %lld) B", ll(s.c)).c_str() : "4 B");
     }},
    // ATen's cpu_flash_attention forward: size_per_thread = q*kv + q + q + q*hd accumulator floats,
    // and a reduced-type [q, kv] copy below fp32 (seen on PyTorch 2.11: 70144 B at q 64, kv 256, hd 16)
    {KIND(CpuFlashForwardScratch), "[q block, kv block + 2 + hd] fp32",
     "the CPU flash-attention forward's per-thread buffer (one thread): qk block, row max and sum, output "
     "accumulator (+ a compute-dtype qk block below fp32)",
     [](const PlanShapes& s) {
       return sat_product({s.cpu_q_block, s.cpu_kv_block + 2 + s.hd, 4}) +
              (s.c < 4 ? sat_product({s.cpu_q_block, s.cpu_kv_block, s.c}) : 0);
     },
     [](const PlanShapes& s) {
       return printf_string("%lld x (%lld + 2 + %lld) x 4 B%s (one thread's qk block, row max and sum, output accumulator)",
                  ll(s.cpu_q_block), ll(s.cpu_kv_block), ll(s.hd),
                  s.c < 4 ? printf_string(" + %lld x %lld x %lld B", ll(s.cpu_q_block), ll(s.cpu_kv_block), ll(s.c)).c_str()
                          : "");
     }},
    // MLP
    {KIND(Ffn), "[B, s, f]", "an MLP intermediate: gate, up, their product and their gradients",
     [](const PlanShapes& s) { return sat_product({s.t, s.f, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld x %lld B", ll(s.B), local_tokens(s).c_str(), ll(s.f), ll(s.c));
     }},
    {KIND(FfnTile), "[tile, f]", "an MLP intermediate of one tile (tiled MLP)",
     [](const PlanShapes& s) { return sat_product({s.mlp_tile.rows, s.f, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld x %lld B", tile_text(s, s.mlp_tile).c_str(), ll(s.f), ll(s.c));
     }},
    {KIND(HiddenTile), "[tile, d]", "one tile's down projection or input gradient (tiled MLP)",
     [](const PlanShapes& s) { return sat_product({s.mlp_tile.rows, s.d, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld x %lld B", tile_text(s, s.mlp_tile).c_str(), ll(s.d), ll(s.c));
     }},
    // loss
    {KIND(Logits), "[B, s, V]", "the logits or their gradient",
     [](const PlanShapes& s) { return sat_product({s.t, s.V, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld vocab x %lld B", ll(s.B), local_tokens(s).c_str(), ll(s.V), ll(s.c));
     }},
    {KIND(Logits32), "[B, s, V] fp32", "the logits in fp32, their log-softmax, the gradients of both",
     [](const PlanShapes& s) { return sat_product({s.t, s.V, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld vocab x 4 B", ll(s.B), local_tokens(s).c_str(), ll(s.V));
     }},
    {KIND(LogitsTile), "[loss tile, V]", "one loss tile's logits or their gradient (tiled loss)",
     [](const PlanShapes& s) { return sat_product({s.loss_tile.rows, s.V, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld vocab x %lld B", tile_text(s, s.loss_tile).c_str(), ll(s.V), ll(s.c));
     }},
    {KIND(LogitsTile32), "[loss tile, V] fp32", "one loss tile's fp32 logits, log-softmax or its gradient",
     [](const PlanShapes& s) { return sat_product({s.loss_tile.rows, s.V, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld vocab x 4 B", tile_text(s, s.loss_tile).c_str(), ll(s.V));
     }},
    {KIND(HiddenLossTile), "[loss tile, d]", "one loss tile's hidden-state gradient",
     [](const PlanShapes& s) { return sat_product({s.loss_tile.rows, s.d, s.c}); },
     [](const PlanShapes& s) {
       return printf_string("%s x %lld x %lld B", tile_text(s, s.loss_tile).c_str(), ll(s.d), ll(s.c));
     }},
    // the kernel's own plan of its workspace (PlanShapes::fused_loss_workspace_bytes; beyond range
    // for a shape the kernel refuses)
    {KIND(FusedLossWorkspace), "[seq tile, vocab tile] fp32 + row stats",
     "the fused linear + cross-entropy kernel's workspace (CUDA path)",
     [](const PlanShapes& s) { return s.fused_loss_workspace_bytes; },
     [](const PlanShapes& s) {
       const std::string rows = tokens(s.fused_seq_tile);
       return printf_string("%s x %lld vocab fp32 logits tile%s + 3 x %s fp32 row stats%s", rows.c_str(), ll(s.fused_vocab_tile),
                  s.c != 4 ? " + its bf16 gradient" : "", rows.c_str(),
                  s.c != 4 ? printf_string(" + %s x %lld fp32 dhidden", rows.c_str(), ll(s.d)).c_str() : "");
     }},
    // step inputs
    {KIND(TokenIds), "[B, s] int64", "token ids or labels",
     [](const PlanShapes& s) { return sat_product({s.t, 8}); },
     [](const PlanShapes& s) { return printf_string("%lld x %s x 8 B", ll(s.B), local_tokens(s).c_str()); }},
    // one row all sequences share, or one a sequence where positions restart in each document
    // (rope_position_rows, engine/layout/documents.h)
    {KIND(PositionIds), "[rows, s] int64", "the RoPE positions (rows: 1, or B where they restart per document)",
     [](const PlanShapes& s) { return sat_product({s.rope_rows, s.s, 8}); },
     [](const PlanShapes& s) { return printf_string("%lld x %s x 8 B", ll(s.rope_rows), local_tokens(s).c_str()); }},
    {KIND(RopeTable), "[rows, s, hd/2] fp32", "the RoPE cos or sin table (rows as the positions')",
     [](const PlanShapes& s) { return sat_product({s.rope_rows, s.s, s.hd / 2, kRopeTableBytes}); },
     [](const PlanShapes& s) {
       return printf_string("%lld x %s x %lld x %lld B", ll(s.rope_rows), local_tokens(s).c_str(), ll(s.hd / 2),
                            ll(kRopeTableBytes));
     }},
    // parameters and their gradients: every group's shard (FlatShardLayout, engine/layout/planned_buffers.h)
    {KIND(MasterShards), "[Σ_g ceil(N_g/W)] fp32", "the fp32 master shards of every group",
     [](const PlanShapes& s) { return sat_product({all_shards_numel(s), 4}); },
     [](const PlanShapes& s) { return all_shards_text(s) + " x 4 B"; }},
    {KIND(GradShards), "[Σ_g ceil(N_g/W)] fp32", "the fp32 gradient shards of every group",
     [](const PlanShapes& s) { return sat_product({all_shards_numel(s), 4}); },
     [](const PlanShapes& s) { return all_shards_text(s) + " x 4 B"; }},
    {KIND(AdamMoments), "2 x [Σ_g ceil(N_g/W)] fp32", "AdamW's exp_avg and exp_avg_sq shards",
     [](const PlanShapes& s) { return sat_product({all_shards_numel(s), 8}); },
     [](const PlanShapes& s) { return all_shards_text(s) + " x 8 B (exp_avg + exp_avg_sq)"; }},
    {KIND(DeviceParamShards), "[Σ_g ceil(N_g/W)]",
     "every group's shard in the compute dtype on the device (optimizer offload)",
     [](const PlanShapes& s) { return s.offload_optimizer ? sat_product({all_shards_numel(s), s.c}) : 0; },
     [](const PlanShapes& s) { return all_shards_text(s) + printf_string(" x %lld B on the device", ll(s.c)); }},
    // gathered and packed buffers hold the padded group (shard x ranks), as the engine allocates them
    {KIND(BlockFull), "[ceil(N_block/W)*W]", "one block's unsharded parameters",
     [](const PlanShapes& s) { return sat_product({s.block_layout.padded_numel, s.c}); },
     [](const PlanShapes& s) { return printf_string("%s params x %lld B", params(s.n_block).c_str(), ll(s.c)); }},
    {KIND(EmbedFull), "[ceil(N_embed/W)*W]", "the embedding's unsharded parameters",
     [](const PlanShapes& s) { return sat_product({s.embed_layout.padded_numel, s.c}); },
     [](const PlanShapes& s) { return printf_string("%s params x %lld B", params(s.n_embed).c_str(), ll(s.c)); }},
    {KIND(HeadFull), "[ceil(N_head/W)*W]", "the head group's unsharded parameters (final norm [+ LM head])",
     [](const PlanShapes& s) { return sat_product({s.head_layout.padded_numel, s.c}); },
     [](const PlanShapes& s) { return printf_string("%s params x %lld B", params(s.n_head).c_str(), ll(s.c)); }},
    // fp32 compute gathers straight from the master shard, an offloaded optimizer from the device's
    // compute-dtype shard (FlatParamGroup::unshard_async): no cast
    // (gathers_from_cast, engine/layout/planned_buffers.h)
    {KIND(BlockShardCast), "[ceil(N_block/W)]", "a block shard cast to the compute dtype for the all-gather",
     [](const PlanShapes& s) { return shard_cast_bytes(s, s.block_layout); },
     [](const PlanShapes& s) { return shard_text(s, s.n_block, s.c); }},
    {KIND(EmbedShardCast), "[ceil(N_embed/W)]", "the embedding's shard cast to the compute dtype for the all-gather",
     [](const PlanShapes& s) { return shard_cast_bytes(s, s.embed_layout); },
     [](const PlanShapes& s) { return shard_text(s, s.n_embed, s.c); }},
    {KIND(HeadShardCast), "[ceil(N_head/W)]", "the head group's shard cast to the compute dtype for the all-gather",
     [](const PlanShapes& s) { return shard_cast_bytes(s, s.head_layout); },
     [](const PlanShapes& s) { return shard_text(s, s.n_head, s.c); }},
    {KIND(AttnOutGrad), "[d, H*hd]", "the o_proj weight's gradient (the attention backward's first)",
     [](const PlanShapes& s) { return sat_product({s.d, s.q_dim, s.c}); },
     [](const PlanShapes& s) { return printf_string("%lld x %lld x %lld B", ll(s.d), ll(s.q_dim), ll(s.c)); }},
    {KIND(AttnProjGrads), "[H*hd, d] + 2 x [Hkv*hd, d] (+ 2 x [hd])",
     "the wq, wk, wv (+ q/k norm) weight gradients of one block",
     [](const PlanShapes& s) { return sat_product({s.n_attn_proj, s.c}); },
     [](const PlanShapes& s) { return printf_string("%s q/k/v params x %lld B", params(s.n_attn_proj).c_str(), ll(s.c)); }},
    {KIND(AttnProjGrads32), "[H*hd, d] + 2 x [Hkv*hd, d] (+ 2 x [hd]) fp32",
     "the same in fp32: the Untied backward's sums over its stages",
     [](const PlanShapes& s) { return sat_product({s.n_attn_proj, 4}); },
     [](const PlanShapes& s) { return printf_string("%s q/k/v params x 4 B (fp32)", params(s.n_attn_proj).c_str()); }},
    {KIND(AttnNormGrad), "[d]", "the attention RMSNorm weight's gradient (the attention backward's last)",
     [](const PlanShapes& s) { return sat_product({s.d, s.c}); },
     [](const PlanShapes& s) { return printf_string("%lld x %lld B", ll(s.d), ll(s.c)); }},
    {KIND(MlpWeightGrad), "[f, d]", "one MLP projection's weight gradient (gate, up or down)",
     [](const PlanShapes& s) { return sat_product({s.f, s.d, s.c}); },
     [](const PlanShapes& s) { return printf_string("%lld x %lld x %lld B", ll(s.f), ll(s.d), ll(s.c)); }},
    {KIND(MlpNormGrad), "[d]", "the MLP RMSNorm weight's gradient (the MLP backward's last)",
     [](const PlanShapes& s) { return sat_product({s.d, s.c}); },
     [](const PlanShapes& s) { return printf_string("%lld x %lld B", ll(s.d), ll(s.c)); }},
    // the tiled MLP's weight gradients over its tiles (engine/layout/tile_grad_rules.h)
    {KIND(MlpWeightTile), "[f, d]",
     "one tile's weight-gradient product before it is added (0 unless bf16 off the CUDA path)",
     [](const PlanShapes& s) {
       return tile_weight_grad_needs_temporary(s.c == 4, s.cuda_target) ? sat_product({s.d, s.f, s.c}) : 0;
     },
     [](const PlanShapes& s) { return printf_string("%lld x %lld x %lld B", ll(s.f), ll(s.d), ll(s.c)); }},
    {KIND(MlpGradAccum), "3 x [f, d] fp32",
     "the tiled MLP's weight gradients summed over the tiles (0 with fp32 weights: the gradients)",
     [](const PlanShapes& s) { return mlp_tile_grads_need_accumulators(s.c == 4) ? sat_product({3, s.d, s.f, 4}) : 0; },
     [](const PlanShapes& s) { return printf_string("3 x %lld x %lld x 4 B (fp32)", ll(s.f), ll(s.d)); }},
    {KIND(HeadWeightGrad), "[V, d]", "the LM-head weight's gradient (under the tiled loss: one tile's, before it is added)",
     [](const PlanShapes& s) { return sat_product({s.V, s.d, s.c}); },
     [](const PlanShapes& s) { return printf_string("%lld vocab x %lld x %lld B", ll(s.V), ll(s.d), ll(s.c)); }},
    {KIND(HeadGradAccum), "[V, d] fp32", "the LM-head gradient accumulated over the loss tiles",
     [](const PlanShapes& s) { return sat_product({s.V, s.d, 4}); },
     [](const PlanShapes& s) { return printf_string("%lld vocab x %lld x 4 B (fp32)", ll(s.V), ll(s.d)); }},
    // the engine's [padded] flat buffer, whose first V x d elements the scatter writes
    {KIND(EmbedGradDense), "[ceil(V*d/W)*W] fp32", "the dense embedding gradient, the reduce-scatter's input",
     [](const PlanShapes& s) { return sat_product({s.embed_layout.padded_numel, 4}); },
     [](const PlanShapes& s) {
       return printf_string("%lld vocab x %lld%s x 4 B", ll(s.V), ll(s.d),
                            s.embed_layout.padded_numel > s.n_embed ? " (padded to a multiple of the ranks)" : "");
     }},
    {KIND(EmbedGradRows32), "[B*s, d] fp32",
     "the embedding gradient's rows cast to fp32 for the scatter (0 in fp32: the rows themselves)",
     [](const PlanShapes& s) { return s.c == 4 ? 0 : sat_product({s.t, s.d, 4}); },
     [](const PlanShapes& s) { return printf_string("%lld tokens x %lld x 4 B", ll(s.t), ll(s.d)); }},
    {KIND(BlockPack), "[ceil(N_block/W)*W] fp32", "a block's gradients packed for the reduce-scatter",
     [](const PlanShapes& s) { return sat_product({s.block_layout.padded_numel, 4}); },
     [](const PlanShapes& s) { return printf_string("%s params x 4 B", params(s.n_block).c_str()); }},
    // tied: the embedding packs its own
    {KIND(HeadPack), "[ceil(N_head/W)*W] fp32", "the head group's packed gradients",
     [](const PlanShapes& s) { return sat_product({s.head_layout.padded_numel, 4}); },
     [](const PlanShapes& s) { return printf_string("%s params x 4 B", params(s.n_head).c_str()); }},
    {KIND(EmbedPack), "[ceil(N_embed/W)*W] fp32", "the embedding's packed gradients",
     [](const PlanShapes& s) { return sat_product({s.embed_layout.padded_numel, 4}); },
     [](const PlanShapes& s) { return printf_string("%s params x 4 B", params(s.n_embed).c_str()); }},
    {KIND(BlockShardOut), "[ceil(N_block/W)] fp32", "a block's reduce-scatter output before it is added into grad",
     [](const PlanShapes& s) { return shard_out_bytes(s.block_layout); },
     [](const PlanShapes& s) { return shard_text(s, s.n_block, 4); }},
    {KIND(EmbedShardOut), "[ceil(N_embed/W)] fp32", "the embedding's reduce-scatter output before it is added into grad",
     [](const PlanShapes& s) { return shard_out_bytes(s.embed_layout); },
     [](const PlanShapes& s) { return shard_text(s, s.n_embed, 4); }},
    {KIND(HeadShardOut), "[ceil(N_head/W)] fp32", "the head group's reduce-scatter output before it is added into grad",
     [](const PlanShapes& s) { return shard_out_bytes(s.head_layout); },
     [](const PlanShapes& s) { return shard_text(s, s.n_head, 4); }},
    // The tied embedding's second gradient contribution on a GPU with the states offloaded: the
    // first (the LM head's, already on the host) comes back up for the sum (accumulate_gradient).
    {KIND(TiedGradBack), "[ceil(N_embed/W)] fp32",
     "the tied embedding's first gradient back from the host (optimizer offload, CUDA path)",
     [](const PlanShapes& s) {
       return s.tied && s.offload_optimizer && s.cuda_target ? sat_product({s.embed_layout.shard_numel, 4}) : 0;
     },
     [](const PlanShapes& s) {
       return printf_string("%s params / %lld ranks x 4 B (the embedding's shard)", params(s.n_embed).c_str(),
                  ll(s.fsdp ? s.W : 1));
     }},
    // On a GPU with the states offloaded, [largest shard] fp32: the upload's device staging buffer
    // for the cast (FlatParamGroup::refresh_device_params; an fp32 run copies straight into the
    // parameters). Both AdamW passes are fused, without a temporary: ATen's kernel on the device
    // (AdamW::device_pass), the host's pass on the CPU (engine/train/optimizer.cpp).
    {KIND(OptimizerTemp), "[largest shard] fp32",
     "the offloaded upload's fp32 staging over the largest shard (CUDA path, compute dtype not fp32)",
     [](const PlanShapes& s) {
       const bool optimizer_temp = s.cuda_target && s.offload_optimizer && s.c != 4;
       return !optimizer_temp ? 0
                              : sat_product({std::max({s.block_layout.shard_numel, s.embed_layout.shard_numel,
                                                       s.head_layout.shard_numel}),
                                             4});
     },
     [](const PlanShapes&) -> std::string {
       return "largest shard x 4 B (the offloaded upload's fp32 staging for the cast)";
     }},
    {KIND(BlasWorkspaces), "CUBLAS_WORKSPACE_CONFIG bytes",
     "one cuBLAS workspace (CUDA path; BlasWorkspaces in engine/layout/planned_buffers.h)",
     [](const PlanShapes& s) { return s.cuda_target ? BlasWorkspaces::kBytesEach : 0; },
     [](const PlanShapes&) {
       return printf_string("CUBLAS_WORKSPACE_CONFIG=%s (%lld KiB x %lld)", BlasWorkspaces::config().c_str(),
                  ll(BlasWorkspaces::kChunkKiB), ll(BlasWorkspaces::kChunks));
     }},
    {KIND(RuntimeOverhead), "hardware.runtime_overhead_gib",
     "the CUDA context, NCCL and fragmentation: device memory outside the allocator (hardware profile)",
     [](const PlanShapes& s) { return s.runtime_overhead; },
     [](const PlanShapes&) -> std::string { return "hardware.runtime_overhead_gib"; }},
    {KIND(KeptAttentionPayload), "[payload] uint8",
     "one block's kept attention packed for the host: while its copy runs, or in a device slot it comes back into",
     [](const PlanShapes& s) { return kept_payload(s).bytes(); }, kept_payload_formula},
    // host
    {KIND(OffloadedInput), "[B, s, d] host",
     "a checkpointed block input in the host pool (CUDA path: a region of the pinned slab)",
     [](const PlanShapes& s) { return sat_product({s.t, s.d, s.c}); }, hidden_formula},
    {KIND(OffloadedKeptAttention), "[payload] uint8 host",
     "one block's kept attention in the host pool (CUDA path: a region of its own pinned slab)",
     [](const PlanShapes& s) { return kept_payload(s).bytes(); }, kept_payload_formula},
};
// clang-format on

#undef KIND

static_assert(static_cast<int>(std::size(kTensorKindRules)) == kTensorKindCount, "one rule per TensorKind");

/// Each rule sits at its kind's index, with a shape and a meaning.
constexpr bool rules_in_enum_order() {
  for (int i = 0; i < kTensorKindCount; ++i) {
    const TensorKindRule& rule = kTensorKindRules[i];
    if (static_cast<int>(rule.kind) != i || !rule.shape[0] || !rule.meaning[0]) return false;
  }
  return true;
}
static_assert(rules_in_enum_order(),
              "kTensorKindRules lists the TensorKinds in enum order, each with a shape and meaning");

}  // namespace

const TensorKindRule& tensor_kind_rule(TensorKind kind) { return kTensorKindRules[static_cast<int>(kind)]; }

}  // namespace odyssey::planner_detail

namespace odyssey {

std::vector<TensorKindDoc> tensor_kind_docs() {
  std::vector<TensorKindDoc> docs;
  for (const planner_detail::TensorKindRule& rule : planner_detail::kTensorKindRules)
    docs.push_back({rule.name, rule.shape, rule.meaning});
  return docs;
}

}  // namespace odyssey
