// Step time and MFU. FLOP convention (docs/planner.md): model FLOPs per token are 3 x the forward
// matmul FLOPs of every block and the LM head (2 FLOPs per multiply-add; embeddings not counted)
// plus causal attention counted once (Megatron: 6 L H hd S per token); mfu_palm counts attention
// non-causally (PaLM, torchtitan: 12 L H hd S). Hardware FLOPs add the recompute the engine runs
// and the attention backward's products beyond 2 forwards (it runs 2.5).
// Four terms: compute (FLOPs at two efficiencies), memory-bound work (the blocks' elementwise
// passes, the parameters' casts and gradient packing, the loss's passes over the logits, the
// device AdamW), communication (all-to-all, FSDP) and offload (activations, optimizer).
// defines: model_step_time
#include "engine/planner/step_time.h"

#include <algorithm>

#include "engine/layout/block_traffic.h"
#include "engine/layout/loss_traffic.h"
#include "engine/layout/schedule_rules.h"

#include "kernels/linear_cross_entropy_plan.h"

namespace odyssey::planner_detail {

namespace {

double exposed(double comm_s, double overlap_s) { return std::max(0.0, comm_s - overlap_s); }

/// Host memory traffic of one parameter through the offloaded optimizer step, bytes: the fused
/// AdamW pass with the clipping folded in (engine/train/optimizer.cpp: read p, g, m, v, 16; write
/// p, m, v, 12) and the upload's DMA read of the fp32 master (4). zero_grad writes nothing (the
/// next step's first contribution overwrites the gradient); on a GPU the gradient norm is taken
/// on the device (FlatParamGroup::device_grad_norm), on the CPU it reads g once more (4).
constexpr double kHostAdamBytesPerParam = 32.0;
constexpr double kHostNormBytesPerParam = 4.0;

/// Device memory traffic of one parameter through the device's AdamW (engine/train/optimizer.cpp:
/// at::_fused_adamw_ reads p, g, m, v and writes p, m, v in fp32, the clipping folded in: 28) and
/// the gradient norm before it (reads g: 4).
constexpr double kDeviceAdamBytesPerParam = 28.0;
constexpr double kDeviceNormBytesPerParam = 4.0;

/// Device memory traffic of one flat parameter group a step outside its GEMMs
/// (engine/parallel/flat_group.cpp), bytes: the casts of the fp32 master (or its shard) to the
/// compute dtype, and the gradient's way from the backward's tensors to the shard.
struct GroupPassBytes {
  double one_cast = 0;   ///< one cast of the group (0 where none runs)
  double casts = 0;      ///< a step's: one at each unshard, or the upload's one under optimizer offload
  double reduction = 0;  ///< the gradient packed (or made dense), then accumulated into the shard's
};

/// How a group is used in a step: how many times it is unsharded, how many of its gradients are
/// packed from per-parameter tensors, and whether one more comes as a zero-filled fp32 dense
/// buffer (the embedding's: EmbedFunction::backward).
struct GroupUse {
  int64_t unshards = 2;  ///< a block's: its forward and its backward
  int64_t packs = 1;
  bool dense_fp32 = false;
};

/// A group of `layout` on a rank. Casts (read 4, write c): one at each unshard in a compute dtype
/// narrower than fp32 (fp32 gathers the master as it is; under FSDP the shard is cast before its
/// all-gather); with the states on the host, one at the upload instead (refresh_device_params; the
/// unshards then read the device's compute-dtype copy). Reduction: each packed gradient written
/// into one fp32 buffer (read c, write 4 a parameter), a dense one zero-filled (4), then the
/// reduced shard copied into the gradient on the device (read 4, write 4; a later contribution
/// added: 12), or on its way to the host its norm taken (read 4; the copy is PCIe's).
GroupPassBytes group_pass_bytes(const FlatShardLayout& layout, const PlanShapes& s, const GroupUse& use) {
  const double c = static_cast<double>(s.c);
  const double full = static_cast<double>(layout.padded_numel), shard = static_cast<double>(layout.shard_numel);
  const double contributions = static_cast<double>(use.packs) + (use.dense_fp32 ? 1.0 : 0.0);
  GroupPassBytes out;
  if (s.c != 4) out.one_cast = (4.0 + c) * shard;
  out.casts = (s.offload_optimizer ? 1.0 : static_cast<double>(use.unshards)) * out.one_cast;
  out.reduction = static_cast<double>(use.packs) * (c + 4.0) * full + (use.dense_fp32 ? 4.0 * full : 0.0) +
                  (s.offload_optimizer ? 4.0 : 8.0) * shard + std::max(0.0, contributions - 1.0) * 12.0 * shard;
  return out;
}

/// Device memory traffic of the embedding's backward per token beyond its dense gradient's fill:
/// the rows' fp32 copy (read c, write 4 a model dimension) and index_put_'s sum of them into the
/// dense gradient (read the row, read and write the gradient's: 12).
double embedding_backward_token_bytes(const PlanShapes& s) {
  return static_cast<double>(s.d) * (static_cast<double>(s.c) + 4.0 + 12.0);
}

/// Hardware FLOPs of the attention kernel's backward per forward: FlashAttention's and cuDNN's
/// backward run five [S, S]-sized products (QK^T again, dP = dO V^T, dV = P^T dO, dQ = dS K,
/// dK = dS^T Q) to the forward's two (QK^T, PV). The model FLOPs (MFU's) count 2, as for a GEMM.
/// Counted at 2 here too, efficiencies fitted to steps that recompute (2 forwards to a backward)
/// would charge the steps that do not short.
constexpr double kAttentionBackwardPerForward = 2.5;

/// What every term of the step time reads: the shapes, the hardware and the figures derived from
/// them once (tokens, bandwidths in bytes/s).
struct StepTimeContext {
  const PlanShapes& s;
  const HardwareConfig& hw;
  double t = 0, S = 0, L = 0;  ///< tokens per device, sequence length, layers
  double peak = 0;             ///< peak FLOP/s
  double comm_bw = 0;          ///< FSDP's collectives over the W ranks
  double a2a_bw = 0;           ///< Ulysses' all-to-all over the P ranks
  double pcie_bw = 0;          ///< host <-> device copies
  double memory_bw = 0;        ///< device memory, as memory-bound kernels reach it
  double shard_elems = 0;      ///< parameters in this rank's shards: every block's, the embedding's, the head's
  /// of the blocks, those whose recompute replays a kept attention result (0 without checkpointing)
  double kept = 0;

  StepTimeContext(const PlanShapes& shapes, const HardwareConfig& hardware) : s(shapes), hw(hardware) {
    t = static_cast<double>(s.t);
    S = static_cast<double>(s.S);
    L = static_cast<double>(s.L);
    peak = hw.bf16_tflops * 1e12;
    const double per_node = static_cast<double>(std::max<int64_t>(1, hw.gpus_per_node));
    const auto link = [&](double ranks) {
      return (ranks <= per_node ? hw.nvlink_gbps : hw.internode_gbps) * 1e9 * hw.comm_efficiency;
    };
    comm_bw = link(static_cast<double>(s.W));
    a2a_bw = link(static_cast<double>(s.P));
    pcie_bw = hw.pcie_gbps * 1e9;
    memory_bw = hw.device_memory_gbps * 1e9;
    shard_elems = L * static_cast<double>(s.block_layout.shard_numel) +
                  static_cast<double>(s.embed_layout.shard_numel + s.head_layout.shard_numel);
    kept = s.ckpt ? static_cast<double>(s.kept_count) / L : 0.0;
  }
};

/// FLOPs per token: the model's (causal attention once), PaLM's count, and what the hardware runs.
struct FlopTerms {
  double model = 0, model_palm = 0, hardware = 0;
};

/// The compute term: every phase's FLOPs at the two efficiencies (the attention kernels' and the
/// rest's), into `pt` (per block where the phase is per block) and `out`.
FlopTerms compute_terms(const StepTimeContext& c, StepTimePlan& out, PhaseTimes& pt) {
  const PlanShapes& s = c.s;
  const HardwareConfig& hw = c.hw;
  const double t = c.t, S = c.S, L = c.L, peak = c.peak;
  // Forward FLOPs per token of one block's parts and of the head.
  const double proj = 2.0 * s.d * (s.q_dim + 2.0 * s.kv_dim);  // q, k, v projections
  const double o_proj = 2.0 * s.q_dim * s.d;
  // QK^T and PV over S/2 keys on average; under document masking over each document's own keys
  // (the length profile's fraction of the pairs: the sum of each document's length squared)
  const double core_causal = 2.0 * s.q_dim * S * s.attention_pair_fraction;
  const double core_full = 4.0 * s.q_dim * S * s.attention_pair_fraction;  // the same without the causal half
  const double mlp = 6.0 * s.d * s.f;                                      // gate, up, down
  const double head = 2.0 * s.V * s.d;
  const double attn_fwd = proj + o_proj + core_causal;
  const double block_fwd = attn_fwd + mlp;
  const double backward_core = kAttentionBackwardPerForward * core_causal;  // hardware FLOPs, not the model count
  // The attention kernels' FLOPs per token (forward, its recompute, backward at 2.5x the forward) run
  // at the efficiency of the kernel the engine calls: SDPA's for standard attention and Ulysses
  // (hardware.attention_efficiency); the log-sum-exp paths' kernel (the Untied stages, kept
  // attention, packed documents: engine/layout/attention_kernels.h) at attention_efficiency where it
  // is cuDNN's, at untied_attention_efficiency where it is FlashAttention-2. Every other FLOP runs
  // at compute_efficiency.
  // Kept attention (memory.keep_attention) replays the forward's output in the recompute: the
  // attention kernels run once forward and once backward; the Untied stages, whose projections
  // run inside them, are not run at all (backward projects each stage's Q and K/V anyway).
  // With memory.keep_attention_blocks only the top blocks keep theirs: per block on average, a
  // fraction `kept` of the recompute replays and the rest runs the attention again.
  const double kept = c.kept;
  const double core_passes = 1.0 + (s.ckpt ? 1.0 - kept : 0.0) + kAttentionBackwardPerForward;
  const double attention = L * core_passes * core_causal;
  // The blocks that keep call the log-sum-exp paths' kernel forward and backward; the others the
  // kernel of their attention path: the same where the Untied stages or packed documents need it
  // too, SDPA's otherwise (standard attention recomputing under checkpointing)
  const bool others_lse = s.untied || s.documents || s.standard_on_lse_kernel;

  const double model = 3.0 * (L * block_fwd + head);
  const double model_palm = 3.0 * (L * (proj + o_proj + core_full + mlp) + head);
  double recompute = 0;
  // The block's forward again in backward; with a tiled MLP the recompute runs no tile (its
  // backward recomputes each tile: tiled_mlp.h), so the MLP's forward runs twice a step either way.
  const double attn_replay = s.untied ? o_proj : proj + o_proj;  // a kept block's recompute of its attention half
  const double attn_recompute = kept * attn_replay + (1.0 - kept) * attn_fwd;
  const double recompute_fwd = attn_recompute + (s.tiled_mlp ? 0.0 : mlp);
  const double recompute_core_flops = s.ckpt ? (1.0 - kept) * core_causal : 0.0;
  if (s.ckpt) recompute += L * recompute_fwd;
  if (s.tiled_mlp) recompute += L * mlp;  // each tile's forward again in its backward
  if (s.untied) recompute += L * proj;    // stage projections again in backward
  // The tiled loss's head GEMMs, all in its forward: a GPU target's fused kernel computes the
  // logits twice over several vocabulary tiles (kernels/linear_cross_entropy_plan.h), the CPU's
  // tile once.
  const double tiled_loss_gemms =
      s.cuda_target ? static_cast<double>(kernels::lce_head_gemms(s.fused_vocab_tiles)) : 3.0;
  if (s.tiled_loss) recompute += (tiled_loss_gemms - 3.0) * head;
  // the backward's products beyond the model count's 2 forwards
  const double hardware = model + recompute + L * (backward_core - 2.0 * core_causal);

  // achieved FLOP/s of the GEMMs (the elementwise work between them: memory_bound_terms)
  const double rate = peak * hw.compute_efficiency;
  out.untied_attention = s.untied;
  out.kept_attention = s.keep_attention;
  out.document_attention = s.documents;
  out.standard_on_lse_kernel = s.standard_on_lse_kernel;
  // Wherever the engine needs the log-sum-exp (the Untied stages, kept attention), runs one call
  // per document or leaves SDPA's math backend, it calls the kernel itself
  // (engine/layout/attention_kernels.h): cuDNN's runs at the efficiency SDPA's kernel (cuDNN's on
  // Hopper) measured, FlashAttention-2 and the others at their own.
  out.lse_attention = s.untied || s.keep_attention || s.documents || s.standard_on_lse_kernel;
  out.lse_kernel = s.lse_kernel;
  out.attention_at_sdpa_efficiency = !out.lse_attention || s.lse_kernel == LseKernel::CudaCudnn;
  out.attention_kernel_efficiency =
      out.attention_at_sdpa_efficiency ? hw.attention_efficiency : hw.untied_attention_efficiency;
  out.attention_blocks = s.L;
  out.kept_blocks = s.kept_count;  // 0 without kept attention
  // achieved FLOP/s of the attention kernels: the keeping blocks' (the log-sum-exp kernel's where
  // any path needs it), and the other blocks' (SDPA's where they run standard attention)
  const double lse_rate = peak * out.attention_kernel_efficiency;
  const double other_rate = others_lse ? lse_rate : peak * hw.attention_efficiency;
  // Seconds per FLOP of the kernels of a forward pass over every block, of the backward's (each
  // kernel's backward at its forward's efficiency times hardware.attention_backward_ratio), and of
  // the recompute (a forward; only the blocks that do not keep run it)
  const double pass_s_per_flop = kept / lse_rate + (1.0 - kept) / other_rate;
  const double backward_s_per_flop = pass_s_per_flop / hw.attention_backward_ratio;
  const double recompute_s_per_flop = 1.0 / other_rate;
  // Seconds per token of `flops` FLOPs of which `core` are the attention kernels', at `core_s` a FLOP.
  const auto secs = [&](double flops, double core, double core_s) { return (flops - core) / rate + core * core_s; };

  // Compute per phase kind (per block where the phase is per block).
  auto set = [&](PhaseKind k, double v) { pt.seconds[static_cast<int>(k)] = v; };
  set(PhaseKind::FwdAttn, t * secs(attn_fwd, core_causal, pass_s_per_flop));
  set(PhaseKind::FwdMlp, t * mlp / rate);
  set(PhaseKind::BwdRecompute, s.ckpt ? t * secs(recompute_fwd, recompute_core_flops, recompute_s_per_flop) : 0.0);
  set(PhaseKind::BwdMlp, t * (2.0 * mlp + (s.tiled_mlp ? mlp : 0.0)) / rate);
  set(PhaseKind::BwdAttn, t * secs(2.0 * (attn_fwd - core_causal) + backward_core + (s.untied ? proj : 0.0),
                                   backward_core, backward_s_per_flop));
  set(PhaseKind::FwdLoss, t * (s.tiled_loss ? tiled_loss_gemms * head : head) / rate);
  set(PhaseKind::BwdLoss, s.tiled_loss ? 0.0 : t * 2.0 * head / rate);
  const double attention_s_per_token = L * (core_causal * pass_s_per_flop + backward_core * backward_s_per_flop +
                                            recompute_core_flops * recompute_s_per_flop);
  out.compute_s = t * ((hardware - attention) / rate + attention_s_per_token);
  out.recompute_s = t * secs(recompute, L * recompute_core_flops, recompute_s_per_flop);
  out.attention_s = t * attention_s_per_token;
  out.tokens_per_device = s.t;
  out.hardware_flops_per_token = hardware;
  out.attention_flops_per_token = attention;
  out.attention_backward_flops_per_token = L * backward_core;
  out.attention_backward_ratio = hw.attention_backward_ratio;
  out.attention_pair_fraction = s.attention_pair_fraction;
  out.peak_flops = peak;
  return {model, model_palm, hardware};
}

/// The memory-bound term: work whose time is the bytes it moves through device memory rather than
/// its FLOPs, into `pt` and `out`: each block's elementwise passes (engine/layout/block_traffic.h),
/// the parameter groups' casts and gradient packing (group_pass_bytes), the loss's over the [t, V]
/// logits (the fused kernel's, the tile loop's or the untiled autograd chain's:
/// engine/layout/loss_traffic.h) and, where the optimizer stays on the device, its AdamW and
/// gradient norm over the rank's shards.
void memory_bound_terms(const StepTimeContext& c, StepTimePlan& out, PhaseTimes& pt) {
  const PlanShapes& s = c.s;
  const double kept_on_host =
      s.offload_kept ? static_cast<double>(kept_attention_offloaded_blocks(s.L, s.kept.count()).count) / c.L : 0.0;
  BlockShapeForTraffic shape{.d = s.d,
                             .q_dim = s.q_dim,
                             .kv_dim = s.kv_dim,
                             .f = s.f,
                             .c = s.c,
                             .P = s.P,
                             .untied = s.untied,
                             .tiled_mlp = s.tiled_mlp,
                             .qk_norm = s.qk_norm,
                             .kept_packed_fraction = kept_on_host,
                             .untied_kv_accumulation = s.untied_kv_accum_token_bytes};
  const BlockTokenBytes block = block_token_bytes(shape);
  shape.kept_replay = true;
  const BlockTokenBytes keeping = block_token_bytes(shape);
  const double recompute = s.ckpt ? c.kept * keeping.recompute + (1.0 - c.kept) * block.recompute : 0.0;
  const double per_byte = c.t / c.memory_bw;  // seconds per byte a token of every block
  const auto add = [&](PhaseKind k, double bytes) { pt.seconds[static_cast<int>(k)] += bytes * per_byte; };
  add(PhaseKind::FwdAttn, block.forward_attention);
  add(PhaseKind::FwdMlp, block.forward_mlp);
  add(PhaseKind::BwdRecompute, recompute);
  add(PhaseKind::BwdMlp, block.backward_mlp);
  add(PhaseKind::BwdAttn, block.backward_attention);
  out.block_traffic_s =
      c.L * per_byte *
      (block.forward_attention + block.forward_mlp + recompute + block.backward_mlp + block.backward_attention);
  // The parameter groups' casts and gradient passes, in the phases where the engine runs them: a
  // block's forward cast just before its attention, its backward's before its first backward
  // phase, its reduction in its own phase; the embedding's forward cast and its reduction with the
  // embedding, the head's (and a tied embedding's, which the head unshards forward and backward)
  // in the loss's phases; under optimizer offload each group's one cast before its forward.
  const bool re_embeds = s.offload && offloaded_blocks(s.L).embeds(0);  // block 0's recompute looks it up again
  const GroupPassBytes block_passes = group_pass_bytes(s.block_layout, s, GroupUse{});
  const GroupPassBytes embed_passes = group_pass_bytes(
      s.embed_layout, s,
      GroupUse{.unshards = 1 + (s.tied ? 2 : 0) + (re_embeds ? 1 : 0), .packs = s.tied ? 1 : 0, .dense_fp32 = true});
  const GroupPassBytes head_passes = group_pass_bytes(s.head_layout, s, GroupUse{});
  const double bw = c.memory_bw;
  const PhaseKind loss_backward = s.tiled_loss ? PhaseKind::FwdLoss : PhaseKind::BwdLoss;
  const auto add_s = [&](PhaseKind k, double bytes) { pt.seconds[static_cast<int>(k)] += bytes / bw; };
  // The first cast of each group (the only one under optimizer offload) before its forward use,
  // the rest where the engine unshards again
  add_s(PhaseKind::FwdAttn, block_passes.one_cast);
  add_s(s.ckpt ? PhaseKind::BwdRecompute : PhaseKind::BwdMlp, block_passes.casts - block_passes.one_cast);
  add_s(PhaseKind::BwdReduceScatter, block_passes.reduction);
  add_s(PhaseKind::FwdEmbed, embed_passes.one_cast);
  const bool casts_again = !s.offload_optimizer;
  if (casts_again && s.tied) {  // the head's forward and backward unshard the tied embedding
    add_s(PhaseKind::FwdLoss, embed_passes.one_cast);
    add_s(loss_backward, embed_passes.one_cast);
  }
  add_s(PhaseKind::BwdEmbed, (casts_again && re_embeds ? embed_passes.one_cast : 0.0) + embed_passes.reduction +
                                 c.t * embedding_backward_token_bytes(s));
  add_s(PhaseKind::FwdLoss, head_passes.one_cast);
  add_s(loss_backward, head_passes.casts - head_passes.one_cast + head_passes.reduction);
  out.parameter_passes_s =
      (c.L * (block_passes.casts + block_passes.reduction) + embed_passes.casts + embed_passes.reduction +
       c.t * embedding_backward_token_bytes(s) + head_passes.casts + head_passes.reduction) /
      bw;
  const double logits = c.t * static_cast<double>(s.V);
  const LossLogitBytes loss = !s.tiled_loss   ? unfused_loss_logit_bytes(s.c)
                              : s.cuda_target ? fused_loss_logit_bytes(s.c)
                                              : tiled_loss_by_hand_logit_bytes(s.c);
  pt.seconds[static_cast<int>(PhaseKind::FwdLoss)] += logits * loss.forward / c.memory_bw;
  pt.seconds[static_cast<int>(PhaseKind::BwdLoss)] += logits * loss.backward / c.memory_bw;
  out.loss_traffic_s = logits * loss.total() / c.memory_bw;
  if (!s.offload_optimizer) {
    out.device_optimizer_s = c.shard_elems * (kDeviceAdamBytesPerParam + kDeviceNormBytesPerParam) / c.memory_bw;
    pt.seconds[static_cast<int>(PhaseKind::Optimizer)] += out.device_optimizer_s;
  }
}

/// The communication term: Ulysses' all-to-alls and FSDP's collectives (or the all-reduce without
/// FSDP), exposed where the engine does not overlap them with compute; into `pt` and `out`.
void communication_terms(const StepTimeContext& c, StepTimePlan& out, PhaseTimes& pt) {
  const PlanShapes& s = c.s;
  const double L = c.L, comm_bw = c.comm_bw, a2a_bw = c.a2a_bw;
  // added to what the memory-bound terms put in the same phases (the parameters' passes)
  auto add = [&](PhaseKind k, double v) { pt.seconds[static_cast<int>(k)] += v; };
  // Ulysses all-to-all: q, k, v in and o out per pass (d o in, dq, dk, dv out backward); not
  // overlapped. Untied backward moves twice as much (recomputed q/k/v, o, d o, then dq/dk/dv).
  if (s.P > 1) {
    const double pass = (2.0 * kind_bytes(TensorKind::QLocal, s) + 2.0 * kind_bytes(TensorKind::KvLocalRep, s)) *
                        (s.P - 1) / s.P / a2a_bw;
    const double bwd_passes = s.untied ? 2.0 : 1.0;
    // the recompute's all-to-alls, none where the kept attention replays the Untied stages (per
    // block on average: the fraction of blocks that keep theirs)
    const double replayed = s.untied ? static_cast<double>(s.kept_count) / L : 0.0;
    const double recompute_a2a = s.ckpt ? 1.0 - replayed : 0.0;
    pt.seconds[static_cast<int>(PhaseKind::FwdAttn)] += pass;
    pt.seconds[static_cast<int>(PhaseKind::BwdRecompute)] += recompute_a2a * pass;
    pt.seconds[static_cast<int>(PhaseKind::BwdAttn)] += bwd_passes * pass;
    out.all_to_all_s = L * pass * (1.0 + recompute_a2a + bwd_passes);
  }

  // FSDP: all-gathers are prefetched behind the previous block's compute. On a CUDA target each
  // block's reduce-scatter is deferred (StepRuntime::defer_reduce_scatter) and shares the
  // collective stream with the next block's gather, both behind that block's backward; the lowest
  // block's is finished after the embedding backward. Elsewhere the reduce-scatter is its own
  // phase. Without FSDP and with W > 1 gradients are all-reduced (2x the bytes).
  const double ways = static_cast<double>(s.W);
  double fsdp = 0;
  if (s.W > 1) {
    const double frac = (ways - 1) / ways;
    const double gather = s.fsdp ? s.n_block * s.c * frac / comm_bw : 0.0;
    const double reduce = s.n_block * 4.0 * frac * (s.fsdp ? 1.0 : 2.0) / comm_bw;
    const double fwd_block = pt.of(PhaseKind::FwdAttn) + pt.of(PhaseKind::FwdMlp);
    const double bwd_block = pt.of(PhaseKind::BwdRecompute) + pt.of(PhaseKind::BwdMlp) + pt.of(PhaseKind::BwdAttn);
    const bool deferred = s.defers_block_reduce_scatter;
    const double fwd_exposed = exposed(gather, fwd_block);
    const double bwd_exposed = deferred ? exposed(gather + reduce, bwd_block) : exposed(gather, bwd_block);
    const double reduce_phase = deferred ? 0.0 : reduce;
    const double last_reduce = deferred ? reduce : 0.0;  // the lowest block's, overlapping nothing
    pt.seconds[static_cast<int>(PhaseKind::FwdAttn)] += fwd_exposed;
    pt.seconds[static_cast<int>(PhaseKind::BwdRecompute)] += bwd_exposed;
    add(PhaseKind::BwdReduceScatter, reduce_phase);
    const double embed_gather = s.fsdp ? s.n_embed * s.c * frac / comm_bw : 0.0;
    const double embed_reduce = s.n_embed * 4.0 * frac * (s.fsdp ? 1.0 : 2.0) / comm_bw;
    const double head_reduce = (s.n_head + (s.tied ? s.n_embed : 0)) * 4.0 * frac * (s.fsdp ? 1.0 : 2.0) / comm_bw;
    // under offload block 0's input is looked up again (offloaded_blocks): one more embedding
    // gather, exposed, in block 0's recompute; counted here with the embedding's backward
    const double embed_regather = s.offload && offloaded_blocks(s.L).embeds(0) ? embed_gather : 0.0;
    add(PhaseKind::FwdEmbed, embed_gather);
    add(PhaseKind::BwdEmbed, embed_reduce + last_reduce + embed_regather);
    pt.seconds[static_cast<int>(s.tiled_loss ? PhaseKind::FwdLoss : PhaseKind::BwdLoss)] += head_reduce;
    fsdp = L * (fwd_exposed + bwd_exposed + reduce_phase) + last_reduce + embed_gather + embed_regather + embed_reduce +
           head_reduce;
  }
  out.fsdp_comm_s = fsdp;
}

/// The offload terms' result the total needs: how many blocks offload their input, and the
/// exposed copy time of each.
struct OffloadTerms {
  int64_t offloaded_blocks = 0;
  double per_block_s = 0;
};

/// The offload terms: the checkpointed block inputs' PCIe copies and the offloaded optimizer
/// (gradients down, the host AdamW, parameters up), exposed where nothing hides them.
OffloadTerms offload_terms(const StepTimeContext& c, StepTimePlan& out, PhaseTimes& pt) {
  const PlanShapes& s = c.s;
  const HardwareConfig& hw = c.hw;
  const double L = c.L, pcie_bw = c.pcie_bw;
  // the windows the copies hide behind: a block's forward, its recompute (before any exposure)
  const double fwd_window = pt.of(PhaseKind::FwdAttn) + pt.of(PhaseKind::FwdMlp);
  const double bwd_window = pt.of(PhaseKind::BwdRecompute);
  // Offload: one block input D2H per offloaded block in forward (offloaded_blocks: 1..L-2), one
  // H2D prefetch per offloaded block in backward, on side streams behind the block's compute.
  const int64_t offloaded = s.offload ? offloaded_blocks(s.L).count : 0;
  double offload_per_block = 0;
  if (s.offload) {
    const double copy = kind_bytes(TensorKind::Hidden, s) / pcie_bw;
    const double fwd_exposed = exposed(copy, fwd_window);
    const double bwd_exposed = exposed(copy, bwd_window);
    pt.seconds[static_cast<int>(PhaseKind::FwdMlp)] += fwd_exposed;
    pt.seconds[static_cast<int>(PhaseKind::BwdRecompute)] += bwd_exposed;
    offload_per_block = fwd_exposed + bwd_exposed;
    out.offload_s = static_cast<double>(offloaded) * offload_per_block;
  }
  // Kept attention offloaded too (memory.offload_kept_attention): each keeping block but the last
  // sends its payload down in forward and brings it back in backward on copy streams of its own, sharing
  // the link with the inputs' copies: a block with both exposes what the two together outlast
  // beyond what the input alone did; block 0 (whose input is looked up again) its payload alone. Spread over
  // the L blocks' phases, as the step sums them.
  if (s.offload_kept) {
    const double input = kind_bytes(TensorKind::Hidden, s) / pcie_bw;
    const double kept = kind_bytes(TensorKind::KeptAttentionPayload, s) / pcie_bw;
    const OffloadedBlocks kept_blocks = kept_attention_offloaded_blocks(s.L, s.kept.count());
    const OffloadedBlocks input_blocks = offloaded_blocks(s.L);
    double fwd = 0, bwd = 0;
    for (const bool with_input : {true, false}) {
      int64_t blocks = 0;  // of kept_blocks, those whose input is offloaded too, then the others
      for (int64_t b = kept_blocks.first; b < kept_blocks.first + kept_blocks.count; ++b)
        blocks += (input_blocks.holds(b) == with_input) ? 1 : 0;
      const double alone = with_input ? input : 0.0;  // the input's copy, whose exposure is counted above
      fwd += static_cast<double>(blocks) * (exposed(alone + kept, fwd_window) - exposed(alone, fwd_window));
      bwd += static_cast<double>(blocks) * (exposed(alone + kept, bwd_window) - exposed(alone, bwd_window));
    }
    pt.seconds[static_cast<int>(PhaseKind::FwdMlp)] += fwd / L;
    pt.seconds[static_cast<int>(PhaseKind::BwdRecompute)] += bwd / L;
    out.offload_s += fwd + bwd;
  }

  // Optimizer offload: each reduced gradient shard goes down to the host as its backward produces
  // it, asynchronously behind the next block's backward on a GPU (FlatParamGroup::
  // accumulate_gradient; blocking on the CPU, so exposed there), the host runs AdamW over every
  // shard at the bandwidth its node's ranks share, and each group's fp32 master goes back up as
  // its pass ends (FlatParamGroup::refresh_device_params, cast on the device), behind the next
  // group's pass: a pipeline whose end is the later of the passes plus one upload and the uploads
  // plus one pass (the largest group's, to be safe); pipelined on a GPU (below).
  if (s.offload_optimizer) {
    const double block_shard = static_cast<double>(s.block_layout.shard_numel);
    const double other_shards = static_cast<double>(s.embed_layout.shard_numel + s.head_layout.shard_numel);
    const double shard_elems = c.shard_elems;
    const double largest_shard = static_cast<double>(
        std::max({s.block_layout.shard_numel, s.embed_layout.shard_numel, s.head_layout.shard_numel}));
    const double host_bw = hw.host_optimizer_gbps * 1e9 / static_cast<double>(s.ranks_per_node);
    const double host_bytes = kHostAdamBytesPerParam + (s.cuda_target ? 0.0 : kHostNormBytesPerParam);
    const double adamw = shard_elems * host_bytes / host_bw;
    const double params_up = shard_elems * 4.0 / pcie_bw;
    double optimizer =
        std::max(adamw + largest_shard * 4.0 / pcie_bw, largest_shard * host_bytes / host_bw + params_up);
    if (host_optimizer_overlaps_forward(s.cuda_target, s.offload_optimizer)) {
      // Pipelined under the next step's forward (HostUpdatePipeline): the forward starts once the
      // embedding's and block 0's passes are done; block k's forward then waits for block k's pass
      // only where a pass outlasts a block's forward (the head's likewise). Each group's upload is
      // queued on the compute stream at its first use, so all of them are exposed. The engine
      // shows this time inside the forward, as its "host_update" phases.
      const double pass = host_bytes / host_bw;  // seconds per element
      const double fwd_block = pt.of(PhaseKind::FwdAttn) + pt.of(PhaseKind::FwdMlp);
      optimizer = (static_cast<double>(s.embed_layout.shard_numel) + block_shard) * pass +
                  (L - 1) * std::max(0.0, block_shard * pass - fwd_block) +
                  std::max(0.0, static_cast<double>(s.head_layout.shard_numel) * pass - fwd_block) + params_up;
    }
    const double block_down = block_shard * 4.0 / pcie_bw;
    const double bwd_block = pt.of(PhaseKind::BwdRecompute) + pt.of(PhaseKind::BwdMlp) + pt.of(PhaseKind::BwdAttn);
    pt.seconds[static_cast<int>(PhaseKind::BwdReduceScatter)] +=
        s.cuda_target ? exposed(block_down, bwd_block) : block_down;
    pt.seconds[static_cast<int>(PhaseKind::BwdEmbed)] += other_shards * 4.0 / pcie_bw;
    pt.seconds[static_cast<int>(PhaseKind::Optimizer)] += optimizer;
    out.host_optimizer_s = adamw;
    out.optimizer_exposed_s = optimizer;
    out.optimizer_pcie_s = shard_elems * 4.0 / pcie_bw + params_up;
  }
  return {offloaded, offload_per_block};
}

}  // namespace

StepTimePlan model_step_time(const PlanShapes& s, const HardwareConfig& hw, PhaseTimes* phases) {
  const StepTimeContext c(s, hw);
  StepTimePlan out;
  PhaseTimes pt;
  const FlopTerms flops = compute_terms(c, out, pt);
  memory_bound_terms(c, out, pt);
  communication_terms(c, out, pt);
  const OffloadTerms offload = offload_terms(c, out, pt);

  const double t = c.t, L = c.L, peak = c.peak;
  const double model = flops.model, model_palm = flops.model_palm, hardware = flops.hardware;
  const int64_t offloaded = offload.offloaded_blocks;
  const double offload_per_block = offload.per_block_s;
  double step = pt.of(PhaseKind::FwdEmbed) + pt.of(PhaseKind::FwdLoss) + pt.of(PhaseKind::BwdLoss) +
                pt.of(PhaseKind::BwdEmbed) + pt.of(PhaseKind::Optimizer);
  for (PhaseKind k : {PhaseKind::FwdAttn, PhaseKind::FwdMlp, PhaseKind::BwdRecompute, PhaseKind::BwdMlp,
                      PhaseKind::BwdAttn, PhaseKind::BwdReduceScatter})
    step += L * pt.of(k);
  step -= (L - static_cast<double>(offloaded)) * offload_per_block;  // only the offloaded blocks' inputs move
  out.step_s = step;
  out.tokens_per_s_per_device = step > 0 ? t / step : 0;
  out.model_flops_per_token = model;
  out.mfu = step > 0 ? t * model / (step * peak) : 0;
  out.mfu_palm = step > 0 ? t * model_palm / (step * peak) : 0;
  out.hfu = step > 0 ? t * hardware / (step * peak) : 0;
  out.convention =
      "model FLOPs/token = 3 x (forward matmuls of all blocks and the LM head, 2 per multiply-add) + causal "
      "attention counted once (6 L H hd S, Megatron); mfu_palm counts attention non-causally (12 L H hd S, "
      "PaLM/torchtitan); hfu adds the recompute (checkpointing, tiled MLP, Untied projections) and the attention "
      "backward's half forward beyond 2 (its five products, QK^T again among them: 2.5 forwards)";
  if (phases) *phases = pt;
  return out;
}

}  // namespace odyssey::planner_detail
