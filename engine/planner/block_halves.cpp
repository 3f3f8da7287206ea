// The two halves of a decoder block as the engine runs them, replayed as allocations and frees:
// attention (standard Ulysses or Untied Ulysses stages) and MLP (untiled or tiled), forward with or
// without grad and backward. docs/planner.md sections 3-5 list every tensor.
#include "engine/planner/block_halves.h"

#include <utility>

#include "engine/layout/sdpa_fallback.h"
#include "engine/layout/tile_grad_rules.h"

namespace odyssey::planner_detail {

using K = TensorKind;
using C = PlanCategory;

int BlockHalves::alloc(const char* name, K kind, C cat, int32_t count) {
  return m_.alloc(name, kind, cat, kind_bytes(kind, s_), count);
}

void BlockHalves::release(int& h) {
  if (h >= 0) m_.free(h);
  h = -1;
}

// --- attention half ----------------------------------------------------------------------------

/// RoPE (engine/ops/layers.cpp, apply_rope): one output of x's size in x's dtype, written by
/// ops::rope_rotate without temporaries on CUDA (one kernel) and in fp32 (a bf16 CPU run converts through fp32
/// temporaries that are not walked); x is freed (RoPE saves only the tables). Its backward is the
/// same rotation inverted: one output again.
int BlockHalves::rope(int& x, K kind, C cat) {
  const int out = alloc("RoPE output", kind, cat);  // ops::rope_rotate writes it, no temporaries
  release(x);
  return out;
}

/// Ulysses all-to-all (either direction): a contiguous send copy and a receive buffer, both
/// comm_buffers; the input is dropped, the receive buffer is the result. Inside an Untied pass the
/// send copy is the pass's staging, held already (staged_), and the result lands in one of the
/// Function's own stage buffers (attention workspace, as the engine allocates them).
int BlockHalves::all_to_all(int& x, K from, K to, const char* recv_name, bool drop_input) {
  int send = staged_ ? -1 : alloc("all-to-all send buffer", from, C::CommBuffers);
  const int recv = alloc(recv_name, to, staged_ ? C::AttentionWorkspace : C::CommBuffers);
  release(send);
  if (drop_input) release(x);
  return recv;
}

/// RoPE of an Untied stage's Q or K projection (engine: project_to_heads). cpu profile: RoPE's
/// temporaries and a rotated copy. GPU profile: none, ops::rope_pack rotates while it packs the
/// send buffer (stage_to_heads).
int BlockHalves::stage_rope(int& x, K local) { return s_.cuda_target ? x : rope(x, local, C::AttentionWorkspace); }

/// The Untied Function's all-to-all staging (engine: allocate_stage_buffers), allocated once at
/// the start of its forward's or backward's stage loop and held to the loop's end: the send
/// buffer of every exchange, and at B > 1 a receive buffer beside it (at B = 1 the exchange
/// writes the head layout directly). None at P = 1. Measured on the CPU at P = 2: without it the
/// plan missed one [S, hd] of every Untied attention phase.
int BlockHalves::hold_stage_staging() {
  if (s_.P == 1) return -1;
  staged_ = true;
  return alloc("Untied all-to-all staging (preallocated)", K::StageStaging, C::CommBuffers, s_.B == 1 ? 1 : 2);
}

void BlockHalves::drop_stage_staging(int& staging) {
  staged_ = false;
  release(staging);
}

/// The all-to-all of an Untied stage's projection to the head layout. cpu profile, and v on any
/// profile: a permute copy into the send buffer, exchanged while the projection lives. GPU profile
/// with RoPE (`packed`): ops::rope_pack writes the send buffer and the projection dies before the
/// exchange. P = 1: the projection stands for the head-layout buffer.
int BlockHalves::stage_to_heads(int& x, K local, K head, const char* recv_name, bool packed) {
  if (s_.P == 1) return x;
  if (!(packed && s_.cuda_target)) return all_to_all(x, local, head, recv_name);
  int send = staged_ ? -1 : alloc("all-to-all send buffer", local, C::CommBuffers);
  release(x);
  const int recv = alloc(recv_name, head, staged_ ? C::AttentionWorkspace : C::CommBuffers);
  release(send);
  return recv;
}

/// rmsnorm -> q/k/v -> [qk-norm] -> RoPE -> [replicate KV] -> all-to-all -> SDPA -> all-to-all
/// -> o_proj -> residual. Returns h; with grad, fills `sv` with what autograd keeps.
int BlockHalves::attention_forward(bool grad, AttnSaved& sv) {
  if (s_.untied) return untied_forward(grad, sv);
  sv.n1 = alloc("attention rmsnorm output", K::Hidden, C::AttentionWorkspace);
  sv.rstd = alloc("attention rmsnorm 1/rms", K::RowStat, C::AttentionWorkspace);
  int q = alloc("q projection", K::QLocal, C::AttentionWorkspace);
  int k = alloc("k projection", K::KvLocal, C::AttentionWorkspace);
  int v = alloc("v projection", K::KvLocal, C::AttentionWorkspace);
  if (!grad) {
    release(sv.n1);
    release(sv.rstd);
  }
  if (s_.qk_norm) {
    int qn = alloc("q head norm", K::QLocal, C::AttentionWorkspace);
    int kn = alloc("k head norm", K::KvLocal, C::AttentionWorkspace);
    if (grad) {
      sv.q_pre = q;
      sv.k_pre = k;
    } else {
      release(q);
      release(k);
    }
    q = qn;
    k = kn;
  }
  int qr = rope(q, K::QLocal, C::AttentionWorkspace);
  int kr = rope(k, K::KvLocal, C::AttentionWorkspace);
  K kv_local = K::KvLocal;
  if (s_.kv_replicated) {  // replicate KV heads up to the degree before the all-to-all
    int k_rep = alloc("K replicated to the Ulysses degree", K::KvLocalRep, C::AttentionWorkspace);
    release(kr);
    kr = k_rep;
    int v_rep = alloc("V replicated to the Ulysses degree", K::KvLocalRep, C::AttentionWorkspace);
    release(v);
    v = v_rep;
    kv_local = K::KvLocalRep;
  }
  int qh = qr, kh = kr, vh = v;
  if (s_.P > 1) {
    qh = all_to_all(qr, K::QLocal, K::QHead, "q after all-to-all (head layout)");
    kh = all_to_all(kr, kv_local, K::KvHead, "k after all-to-all (head layout)");
    vh = all_to_all(v, kv_local, K::KvHead, "v after all-to-all (head layout)");
  }
  // Kept attention (kept_attention.h): the checkpointed forward keeps the kernel's output and LSE;
  // the recompute replays them instead of running the kernel.
  const bool keeping = !grad && keeps_, replay = grad && keeps_;
  int oh, lse;
  if (replay) {
    // -1 both where they are views of the kept attention's device slot (the walk frees the slot)
    oh = std::exchange(sv.kept_out, -1);
    lse = std::exchange(sv.kept_lse, -1);
  } else {
    int ke = -1, ve = -1;
    repeated_kv(/*stage=*/false, ke, ve);
    oh = alloc("SDPA output (head layout)", K::QHead, C::AttentionWorkspace);
    lse = alloc("SDPA log-sum-exp", K::Lse, C::AttentionWorkspace);
    flash_forward_transients(/*stage=*/false);
    release(ke);
    release(ve);
  }
  if (grad) {
    sv.q_h = qh;
    sv.k_h = kh;
    sv.v_h = vh;
    sv.o_h = oh;
    sv.lse = lse;
  } else {
    release(qh);
    release(kh);
    release(vh);
    if (keeping) {
      m_.retag(lse, C::SavedActivations, "kept attention log-sum-exp");
      sv.kept_lse = lse;
    } else {
      release(lse);
    }
  }
  // SDPA keeps its output with grad, so the all-to-all back drops it only without grad
  // CUDA flash writes its output as [B, S, H/P, hd] in memory, so the transpose before the
  // all-to-all back (P > 1) or before o_proj (P = 1) is a view. The CPU kernel writes [B, H/P, S,
  // hd]: there the transpose is a copy, transient before the all-to-all, o_proj's saved input at P = 1.
  const bool cpu_layout_copy = !s_.cuda_target;
  int o = oh;
  if (s_.P > 1) {
    int src = cpu_layout_copy ? alloc("SDPA output made contiguous (CPU layout)", K::QHead, C::AttentionWorkspace) : oh;
    o = all_to_all(src, K::QHead, K::QLocal, "attention output after all-to-all",
                   cpu_layout_copy || (!grad && !keeping));
    if (!grad && !keeping) {
      if (cpu_layout_copy) release(oh);
      oh = -1;  // dropped (without grad nothing keeps the SDPA output)
    }
  } else if (cpu_layout_copy) {
    o = alloc("o_proj input (CPU layout copy of the SDPA output)", K::QLocal, C::AttentionWorkspace);
  }
  const bool o_is_own = s_.P > 1 || cpu_layout_copy;  // o is not the SDPA output itself
  int attn = alloc("o_proj output", K::Hidden, C::AttentionWorkspace);
  if (grad) {
    if (o_is_own) sv.o = o;
  } else {
    if (o_is_own || !keeping) release(o);  // (o is the kernel's output itself where it is not its own)
    if (keeping) {                         // the kernel's output outlives the block (P > 1: its all-to-all kept it)
      m_.retag(oh, C::SavedActivations, "kept attention output");
      sv.kept_out = oh;
    } else if (o_is_own) {
      release(oh);  // P = 1 on CPU: the SDPA output besides its copy (P > 1: already dropped)
    }
  }
  const int h = alloc("residual h = x + attention", K::Hidden, C::AttentionWorkspace);
  release(attn);
  return h;
}

/// Untied Ulysses: one custom Function over stages, the attention's RMSNorm folded into its
/// projections (the normed input is never made: its 1/rms, the output and the per-stage LSE are
/// what survives). One stage's buffers are walked (every stage is the same size and reuses them).
int BlockHalves::untied_forward(bool grad, AttnSaved& sv) {
  sv.rstd = alloc("attention rmsnorm 1/rms", K::RowStat, C::AttentionWorkspace);
  if (!s_.cuda_target) {  // the 1/rms pass (ops::rmsnorm_rstd), one row tile: an fp32 copy (below
    // fp32) and its square; on a GPU the norm kernel reads x once and makes no temporary
    int copy = s_.c < 4 ? alloc("input norm tile (fp32 copy)", K::InputNormTile32, C::AttentionWorkspace) : -1;
    int square = alloc("input norm tile squared (fp32)", K::InputNormTile32, C::AttentionWorkspace);
    release(copy);
    release(square);
  }
  // Kept attention (kept_attention.h): the checkpointed forward keeps the output and the stages'
  // LSEs; the recompute replays them and runs no stage at all.
  const bool keeping = !grad && keeps_, replay = grad && keeps_;
  if (replay) {
    sv.out = std::exchange(sv.kept_out, -1);
    sv.lse = std::exchange(sv.kept_lse, -1);
  } else {
    sv.out = alloc("untied attention output (preallocated)", K::QLocal, C::AttentionWorkspace);
    sv.lse = alloc("per-stage log-sum-exp", K::Lse, C::AttentionWorkspace);
  }
  if (!replay) {  // one stage: K/V of its GQA group, then Q, attention, output all-to-all
    int staging = hold_stage_staging();
    int ks = alloc("stage k projection", K::KvStageLocal, C::AttentionWorkspace);
    ks = stage_rope(ks, K::KvStageLocal);
    int vs = alloc("stage v projection", K::KvStageLocal, C::AttentionWorkspace);
    int kh = stage_to_heads(ks, K::KvStageLocal, K::KvStageHead, "stage k (head layout)", /*packed=*/true);
    int vh = stage_to_heads(vs, K::KvStageLocal, K::KvStageHead, "stage v (head layout)", /*packed=*/false);
    int qs = alloc("stage q projection", K::QStageLocal, C::AttentionWorkspace);
    qs = stage_rope(qs, K::QStageLocal);
    int qh = stage_to_heads(qs, K::QStageLocal, K::QStageHead, "stage q (head layout)", /*packed=*/true);
    int ke = -1, ve = -1;
    repeated_kv(/*stage=*/true, ke, ve);
    int kg = -1, vg = -1;
    gathered_stage_kv(kg, vg);
    int oh = alloc("stage attention output", K::QStageHead, C::AttentionWorkspace);
    flash_forward_transients(/*stage=*/true);
    release(ke);
    release(ve);
    release(kg);
    release(vg);
    if (!s_.cuda_target) {  // the CPU kernel's [B, k, S, hd] output made [B, S, k, hd] (CUDA: a view)
      int copy = alloc("stage attention output (CPU layout copy)", K::QStageHead, C::AttentionWorkspace);
      release(oh);
      oh = copy;
    }
    // The output goes back through the staging straight into the preallocated output (P > 1) or
    // is copied into it (P = 1): nothing is allocated; the stage's q, k and v buffers live to the
    // end of the pass.
    release(oh);
    release(qh);
    release(kh);
    release(vh);
    drop_stage_staging(staging);
  }
  if (!grad) {
    release(sv.rstd);
    if (keeping) {
      m_.retag(sv.lse, C::SavedActivations, "kept attention log-sum-exp");
      sv.kept_lse = std::exchange(sv.lse, -1);
    } else {
      release(sv.lse);
    }
  }
  int attn = alloc("o_proj output", K::Hidden, C::AttentionWorkspace);
  if (!grad) {
    if (keeping) {
      m_.retag(sv.out, C::SavedActivations, "kept attention output");
      sv.kept_out = std::exchange(sv.out, -1);
    } else {
      release(sv.out);
    }
  }
  const int h = alloc("residual h = x + attention", K::Hidden, C::AttentionWorkspace);
  release(attn);
  return h;
}

/// The reverse of attention_forward from the incoming dh; returns dx = dh + the norm's gradient,
/// written into dh (the engine's block backward adds the residual in place). Frees `sv`.
///
/// Each weight gradient is walked where its node makes it, not all at the start: at the kernel's
/// backward only o_proj's exists (measured on an H200, 2026-11-27: Llama3-8B's rank 0 held 48 MiB
/// less than a plan with every attention weight gradient there, the [6144, 4096] bf16 q/k/v
/// weights' gradients, at 512K and 1M alike).
int BlockHalves::attention_backward(int dh, AttnSaved& sv, AttnGrads& grads) {
  if (s_.untied) {  // the norm's backward ran inside, in place: the accumulator is the input's gradient
    int dxa = untied_backward(dh, sv, grads);
    release(dxa);  // added into dh: dx
    return dh;
  }
  int dn1 = standard_backward(dh, sv, grads);
  // the norm's backward node: the input's gradient and the weight's
  int dxa = alloc("attention rmsnorm input gradient", K::Hidden, C::AttentionWorkspace);
  grads.norm = alloc("attention rmsnorm weight gradient", K::AttnNormGrad, C::AttentionWorkspace);
  release(dn1);
  release(sv.rstd);
  release(dxa);  // added into dh: dx
  return dh;
}

/// RoPE's backward has RoPE's shape: dx*cos + rotate_half^T(dx*sin), three temporaries.
int BlockHalves::rope_backward(int& dx, K kind, C cat) { return rope(dx, kind, cat); }

int BlockHalves::standard_backward(int dh, AttnSaved& sv, AttnGrads& grads) {
  (void)dh;
  // o_proj's backward node: its input's gradient and its weight's
  int d_o = alloc("d o (o_proj input gradient)", K::QLocal, C::AttentionWorkspace);
  grads.out = alloc("o_proj weight gradient", K::AttnOutGrad, C::AttentionWorkspace);
  release(sv.o);
  int d_oh = d_o;
  if (s_.P > 1) d_oh = all_to_all(d_o, K::QLocal, K::QHead, "d o after all-to-all (head layout)");
  // flash-attention backward: dq, dk, dv and the kernel's own buffers
  int ke = -1, ve = -1;  // as in forward
  repeated_kv(/*stage=*/false, ke, ve);
  int dq = alloc("flash backward dq", K::QHead, C::AttentionWorkspace);
  int dk = alloc("flash backward dk", K::KvHead, C::AttentionWorkspace);
  int dv = alloc("flash backward dv", K::KvHead, C::AttentionWorkspace);
  FlashBackwardBuffers kernel = flash_backward_buffers(/*stage=*/false);
  free_flash_buffers(kernel);
  release(ke);
  release(ve);
  release(sv.q_h);
  release(sv.k_h);
  release(sv.v_h);
  release(sv.o_h);
  release(sv.lse);
  release(d_oh);
  const K kv_local = s_.Hkv < s_.P ? K::KvLocalRep : K::KvLocal;
  if (s_.P > 1) {
    dq = all_to_all(dq, K::QHead, K::QLocal, "dq after all-to-all");
    dk = all_to_all(dk, K::KvHead, kv_local, "dk after all-to-all");
    dv = all_to_all(dv, K::KvHead, kv_local, "dv after all-to-all");
  }
  if (s_.Hkv < s_.P) {  // sum the replicas' gradients
    int dk_sum = alloc("dk summed over KV replicas", K::KvLocal, C::AttentionWorkspace);
    release(dk);
    dk = dk_sum;
    int dv_sum = alloc("dv summed over KV replicas", K::KvLocal, C::AttentionWorkspace);
    release(dv);
    dv = dv_sum;
  }
  dq = rope_backward(dq, K::QLocal, C::AttentionWorkspace);
  dk = rope_backward(dk, K::KvLocal, C::AttentionWorkspace);
  if (s_.qk_norm) {
    int dq0 = alloc("q head norm input gradient", K::QLocal, C::AttentionWorkspace);
    release(dq);
    release(sv.q_pre);
    dq = dq0;
    int dk0 = alloc("k head norm input gradient", K::KvLocal, C::AttentionWorkspace);
    release(dk);
    release(sv.k_pre);
    dk = dk0;
  }
  return projections_backward(dq, dk, dv, sv, grads);
}

/// dn1 = dq Wq + dk Wk + dv Wv: one product at a time added into dn1; each projection's node makes
/// its weight's gradient too (walked together, before the first product).
int BlockHalves::projections_backward(int& dq, int& dk, int& dv, AttnSaved& sv, AttnGrads& grads) {
  grads.projections = alloc("q/k/v weight gradients", K::AttnProjGrads, C::AttentionWorkspace);
  const int dn1 = alloc("attention rmsnorm output gradient", K::Hidden, C::AttentionWorkspace);
  int part = alloc("projection input gradient (partial)", K::Hidden, C::AttentionWorkspace);
  release(part);
  part = alloc("projection input gradient (partial)", K::Hidden, C::AttentionWorkspace);
  release(part);
  release(dq);
  release(dk);
  release(dv);
  release(sv.n1);
  return dn1;
}

/// The output projection is inside the Untied Function (untied_attention_projected): its backward
/// starts from dh and builds each stage's d o slice as dh x wo columns, so the whole d o is never
/// allocated. Its first product is o_proj's weight gradient (dh^T x the saved output); the q/k/v
/// weights' gradients are summed over the stages in fp32 and cast at the end (in fp32 the sums are
/// the gradients); each stage projects with the rows of wq, and each KV range with those of wk and
/// wv, gathered (index_select) and kept for the stage's or range's backward. Measured on an H200
/// (2026-11-27, Llama-3.2-1B at 128K, 2 stages of 16 heads): a plan without the fp32 sums and the
/// rows was 18 MiB low in every block's backward attention (12 MiB of sums beyond their bf16
/// gradients, 4 + 1 + 1 MiB of rows). The gradient of each product's rows ([m*hd, d], and its fp32
/// copy below fp32) lives only after the kernel's buffers are freed, and is not walked.
int BlockHalves::untied_backward(int dh, AttnSaved& sv, AttnGrads& grads) {
  (void)dh;
  grads.out = alloc("o_proj weight gradient", K::AttnOutGrad, C::AttentionWorkspace);
  const int dn1 = alloc("attention input gradient accumulator", K::Hidden, C::AttentionWorkspace);
  const bool sums32 = s_.c != 4;
  int sums = -1;
  if (sums32)
    sums = alloc("q/k/v weight gradients summed over the stages (fp32)", K::AttnProjGrads32, C::AttentionWorkspace);
  else
    grads.projections = alloc("q/k/v weight gradients", K::AttnProjGrads, C::AttentionWorkspace);
  {  // one stage (the first of its GQA group: it also recomputes and accumulates K/V)
    int staging = hold_stage_staging();
    int k_rows = alloc("stage wk rows (KV range)", K::KvStageRows, C::AttentionWorkspace);
    int v_rows = alloc("stage wv rows (KV range)", K::KvStageRows, C::AttentionWorkspace);
    int ks = alloc("stage k projection (recomputed)", K::KvStageLocal, C::AttentionWorkspace);
    ks = stage_rope(ks, K::KvStageLocal);
    int vs = alloc("stage v projection (recomputed)", K::KvStageLocal, C::AttentionWorkspace);
    int kh = stage_to_heads(ks, K::KvStageLocal, K::KvStageHead, "stage k (head layout)", /*packed=*/true);
    int vh = stage_to_heads(vs, K::KvStageLocal, K::KvStageHead, "stage v (head layout)", /*packed=*/false);
    // fp32 accumulators when some KV range spans stages or is gathered (UntiedStagePlan::
    // any_kv_accumulated); otherwise the kernel's dK/dV are the range's gradients
    const bool accumulated = kind_bytes(K::KvStageAccum32, s_) > 0;
    int dk_acc =
        accumulated ? alloc("stage dk accumulator (fp32, KV range)", K::KvStageAccum32, C::AttentionWorkspace) : -1;
    int dv_acc =
        accumulated ? alloc("stage dv accumulator (fp32, KV range)", K::KvStageAccum32, C::AttentionWorkspace) : -1;
    int q_rows = alloc("stage wq rows", K::QStageRows, C::AttentionWorkspace);
    int qs = alloc("stage q projection (recomputed)", K::QStageLocal, C::AttentionWorkspace);
    qs = stage_rope(qs, K::QStageLocal);
    int qh = stage_to_heads(qs, K::QStageLocal, K::QStageHead, "stage q (head layout)", /*packed=*/true);
    // The kernel reads the stage's saved output and its gradient in head layout: at P > 1 the
    // all-to-all's receive buffers; at P = 1 the engine's own buffers (StageBuffers::o_h, do_h),
    // which the slices are copied into (measured on an H200: without them the plan missed 2 x
    // [S, hps, hd] of the 1B's backward attention at 128K, 0.5 GiB)
    int o_slice = -1, oh = -1, doh = -1;
    if (s_.P > 1) {
      o_slice = alloc("stage output slice (contiguous)", K::QStageLocal, C::AttentionWorkspace);
      oh = all_to_all(o_slice, K::QStageLocal, K::QStageHead, "stage output (head layout)");
    } else {
      oh = alloc("stage output (head-layout copy)", K::QStageHead, C::AttentionWorkspace);
    }
    int do_slice = alloc("stage d o = dh x wo columns", K::QStageLocal, C::AttentionWorkspace);
    if (s_.P > 1) {
      doh = all_to_all(do_slice, K::QStageLocal, K::QStageHead, "stage d o (head layout)");
    } else {
      doh = alloc("stage d o (head-layout copy)", K::QStageHead, C::AttentionWorkspace);
      release(do_slice);
    }
    int ke = -1, ve = -1;  // as in forward
    repeated_kv(/*stage=*/true, ke, ve);
    int kg = -1, vg = -1;
    gathered_stage_kv(kg, vg);
    int dq = alloc("stage flash backward dq", K::QStageHead, C::AttentionWorkspace);
    // the kernel's dK/dV at the heads it read: the range's, or the query heads' where a stage
    // gathered K/V to their slots (KvStageGathered, 0 when none does)
    const K dkv =
        kind_bytes(K::KvStageGathered, s_) > kind_bytes(K::KvStageHead, s_) ? K::KvStageGathered : K::KvStageHead;
    int dk = alloc("stage flash backward dk", dkv, C::AttentionWorkspace);
    int dv = alloc("stage flash backward dv", dkv, C::AttentionWorkspace);
    FlashBackwardBuffers kernel = flash_backward_buffers(/*stage=*/true);
    free_flash_buffers(kernel);
    release(ke);
    release(ve);
    release(kg);
    release(vg);
    release(qh);
    release(oh);
    release(doh);
    if (accumulated) {
      release(dk);  // added into the range's accumulators
      release(dv);
    } else {
      dk_acc = dk;  // the kernel's gradients are the range's
      dv_acc = dv;
    }
    int dq_local = s_.P > 1 ? all_to_all(dq, K::QStageHead, K::QStageLocal, "stage dq after all-to-all") : dq;
    dq_local = rope_backward(dq_local, K::QStageLocal, C::AttentionWorkspace);
    release(dq_local);  // dn1 += dq Wq_rows; dWq rows = (dq * rstd)^T x * w (the norm folded)
    // end of the GQA group: K/V gradients back to the sequence layout
    int dk_local = s_.P > 1 ? all_to_all(dk_acc, K::KvStageHead, K::KvStageLocal, "stage dk after all-to-all") : dk_acc;
    dk_local = rope_backward(dk_local, K::KvStageLocal, C::AttentionWorkspace);
    release(dk_local);
    int dv_local = s_.P > 1 ? all_to_all(dv_acc, K::KvStageHead, K::KvStageLocal, "stage dv after all-to-all") : dv_acc;
    release(dv_local);
    release(kh);
    release(vh);
    release(q_rows);  // the stage's, at the end of its loop iteration
    release(k_rows);  // the range's, replaced by the next range's
    release(v_rows);
    drop_stage_staging(staging);  // the engine drops its stage buffers before the input norm's backward
  }
  // the input norm's backward over the accumulator, in place, a row tile at a time; its weight's
  // gradient (summed in fp32 over the tiles, [d]) cast to the weight's dtype
  int tile = alloc("input norm backward tile", K::InputNormTile, C::AttentionWorkspace);
  release(tile);
  grads.norm = alloc("attention rmsnorm weight gradient", K::AttnNormGrad, C::AttentionWorkspace);
  if (sums32) {  // the sums cast to the weights' dtype; the sums die with the Function's backward
    grads.projections = alloc("q/k/v weight gradients", K::AttnProjGrads, C::AttentionWorkspace);
    release(sums);
  }
  release(sv.rstd);
  release(sv.out);
  release(sv.lse);
  return dn1;  // now the block input's gradient through the attention
}

/// Under document masking with one call per segment (flash_attention.cpp; not the CUDA
/// half-precision variable-length call) the whole output and LSE come first, then each
/// segment's kernel call makes its own output and LSE, copied in and dropped before the next
/// segment's: the longest segment's are the most alive at once (on the CPU exactly those bytes
/// above the whole-sequence call at equal kernel blocks, parallel_tests "documents: the planner
/// charges*"). PyTorch's CPU flash-attention
/// forward then takes one thread's buffer while the kernel runs, after its output and log-sum-exp
/// (the measurement runs one intra-op thread); CUDA: none beyond those.
void BlockHalves::flash_forward_transients(bool stage) {
  int segment_out = -1, segment_lse = -1;
  if (s_.segment_calls) {
    segment_out = alloc("document segment's attention output (before its copy in)",
                        stage ? K::QStageSegment : K::QSegment, C::AttentionWorkspace);
    segment_lse = alloc("document segment's log-sum-exp (before its copy in)",
                        stage ? K::LseStageSegment : K::LseSegment, C::AttentionWorkspace);
  }
  if (!s_.cuda_target) {
    int scratch = alloc("CPU flash forward scratch", K::CpuFlashForwardScratch, C::AttentionWorkspace);
    release(scratch);
  }
  release(segment_lse);
  release(segment_out);
}

/// On CUDA, FlashAttention-2's mha_bwd allocates softmax_d (rowsum(dO * O), [B, heads, S] fp32),
/// an fp32 dq accumulator of q's size and, with GQA, dK/dV at the query-head count before summing
/// them per KV head (softmax_d measured on an H200, 2026-11-27: Llama3-8B's rank 0 held 16 B a
/// token above the plan in its backward attention, 4 heads x 4 B); PyTorch's CPU kernel takes GQA
/// natively, accumulates into dq and needs one thread's attn/grad_attn blocks. Under document
/// masking with one call per segment (the CPU, CUDA fp32) each segment's call makes its own dq, dk,
/// dv (the longest segment's the largest), copied into the whole ones; CUDA's memory-efficient
/// kernel's buffers stay planned at the whole sequence's size (each segment's call takes them at
/// its own, smaller: the plan errs high there, by more than the dense copy of its LSE, [heads, n]
/// fp32, each call takes). In half precision one FlashAttention-2 variable-length call takes the
/// whole sequence's buffers and no segment's copies (its dq accumulator and softmax_d pad the B*S
/// tokens by 128 per segment where the dense kernel pads S to 128: the plan leaves that uncharged).
FlashBackwardBuffers BlockHalves::flash_backward_buffers(bool stage) {
  FlashBackwardBuffers b;
  if (s_.segment_calls) {  // flash_attention.cpp: the whole dq/dk/dv first, then each segment's call makes its own
    b.segment_dq = alloc("document segment's dq (before its copy in)", stage ? K::QStageSegment : K::QSegment,
                         C::AttentionWorkspace);
    b.segment_dk = alloc("document segment's dk (before its copy in)", stage ? K::KvStageSegment : K::KvSegment,
                         C::AttentionWorkspace);
    b.segment_dv = alloc("document segment's dv (before its copy in)", stage ? K::KvStageSegment : K::KvSegment,
                         C::AttentionWorkspace);
  }
  if (!s_.cuda_target) {
    b.accumulator = alloc("CPU flash backward scratch", K::CpuFlashScratch, C::AttentionWorkspace);
    return b;
  }
  b.softmax_d = stage ? alloc("stage flash backward softmax_d (fp32)", K::SoftmaxDStage, C::AttentionWorkspace)
                      : alloc("flash backward softmax_d (fp32)", K::SoftmaxD, C::AttentionWorkspace);
  b.accumulator = stage ? alloc("stage dq accumulator (fp32)", K::DqAccumStage, C::AttentionWorkspace)
                        : alloc("flash backward dq accumulator (fp32)", K::DqAccum, C::AttentionWorkspace);
  if (stage ? s_.k > s_.max_kv_count : s_.hq > s_.hkv) {
    b.dk_wide = stage ? alloc("stage dk at query-head count (GQA)", K::GqaExpandedStage, C::AttentionWorkspace)
                      : alloc("flash backward dk at query-head count (GQA)", K::GqaExpanded, C::AttentionWorkspace);
    b.dv_wide = stage ? alloc("stage dv at query-head count (GQA)", K::GqaExpandedStage, C::AttentionWorkspace)
                      : alloc("flash backward dv at query-head count (GQA)", K::GqaExpanded, C::AttentionWorkspace);
  }
  return b;
}

void BlockHalves::free_flash_buffers(FlashBackwardBuffers& b) {
  release(b.dk_wide);
  release(b.dv_wide);
  release(b.accumulator);
  release(b.softmax_d);
  release(b.segment_dq);
  release(b.segment_dk);
  release(b.segment_dv);
}

/// The memory-efficient CUDA kernel (fp32) takes equal head counts: a call with more query than KV
/// heads repeats K/V to its query heads for the call (kernel_repeats_kv; flash_attention.cpp's
/// expand_kv). Under document masking each segment's call repeats its segment's: charged at the
/// whole sequence, the plan errs high there (as for that kernel's other buffers).
void BlockHalves::repeated_kv(bool stage, int& k, int& v) {
  if (stage) {
    if (!kernel_repeats_kv(s_.lse_kernel, s_.k, s_.max_kv_count)) return;
    k = alloc("stage k repeated to the query heads (fp32 CUDA kernel)", K::GqaExpandedStage, C::AttentionWorkspace);
    v = alloc("stage v repeated to the query heads (fp32 CUDA kernel)", K::GqaExpandedStage, C::AttentionWorkspace);
    return;
  }
  if (!kernel_repeats_kv(s_.lse_kernel, s_.hq, s_.hkv)) return;
  k = alloc("k repeated to the query heads (fp32 CUDA kernel)", K::GqaExpanded, C::AttentionWorkspace);
  v = alloc("v repeated to the query heads (fp32 CUDA kernel)", K::GqaExpanded, C::AttentionWorkspace);
}

/// A stage whose query heads do not map uniformly onto its KV range (k and g not dividing each
/// other) reads K/V gathered per query head (untied_attention.cpp's index_select by KV slot).
void BlockHalves::gathered_stage_kv(int& k, int& v) {
  if (kind_bytes(K::KvStageGathered, s_) == 0) return;
  k = alloc("stage k gathered to its query heads' KV slots", K::KvStageGathered, C::AttentionWorkspace);
  v = alloc("stage v gathered to its query heads' KV slots", K::KvStageGathered, C::AttentionWorkspace);
}

// --- MLP half ------------------------------------------------------------------------------------

/// need_output: the block output h + MLP is made (forward); the recompute keeps only the MLP
/// branch's gradient edge and makes no output (and a tiled MLP runs no tile: tiled_mlp.h).
int BlockHalves::mlp_forward(bool grad, MlpSaved& sv, bool need_output) {
  sv.n2 = alloc("MLP rmsnorm output", K::Hidden, C::MlpWorkspace);
  sv.rstd = alloc("MLP rmsnorm 1/rms", K::RowStat, C::MlpWorkspace);
  int y;
  if (!s_.tiled_mlp && grad) {  // autograd keeps gate and up (ops::swiglu's node) and the product
    sv.gate = alloc("gate projection", K::Ffn, C::MlpWorkspace);
    sv.up = alloc("up projection", K::Ffn, C::MlpWorkspace);
    sv.prod = alloc("silu(gate) * up", K::Ffn, C::MlpWorkspace);
    y = alloc("down projection output", K::Hidden, C::MlpWorkspace);
  } else if (!s_.tiled_mlp) {  // without a graph: the input moved in, the product in gate's memory
    int gate = alloc("gate projection", K::Ffn, C::MlpWorkspace);
    int up = alloc("up projection", K::Ffn, C::MlpWorkspace);
    release(sv.n2);
    release(sv.rstd);
    release(up);  // silu(gate) * up written into gate
    y = alloc("down projection output", K::Hidden, C::MlpWorkspace);
    release(gate);
  } else if (!need_output) {  // the recompute: the tiled Function saves its input, runs no tile
    y = alloc("tiled MLP output (not computed: the backward recomputes each tile)", K::Hidden, C::MlpWorkspace);
  } else {  // the tiled forward runs without a graph: each tile as the untiled one above
    y = alloc("tiled MLP output", K::Hidden, C::MlpWorkspace);
    int g = alloc("tile gate", K::FfnTile, C::MlpWorkspace);
    int u = alloc("tile up", K::FfnTile, C::MlpWorkspace);
    release(u);
    int yt = alloc("tile down projection", K::HiddenTile, C::MlpWorkspace);
    release(g);
    release(yt);
  }
  if (!grad) {
    release(sv.n2);
    release(sv.rstd);
  }
  const int out = need_output ? alloc("block output = h + MLP", K::Hidden, C::MlpWorkspace) : -1;
  release(y);
  return out;
}

/// ops::swiglu_backward_ (engine/ops/swiglu_op.cpp) from dp, the product's gradient: d gate is
/// written into gate's memory (the caller keeps gate's handle as d gate's), d up into up's on CUDA
/// and into a new `kind` on the CPU (silu(gate) recomputed in it), where up's memory dies with the
/// call. Frees dp and sets `up` to -1; returns d up's handle.
int BlockHalves::swiglu_backward(int& dp, int& up, K kind, const char* d_up_name) {
  const int old_up = up;
  up = -1;
  const int d_up = s_.cuda_target ? old_up : alloc(d_up_name, kind, C::MlpWorkspace);
  release(dp);
  if (d_up != old_up) {
    int dead = old_up;
    release(dead);
  }
  return d_up;
}

/// The MLP half's backward from dy; returns dh = dy + d(MLP branch), written into dy (the
/// engine adds the residual into the incoming gradient when that is its own). Frees `sv`. Untiled,
/// each weight gradient appears with its autograd node (the down projection's first, the gate's
/// and up's with their input-gradient products, the norm's last: the CPU measures the untiled
/// MLP's workspace to the byte, engine_tests "measurement: tiled MLP*"); the tiled Function makes
/// its three at the start (or, summing in fp32, casts them at the end).
int BlockHalves::mlp_backward(MlpSaved& sv, MlpGrads& grads, int dy) {
  auto gate_grad = [&] { grads.gate = alloc("gate-projection weight gradient", K::MlpWeightGrad, C::MlpWorkspace); };
  auto up_grad = [&] { grads.up = alloc("up-projection weight gradient", K::MlpWeightGrad, C::MlpWorkspace); };
  auto down_grad = [&] { grads.down = alloc("down-projection weight gradient", K::MlpWeightGrad, C::MlpWorkspace); };
  auto projection_grads = [&] {
    gate_grad();
    up_grad();
    down_grad();
  };
  int dn2;
  if (!s_.tiled_mlp) {
    int dp = alloc("d(silu(gate) * up)", K::Ffn, C::MlpWorkspace);
    down_grad();
    release(sv.prod);
    int dg = sv.gate;  // d gate in gate's memory
    sv.gate = -1;
    int dup = swiglu_backward(dp, sv.up, K::Ffn, "d up");
    dn2 = alloc("MLP rmsnorm output gradient", K::Hidden, C::MlpWorkspace);
    gate_grad();
    int part = alloc("up-projection input gradient (partial)", K::Hidden, C::MlpWorkspace);
    up_grad();
    release(part);
    release(dg);
    release(dup);
  } else {
    dn2 = alloc("tiled MLP input gradient", K::Hidden, C::MlpWorkspace);
    // the fp32 sums beside the compute-dtype gradients (none with fp32 weights: the sums are they)
    const bool sums32 = mlp_tile_grads_need_accumulators(s_.c == 4);
    int sums = -1;
    if (sums32)
      sums = alloc("MLP weight gradients summed over the tiles", K::MlpGradAccum, C::MlpWorkspace);
    else
      projection_grads();
    // one tile, differentiated by hand (tiled_mlp.cpp); each weight-gradient product is added in
    // place, through a temporary only where the rule says so (tile_grad_rules.h: MlpWeightTile 0)
    auto add_product = [&](const char* what) {
      int product = alloc(what, K::MlpWeightTile, C::MlpWorkspace);
      release(product);
    };
    int g = alloc("tile gate, then d gate in its memory", K::FfnTile, C::MlpWorkspace);
    int u = alloc("tile up, then d up in its memory (CUDA)", K::FfnTile, C::MlpWorkspace);
    int p = alloc("tile silu(gate) * up", K::FfnTile, C::MlpWorkspace);
    add_product("tile down-projection weight gradient");
    release(p);
    int dp = alloc("tile d(silu(gate) * up)", K::FfnTile, C::MlpWorkspace);
    int dg = g;  // d gate in gate's memory
    int dup = swiglu_backward(dp, u, K::FfnTile, "tile d up");
    add_product("tile up weight gradient");
    add_product("tile gate weight gradient");
    int dxt = alloc("tile input gradient", K::HiddenTile, C::MlpWorkspace);
    release(dup);
    release(dg);
    release(dxt);  // copied into the input gradient
    if (sums32) {  // the sums cast to the compute dtype, then freed
      projection_grads();
      release(sums);
    }
  }
  release(sv.n2);
  // the norm's backward node: the input's gradient and the weight's
  int dhn = alloc("MLP rmsnorm input gradient", K::Hidden, C::MlpWorkspace);
  grads.norm = alloc("MLP rmsnorm weight gradient", K::MlpNormGrad, C::MlpWorkspace);
  release(dn2);
  release(sv.rstd);
  release(dhn);  // added into dy: dh
  return dy;
}

}  // namespace odyssey::planner_detail
