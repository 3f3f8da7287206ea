// Untied Ulysses attention for the planner's liveness walk, as engine/parallel/untied_attention.cpp
// runs it: stage buffers allocated once per call and reused, per stage the projections of that
// stage only (K/V once per KV range), the all-to-alls into the buffers, flash attention; backward
// recomputes the projections, runs the flash backward from the saved output and LSE, and takes
// each projection's gradient through its own small graph. docs/planner.md section 4.
#include "engine/planner/block_halves.h"

namespace odyssey::planner_detail {

using K = TensorKind;
using C = PlanCategory;

namespace {
constexpr C kAttn = C::AttentionWorkspace;
}  // namespace

/// One forward stage: the stage's query rows and projection (+RoPE), sent into q_h; for a new KV
/// range its K (+RoPE) and V rows and projections, sent into k_h/v_h; flash attention; the output
/// sent back into its columns of the preallocated output (no allocation: staging is reused).
void BlockHalves::untied_forward_stage(bool kv_new, bool straddle) {
  int rows = a("stage q weight rows", K::UntiedQRows, kAttn);
  int lin = a("stage q projection", K::QStageLocal, kAttn);
  int q = rope(lin, K::QStageLocal, "stage q after RoPE");
  f(rows);
  f(q);  // sent into q_h through the staging buffer
  if (kv_new) {
    rows = a("stage k weight rows", K::UntiedKvRows, kAttn);
    lin = a("stage k projection", K::KvStageLocal, kAttn);
    int k = rope(lin, K::KvStageLocal, "stage k after RoPE");
    f(rows);
    f(k);
    rows = a("stage v weight rows", K::UntiedKvRows, kAttn);
    int v = a("stage v projection", K::KvStageLocal, kAttn);
    f(rows);
    f(v);
  }
  int ku = -1, vu = -1;
  if (straddle) {  // K/V gathered to the stage's query heads
    ku = a("stage k gathered to its query heads", K::QStageHead, kAttn);
    vu = a("stage v gathered to its query heads", K::QStageHead, kAttn);
  }
  int ke = -1, ve = -1;
  if (s_.cuda_target && !straddle && s_.hs > s_.khs) {  // the CUDA kernels want equal head counts
    ke = a("stage k expanded to its query heads", K::QStageHead, kAttn);
    ve = a("stage v expanded to its query heads", K::QStageHead, kAttn);
  }
  int o = a("stage attention output", K::QStageHead, kAttn);
  flash_forward_scratch();
  f(ke);
  f(ve);
  f(ku);
  f(vu);
  f(o);  // sent back into the output's columns
}

/// One custom Function over the stages: only its input (n1), the preallocated output and the
/// per-stage LSEs survive. Stage 0 (a new KV range) is walked, then, with more stages, the last
/// one with every stage's LSE alive.
int BlockHalves::untied_forward(bool grad, AttnSaved& sv) {
  sv.n1 = norm_forward(grad, "attention rmsnorm output", kAttn, sv.rstd);
  sv.out = a("untied attention output (preallocated)", K::QLocal, kAttn);
  int send = s_.P > 1 ? a("stage all-to-all staging", K::UntiedStaging, C::CommBuffers) : -1;
  int recv = s_.P > 1 && s_.B > 1 ? a("stage all-to-all receive staging", K::UntiedStaging, C::CommBuffers) : -1;
  int q_h = a("stage q (head layout)", K::QStageHead, kAttn);
  int k_h = a("KV range k (head layout)", K::KvStageHead, kAttn);
  int v_h = a("KV range v (head layout)", K::KvStageHead, kAttn);
  // one LSE per stage, kept for backward (allocated with each stage's output)
  const int64_t lse_stage = kind_bytes(K::Lse, s_) / s_.stages;
  sv.lse = m_.alloc("per-stage log-sum-exp", K::Lse, kAttn, lse_stage);
  untied_forward_stage(true, s_.kv_straddle);
  if (s_.stages > 1) {
    sv.lse_rest = m_.alloc("per-stage log-sum-exp", K::Lse, kAttn, lse_stage, static_cast<int32_t>(s_.stages - 1));
    untied_forward_stage(s_.stages_per_range == 1, s_.kv_straddle);
  }
  f(q_h);
  f(k_h);
  f(v_h);
  f(send);
  f(recv);
  if (!grad) {  // the Function's state dies with it; attention() drops the normed input
    f(sv.lse);
    f(sv.lse_rest);
    f(sv.n1);
  }
  int attn = a("o_proj output", K::Hidden, kAttn);
  if (!grad) f(sv.out);
  const int h = a("residual h = x + attention", K::Hidden, kAttn);
  f(attn);
  return h;
}

/// One projection's gradient through its own graph (inside the call, never during the attention
/// backward): recompute (+RoPE) with grad, RoPE backward, the linear's input gradient (added into
/// dx) and the rows' gradient (index_add_ into the fp32 accumulator).
void BlockHalves::untied_projection_backward(K local, K rows, bool with_rope) {
  int pre = a("projection recomputed with grad", local, kAttn);
  int d_lin = -1;
  if (with_rope) {
    pre = rope(pre, local, "projection after RoPE (graph root)");
    d_lin = a("RoPE backward of the projection", local, kAttn);
  }
  int dx_part = a("projection input gradient (added into dx)", K::Hidden, kAttn);
  int d_rows = a("projection weight rows gradient", rows, kAttn);
  f(d_lin);
  f(dx_part);
  f(d_rows);
  f(pre);
}

/// One backward stage: a new range recomputes its K/V (and their all-to-alls) and, when the range
/// spans stages, the fp32 dK/dV accumulators appear; then the stage's Q, the output and its
/// gradient to the head layout (into the reused buffers), the flash backward, dq back into o_h's
/// memory and Q's projection gradient; the range's last stage sends dK/dV back and takes K's and
/// V's projection gradients.
void BlockHalves::untied_backward_stage(bool first, bool last, int& k_rows, int& v_rows, int& dk_acc32,
                                        int& dv_acc32) {
  if (first) {
    k_rows = a("KV range k weight rows", K::UntiedKvRows, kAttn);
    v_rows = a("KV range v weight rows", K::UntiedKvRows, kAttn);
    int lin = a("KV range k projection (recomputed)", K::KvStageLocal, kAttn);
    int k = rope(lin, K::KvStageLocal, "KV range k after RoPE (recomputed)");
    f(k);
    int v = a("KV range v projection (recomputed)", K::KvStageLocal, kAttn);
    f(v);
    if (!s_.kv_direct && dk_acc32 < 0) {
      dk_acc32 = a("KV range dk accumulator (fp32)", K::KvStageHead32, kAttn);
      dv_acc32 = a("KV range dv accumulator (fp32)", K::KvStageHead32, kAttn);
    }
  }
  int q_rows = a("stage q weight rows", K::UntiedQRows, kAttn);
  int lin = a("stage q projection (recomputed)", K::QStageLocal, kAttn);
  int q = rope(lin, K::QStageLocal, "stage q after RoPE (recomputed)");
  f(q);
  int ku = -1, vu = -1, ke = -1, ve = -1;
  if (s_.kv_straddle) {
    ku = a("stage k gathered to its query heads", K::QStageHead, kAttn);
    vu = a("stage v gathered to its query heads", K::QStageHead, kAttn);
  }
  const bool expand = s_.cuda_target && !s_.kv_straddle && s_.hs > s_.khs;
  if (expand) {
    ke = a("stage k expanded to its query heads", K::QStageHead, kAttn);
    ve = a("stage v expanded to its query heads", K::QStageHead, kAttn);
  }
  const K kv_grad = s_.kv_straddle || expand ? K::QStageHead : K::KvStageHead;
  int dq = a("stage flash backward dq", K::QStageHead, kAttn);
  int dk = a("stage flash backward dk", kv_grad, kAttn);
  int dv = a("stage flash backward dv", kv_grad, kAttn);
  if (s_.cuda_target) {
    int acc = a("stage flash backward dq accumulator (fp32)", K::DqAccumStage, kAttn);
    f(acc);
  } else if (kind_bytes(K::FlashBwdScratch, s_) > 0) {
    int scratch = a("flash backward scratch (CPU kernel)", K::FlashBwdScratch, kAttn);
    f(scratch);
  }
  if (expand) {  // summed per KV head
    int k_sum = a("stage flash backward dk", K::KvStageHead, kAttn);
    f(dk);
    dk = k_sum;
    int v_sum = a("stage flash backward dv", K::KvStageHead, kAttn);
    f(dv);
    dv = v_sum;
    f(ke);
    f(ve);
  }
  f(ku);
  f(vu);
  if (!s_.kv_direct) {  // added into the range's accumulators
    f(dk);
    f(dv);
  }
  f(dq);  // sent back into o_h's memory
  untied_projection_backward(K::QStageLocal, K::UntiedQRows, true);
  f(q_rows);
  if (!last) return;
  int cast = s_.c != 4 && !s_.kv_direct ? a("KV range dk in the compute dtype", K::KvStageHead, kAttn) : -1;
  f(cast);
  f(dk);  // direct: the kernel's dk was the range's gradient
  untied_projection_backward(K::KvStageLocal, K::UntiedKvRows, true);
  cast = s_.c != 4 && !s_.kv_direct ? a("KV range dv in the compute dtype", K::KvStageHead, kAttn) : -1;
  f(cast);
  f(dv);
  untied_projection_backward(K::KvStageLocal, K::UntiedKvRows, false);
  f(k_rows);
  f(v_rows);
}

/// From d o (the o_proj input gradient): the Function's backward, then the attention norm's.
int BlockHalves::untied_backward(int d_o, AttnSaved& sv, std::vector<int>& grads) {
  int dx = a("untied input gradient accumulator", K::Hidden, kAttn);
  int wq = a("Wq gradient accumulator (fp32)", K::UntiedWqAccum, kAttn);
  int wk = a("Wk gradient accumulator (fp32)", K::UntiedWkvAccum, kAttn);
  int wv = a("Wv gradient accumulator (fp32)", K::UntiedWkvAccum, kAttn);
  int send = s_.P > 1 ? a("stage all-to-all staging", K::UntiedStaging, C::CommBuffers) : -1;
  int recv = s_.P > 1 && s_.B > 1 ? a("stage all-to-all receive staging", K::UntiedStaging, C::CommBuffers) : -1;
  int q_h = a("stage q (head layout, recomputed)", K::QStageHead, kAttn);
  int o_h = a("stage output (head layout)", K::QStageHead, kAttn);
  int do_h = a("stage d o (head layout)", K::QStageHead, kAttn);
  int loc = s_.khs > s_.hs ? a("local-layout K/V gradient buffer", K::UntiedLocFlat, kAttn) : -1;
  int k_h = a("KV range k (head layout, recomputed)", K::KvStageHead, kAttn);
  int v_h = a("KV range v (head layout, recomputed)", K::KvStageHead, kAttn);
  int k_rows = -1, v_rows = -1, dk_acc = -1, dv_acc = -1;
  untied_backward_stage(true, s_.stages_per_range == 1, k_rows, v_rows, dk_acc, dv_acc);
  if (s_.stages > 1) untied_backward_stage(s_.stages_per_range == 1, true, k_rows, v_rows, dk_acc, dv_acc);
  for (int* h : {&dk_acc, &dv_acc, &q_h, &o_h, &do_h, &loc, &k_h, &v_h, &send, &recv}) f(*h);
  if (s_.c != 4) {  // the fp32 weight-row accumulators are cast to the weights' dtype on return
    grads.push_back(a("q weight gradient", K::WqGrad, kAttn));
    grads.push_back(a("k weight gradient", K::WkvGrad, kAttn));
    grads.push_back(a("v weight gradient", K::WkvGrad, kAttn));
    f(wq);
    f(wk);
    f(wv);
  } else {
    for (int h : {wq, wk, wv}) grads.push_back(h);
  }
  f(d_o);
  f(sv.out);
  f(sv.n1);
  f(sv.lse);
  f(sv.lse_rest);
  return norm_backward(dx, sv.rstd, kAttn, &grads);  // + dh in place
}

}  // namespace odyssey::planner_detail
