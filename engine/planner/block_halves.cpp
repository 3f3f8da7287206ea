// The two halves of a decoder block as the engine runs them, replayed as allocations and frees:
// attention (standard; Untied Ulysses stages in untied_walk.cpp) and MLP (untiled or tiled),
// forward with or without grad and backward. docs/planner.md sections 3-5 list every tensor.
#include "engine/planner/block_halves.h"

namespace odyssey::planner_detail {

using K = TensorKind;
using C = PlanCategory;

int BlockHalves::a(const char* name, K kind, C cat, int32_t count) {
  return m_.alloc(name, kind, cat, kind_bytes(kind, s_), count);
}

void BlockHalves::f(int& h) {
  if (h >= 0) m_.free(h);
  h = -1;
}

// --- building blocks -----------------------------------------------------------------------------

/// RMSNorm is one autograd node (engine/model/layers.cpp): 1/rms [B, s] fp32, then the output;
/// it saves its input (alive anyway), the weight and 1/rms.
int BlockHalves::norm_forward(bool grad, const char* name, C cat, int& rstd) {
  rstd = a("rmsnorm 1/rms", K::RowStat, cat);
  const int y = a(name, K::Hidden, cat);
  if (!grad) f(rstd);
  return y;
}

/// RMSNorm backward. CPU formula: n = x/rms and dy*n (two fp32 [B, s, d]), the input gradient in
/// n's memory (cast when the compute dtype is not fp32). CUDA: the kernel writes dx directly.
int BlockHalves::norm_backward(int& dy, int& rstd, C cat, std::vector<int>* grads) {
  int dx;
  if (s_.cuda_target) {
    dx = a("rmsnorm input gradient", K::Hidden, cat);
  } else {
    int n = a("rmsnorm backward x/rms (fp32)", K::Hidden32, cat);
    int t = a("rmsnorm backward dy*x/rms (fp32)", K::Hidden32, cat);
    if (grads) grads->push_back(a("rmsnorm weight gradient", K::NormGrad, cat));
    f(t);
    if (s_.c != 4) {
      dx = a("rmsnorm input gradient", K::Hidden, cat);
      f(n);
    } else {
      dx = n;
      m_.rename(dx, "rmsnorm input gradient");
    }
  }
  if (s_.cuda_target && grads) grads->push_back(a("rmsnorm weight gradient", K::NormGrad, cat));
  f(dy);
  f(rstd);
  return dx;
}

/// RoPE is one autograd node saving only the tables: its output (or, in backward, its input
/// gradient) is the only allocation; the input dies unless something else keeps it.
int BlockHalves::rope(int& x, K kind, const char* name) {
  const int out = a(name, kind, C::AttentionWorkspace);
  f(x);
  return out;
}

/// seq -> heads all-to-all: the result buffer and a contiguous send copy (comm_buffers); with
/// B = 1 the result is received in place, B > 1 needs a receive buffer as well.
int BlockHalves::seq_to_heads(int& x, K local, K head, const char* name, bool drop_input) {
  const int out = a(name, head, C::CommBuffers);
  int send = a("all-to-all send copy", local, C::CommBuffers);
  int recv = s_.B > 1 ? a("all-to-all receive buffer", local, C::CommBuffers) : -1;
  f(send);
  f(recv);
  if (drop_input) f(x);
  return out;
}

/// heads -> seq all-to-all: the result buffer and a receive buffer (comm_buffers); with B = 1 the
/// contiguous input is sent as it is, B > 1 needs a send copy as well.
int BlockHalves::heads_to_seq(int& x, K head, K local, const char* name, bool drop_input) {
  const int out = a(name, local, C::CommBuffers);
  int send = s_.B > 1 ? a("all-to-all send copy", head, C::CommBuffers) : -1;
  int recv = a("all-to-all receive buffer", local, C::CommBuffers);
  f(send);
  f(recv);
  if (drop_input) f(x);
  return out;
}

/// The CPU flash kernel's per-thread blocks exist only while the kernel runs (0 B on GPUs).
void BlockHalves::flash_forward_scratch() {
  if (kind_bytes(K::FlashFwdScratch, s_) == 0) return;
  int scratch = a("flash attention scratch (CPU kernel)", K::FlashFwdScratch, C::AttentionWorkspace);
  f(scratch);
}

// --- attention half ----------------------------------------------------------------------------

/// rmsnorm -> q/k/v -> [qk-norm] -> RoPE -> [replicate KV] -> all-to-all -> SDPA -> all-to-all
/// -> o_proj -> residual. Returns h; with grad, fills `sv` with what autograd keeps.
int BlockHalves::attention_forward(bool grad, AttnSaved& sv) {
  if (s_.untied) return untied_forward(grad, sv);
  sv.n1 = norm_forward(grad, "attention rmsnorm output", C::AttentionWorkspace, sv.rstd);
  int q = a("q projection", K::QLocal, C::AttentionWorkspace);
  int k = a("k projection", K::KvLocal, C::AttentionWorkspace);
  int v = a("v projection", K::KvLocal, C::AttentionWorkspace);
  if (!grad) f(sv.n1);  // attention() releases the normed input once the projections exist
  if (s_.qk_norm) {
    int qn = a("q head norm", K::QLocal, C::AttentionWorkspace);
    int kn = a("k head norm", K::KvLocal, C::AttentionWorkspace);
    if (grad) {  // the head norms save their inputs
      sv.q_pre = q;
      sv.k_pre = k;
    } else {
      f(q);
      f(k);
    }
    q = qn;
    k = kn;
  }
  q = rope(q, K::QLocal, "q after RoPE");
  k = rope(k, K::KvLocal, "k after RoPE");
  K kv_local = K::KvLocal;
  if (s_.Hkv < s_.P) {  // replicate KV heads up to the degree before the all-to-all
    int k_rep = a("K replicated to the Ulysses degree", K::KvLocalRep, C::AttentionWorkspace);
    f(k);
    k = k_rep;
    int v_rep = a("V replicated to the Ulysses degree", K::KvLocalRep, C::AttentionWorkspace);
    f(v);
    v = v_rep;
    kv_local = K::KvLocalRep;
  }
  int qh = q, kh = k, vh = v;
  if (s_.P > 1) {
    qh = seq_to_heads(q, K::QLocal, K::QHead, "q after all-to-all (head layout)");
    kh = seq_to_heads(k, kv_local, K::KvHead, "k after all-to-all (head layout)");
    vh = seq_to_heads(v, kv_local, K::KvHead, "v after all-to-all (head layout)");
  }
  int oh = a("SDPA output (head layout)", K::QHead, C::AttentionWorkspace);
  int lse = a("SDPA log-sum-exp", K::Lse, C::AttentionWorkspace);
  flash_forward_scratch();
  if (grad) {
    sv.q_h = qh;
    sv.k_h = kh;
    sv.v_h = vh;
    sv.o_h = oh;
    sv.lse = lse;
  } else {
    f(lse);
    f(qh);
    f(kh);
    f(vh);
  }
  // SDPA keeps its output with grad, so the all-to-all back drops it only without grad
  int o = s_.P > 1 ? heads_to_seq(oh, K::QHead, K::QLocal, "attention output after all-to-all", !grad) : oh;
  int attn = a("o_proj output", K::Hidden, C::AttentionWorkspace);
  if (grad) {
    if (s_.P > 1) sv.o = o;
  } else {
    f(o);
  }
  const int h = a("residual h = x + attention", K::Hidden, C::AttentionWorkspace);
  f(attn);
  return h;
}

/// The reverse of attention_forward from the incoming dh (which autograd passes through the
/// residual unchanged); returns dx. Frees everything in `sv`.
int BlockHalves::attention_backward(int dh, AttnSaved& sv, std::vector<int>& grads) {
  (void)dh;
  int d_o = a("d o (o_proj input gradient)", K::QLocal, C::AttentionWorkspace);
  grads.push_back(a("o_proj weight gradient", K::WoGrad, C::AttentionWorkspace));
  if (s_.untied) return untied_backward(d_o, sv, grads);
  f(sv.o);
  int d_oh = s_.P > 1 ? seq_to_heads(d_o, K::QLocal, K::QHead, "d o after all-to-all (head layout)") : d_o;
  // flash backward: dq, dk, dv; on GPUs FlashAttention-2's fp32 dq accumulator, its softmax
  // row sums and, with GQA, dK/dV at the query-head count before the per-KV-head sum
  int dq = a("flash backward dq", K::QHead, C::AttentionWorkspace);
  int dk = a("flash backward dk", K::KvHead, C::AttentionWorkspace);
  int dv = a("flash backward dv", K::KvHead, C::AttentionWorkspace);
  if (s_.cuda_target) {
    int acc = a("flash backward dq accumulator (fp32)", K::DqAccum, C::AttentionWorkspace);
    int rows = a("flash backward softmax row sums (fp32)", K::Lse, C::AttentionWorkspace);
    int ek = -1, ev = -1;
    if (s_.hq > s_.hkv) {
      ek = a("flash backward dk at query-head count (GQA)", K::GqaExpanded, C::AttentionWorkspace);
      ev = a("flash backward dv at query-head count (GQA)", K::GqaExpanded, C::AttentionWorkspace);
    }
    f(ek);
    f(ev);
    f(rows);
    f(acc);
  } else if (kind_bytes(K::FlashBwdScratch, s_) > 0) {
    int scratch = a("flash backward scratch (CPU kernel)", K::FlashBwdScratch, C::AttentionWorkspace);
    f(scratch);
  }
  f(sv.q_h);
  f(sv.k_h);
  f(sv.v_h);
  f(sv.o_h);
  f(sv.lse);
  f(d_oh);
  // all-to-alls back (v, k, q: autograd runs the most recently created node first), then the
  // replica sums, the RoPE backwards (k, q) and the projections (v, k, q)
  const K kv_local = s_.Hkv < s_.P ? K::KvLocalRep : K::KvLocal;
  if (s_.P > 1) {
    dv = heads_to_seq(dv, K::KvHead, kv_local, "dv after all-to-all");
    dk = heads_to_seq(dk, K::KvHead, kv_local, "dk after all-to-all");
    dq = heads_to_seq(dq, K::QHead, K::QLocal, "dq after all-to-all");
  }
  if (s_.Hkv < s_.P) {  // sum the replicas' gradients
    int dv_sum = a("dv summed over KV replicas", K::KvLocal, C::AttentionWorkspace);
    f(dv);
    dv = dv_sum;
    int dk_sum = a("dk summed over KV replicas", K::KvLocal, C::AttentionWorkspace);
    f(dk);
    dk = dk_sum;
  }
  dk = rope(dk, K::KvLocal, "RoPE backward dk");
  dq = rope(dq, K::QLocal, "RoPE backward dq");
  if (s_.qk_norm) {
    int dk0 = a("k head norm input gradient", K::KvLocal, C::AttentionWorkspace);
    grads.push_back(a("k head norm weight gradient", K::HeadNormGrad, C::AttentionWorkspace));
    f(dk);
    f(sv.k_pre);
    dk = dk0;
    int dq0 = a("q head norm input gradient", K::QLocal, C::AttentionWorkspace);
    grads.push_back(a("q head norm weight gradient", K::HeadNormGrad, C::AttentionWorkspace));
    f(dq);
    f(sv.q_pre);
    dq = dq0;
  }
  // dn1 = dv Wv + dk Wk + dq Wq: the first product, the others added into it in place
  int dn1 = a("attention rmsnorm output gradient", K::Hidden, C::AttentionWorkspace);
  grads.push_back(a("v weight gradient", K::WkvGrad, C::AttentionWorkspace));
  f(dv);
  for (int i = 0; i < 2; ++i) {
    int part = a("projection input gradient (partial)", K::Hidden, C::AttentionWorkspace);
    grads.push_back(a(i == 0 ? "k weight gradient" : "q weight gradient", i == 0 ? K::WkvGrad : K::WqGrad,
                      C::AttentionWorkspace));
    f(part);
    f(i == 0 ? dk : dq);
  }
  f(sv.n1);
  return norm_backward(dn1, sv.rstd, C::AttentionWorkspace, &grads);  // + dh in place
}

// --- MLP half ------------------------------------------------------------------------------------

int BlockHalves::mlp_forward(bool grad, MlpSaved& sv) {
  sv.n2 = norm_forward(grad, "MLP rmsnorm output", C::MlpWorkspace, sv.rstd);
  int y;
  if (!s_.tiled_mlp) {
    sv.gate = a("gate projection", K::Ffn, C::MlpWorkspace);
    sv.up = a("up projection", K::Ffn, C::MlpWorkspace);
    if (grad) {
      sv.act = a("silu(gate)", K::Ffn, C::MlpWorkspace);
      sv.prod = a("silu(gate) * up", K::Ffn, C::MlpWorkspace);
      y = a("down projection output", K::Hidden, C::MlpWorkspace);
    } else {  // the input dies after the projections; silu and the product run in gate's memory
      f(sv.n2);
      f(sv.up);
      y = a("down projection output", K::Hidden, C::MlpWorkspace);
      f(sv.gate);
    }
  } else {  // TiledMlpFunction: no grad inside, one tile's gate/up at a time (silu, product in place)
    y = a("tiled MLP output", K::Hidden, C::MlpWorkspace);
    int g = a("tile gate", K::FfnTile, C::MlpWorkspace);
    int u = a("tile up", K::FfnTile, C::MlpWorkspace);
    f(u);
    int yt = a("tile down projection", K::HiddenTile, C::MlpWorkspace);
    f(g);
    f(yt);
    if (!grad) f(sv.n2);
  }
  const int out = a("block output = h + MLP", K::Hidden, C::MlpWorkspace);
  f(y);
  return out;
}

/// One tile of TiledMlpFunction's backward: recompute with grad, autograd::grad for the tile's
/// input and weights (down, up, gate), accumulate. `accumulators` empty: this tile's weight
/// gradients become them (fp32 compute) or are cast into fp32 ones.
void BlockHalves::mlp_tile_backward(std::vector<int>& accumulators) {
  int g = a("tile gate", K::FfnTile, C::MlpWorkspace);
  int u = a("tile up", K::FfnTile, C::MlpWorkspace);
  int act = a("tile silu(gate)", K::FfnTile, C::MlpWorkspace);
  int p = a("tile silu(gate) * up", K::FfnTile, C::MlpWorkspace);
  int root = a("tile down projection", K::HiddenTile, C::MlpWorkspace);
  std::vector<int> tile_grads;
  int dp = a("tile d(silu(gate) * up)", K::FfnTile, C::MlpWorkspace);
  tile_grads.push_back(a("tile down weight gradient", K::MlpWeightTile, C::MlpWorkspace));
  f(p);
  int da = a("tile d silu(gate)", K::FfnTile, C::MlpWorkspace);
  int dup = a("tile d up", K::FfnTile, C::MlpWorkspace);
  f(act);
  f(u);
  f(dp);
  int dg = a("tile d gate", K::FfnTile, C::MlpWorkspace);
  f(da);
  f(g);
  int dxt = a("tile input gradient", K::HiddenTile, C::MlpWorkspace);
  tile_grads.push_back(a("tile up weight gradient", K::MlpWeightTile, C::MlpWorkspace));
  f(dup);
  int part = a("tile input gradient (partial)", K::HiddenTile, C::MlpWorkspace);
  tile_grads.push_back(a("tile gate weight gradient", K::MlpWeightTile, C::MlpWorkspace));
  f(part);
  f(dg);
  f(root);
  f(dxt);  // copied into the input gradient
  if (!accumulators.empty()) {
    for (int& h : tile_grads) f(h);  // added into the accumulators
  } else if (s_.c == 4) {
    accumulators = tile_grads;  // the first tile's gradients are the accumulators
  } else {
    for (int& h : tile_grads) {
      accumulators.push_back(a("tiled MLP weight gradient accumulator (fp32)", K::MlpWeightAccum32, C::MlpWorkspace));
      f(h);
    }
  }
}

/// The MLP half's backward from dy; returns dh = d(MLP branch) + dy (added in place). Frees `sv`.
int BlockHalves::mlp_backward(MlpSaved& sv, std::vector<int>& grads) {
  int dn2;
  if (!s_.tiled_mlp) {
    int dp = a("d(silu(gate) * up)", K::Ffn, C::MlpWorkspace);
    grads.push_back(a("down weight gradient", K::MlpWeightTile, C::MlpWorkspace));
    f(sv.prod);
    int da = a("d silu(gate)", K::Ffn, C::MlpWorkspace);
    int dup = a("d up", K::Ffn, C::MlpWorkspace);
    f(sv.act);
    f(sv.up);
    f(dp);
    int dg = a("d gate", K::Ffn, C::MlpWorkspace);
    f(da);
    f(sv.gate);
    dn2 = a("MLP rmsnorm output gradient", K::Hidden, C::MlpWorkspace);  // up projection's
    grads.push_back(a("up weight gradient", K::MlpWeightTile, C::MlpWorkspace));
    f(dup);
    int part = a("gate projection input gradient (partial)", K::Hidden, C::MlpWorkspace);
    grads.push_back(a("gate weight gradient", K::MlpWeightTile, C::MlpWorkspace));
    f(part);  // added into dn2 in place
    f(dg);
  } else {
    dn2 = a("tiled MLP input gradient", K::Hidden, C::MlpWorkspace);
    std::vector<int> accumulators;
    mlp_tile_backward(accumulators);
    if (s_.mlp_tiles > 1) mlp_tile_backward(accumulators);  // later tiles: accumulators alive
    if (s_.c != 4) {  // cast back to the weights' dtype
      for (int& h : accumulators) {
        grads.push_back(a("MLP weight gradient", K::MlpWeightTile, C::MlpWorkspace));
        f(h);
      }
    } else {
      for (int h : accumulators) {
        m_.rename(h, "MLP weight gradient");
        grads.push_back(h);
      }
    }
  }
  f(sv.n2);
  return norm_backward(dn2, sv.rstd, C::MlpWorkspace, &grads);  // + dy in place
}

}  // namespace odyssey::planner_detail
