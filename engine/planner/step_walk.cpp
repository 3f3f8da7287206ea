// The step as the engine runs it (docs/architecture.md), replayed as allocations and frees: embed,
// blocks forward (attention half, MLP half), loss, blocks backward (recompute, MLP, attention,
// reduce-scatter), embedding backward, optimizer. Every tensor is named after the engine
// operation that creates it; docs/planner.md lists them. Frees follow autograd: a saved tensor
// dies when the node that saved it has run its backward.
#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/planner/step_walk.h"

namespace odyssey::planner_detail {

namespace {

using K = TensorKind;
using C = PlanCategory;

/// What the attention half leaves for its backward (handles; -1 = none).
struct AttnSaved {
  int n1 = -1, rstd = -1, q_pre = -1, k_pre = -1;  // norm output and stats, pre-qk-norm q/k
  int q_h = -1, k_h = -1, v_h = -1, o_h = -1, lse = -1, o = -1;  // standard: SDPA's saved set, o_proj input
  int out = -1;                                                 // untied: the preallocated output
};

/// What the MLP half leaves for its backward.
struct MlpSaved {
  int n2 = -1, rstd = -1, gate = -1, up = -1, act = -1, prod = -1;
};

/// One block's forward results kept for its backward.
struct BlockState {
  AttnSaved attn;
  MlpSaved mlp;
  int input = -1;   ///< block input on the device (checkpoint, or autograd's saved input)
  int host = -1;    ///< offloaded input in the host pool
  int h = -1;       ///< attention half output (non-checkpointed: saved)
  int out = -1;     ///< block output (non-checkpointed: the MLP graph's root)
};

class Walker {
 public:
  Walker(const PlanShapes& s, LiveSet& m, bool collapse)
      : s_(s), m_(m), blocks_(static_cast<size_t>(s.L)), collapse_(collapse && s.L >= 5) {}

  void run() {
    setup();
    forward();
    backward();
  }

 private:
  int a(const char* name, K kind, C cat, int32_t count = 1) {
    return m_.alloc(name, kind, cat, kind_bytes(kind, s_), count);
  }
  void f(int& h) {
    if (h >= 0) m_.free(h);
    h = -1;
  }
  bool grouped() const { return s_.gathers; }

  // --- parameters -------------------------------------------------------------------------------

  /// unshard(): the all-gather (or cast) into the group's full compute-dtype buffer.
  int gather(K full_kind, const char* name) {
    if (!grouped()) return -1;
    int cast = -1;
    if (full_kind == K::BlockFull && kind_bytes(K::BlockShardCast, s_) > 0)
      cast = a("all-gather input (shard in compute dtype)", K::BlockShardCast, C::CommBuffers);
    const int full = a(name, full_kind, C::GatheredParams);
    f(cast);
    return full;
  }

  /// Pack the group's gradients into fp32 and reduce-scatter (or all-reduce / add) into its shard.
  void reduce_scatter(K pack_kind, int& grads_a, int& grads_b) {
    int pack = a("gradient pack for reduce-scatter (fp32)", pack_kind, C::CommBuffers);
    f(grads_a);
    f(grads_b);
    int shard_out = -1;
    if (pack_kind == K::BlockPack && kind_bytes(K::BlockShardOut, s_) > 0)
      shard_out = a("reduce-scatter output shard (fp32)", K::BlockShardOut, C::CommBuffers);
    f(shard_out);
    f(pack);
  }

  void setup() {
    m_.alloc("fp32 master shards", K::MasterShards, C::Params, kind_bytes(K::MasterShards, s_));
    m_.alloc("fp32 gradient shards", K::GradShards, C::Grads, kind_bytes(K::GradShards, s_));
    m_.alloc("AdamW moments (exp_avg, exp_avg_sq)", K::AdamMoments, C::Optimizer, kind_bytes(K::AdamMoments, s_));
    if (s_.runtime_overhead > 0) a("runtime overhead (CUDA context, NCCL, cuBLAS, fragmentation)", K::RuntimeOverhead, C::Other);
    a("token ids, labels, positions (int64)", K::TokenIds, C::Other, 3);
    a("RoPE cos/sin tables", K::RopeTable, C::Other, 2);
    if (s_.offload && s_.cuda_target)
      m_.alloc("pinned staging slots (D2H, H2D prefetch)", K::PinnedStaging, C::Offloaded,
               kind_bytes(K::PinnedStaging, s_), 2, /*host=*/true);
  }

  // --- attention half ------------------------------------------------------------------------------

  /// RoPE as x*cos + rotate_half(x)*sin: three temporaries of x's size live at once; x is freed
  /// (RoPE saves only the tables).
  int rope(int& x, K kind, C cat) {
    int x_cos = a("RoPE x*cos", kind, cat);
    int rot = a("RoPE rotate_half(x)", kind, cat);
    int rot_sin = a("RoPE rotate_half(x)*sin", kind, cat);
    f(rot);
    const int out = a("RoPE output", kind, cat);
    f(x_cos);
    f(rot_sin);
    f(x);
    return out;
  }

  /// Ulysses all-to-all (either direction): a contiguous send copy and a receive buffer, both
  /// comm_buffers; the input is dropped, the receive buffer is the result.
  int all_to_all(int& x, K from, K to, const char* recv_name, bool drop_input = true) {
    int send = a("all-to-all send buffer", from, C::CommBuffers);
    const int recv = a(recv_name, to, C::CommBuffers);
    f(send);
    if (drop_input) f(x);
    return recv;
  }

  /// rmsnorm -> q/k/v -> [qk-norm] -> RoPE -> [replicate KV] -> all-to-all -> SDPA -> all-to-all
  /// -> o_proj -> residual. Returns h; with grad, fills `sv` with what autograd keeps.
  int attention_forward(bool grad, AttnSaved& sv) {
    if (s_.untied) return untied_forward(grad, sv);
    sv.n1 = a("attention rmsnorm output", K::Hidden, C::AttentionWorkspace);
    sv.rstd = a("attention rmsnorm 1/rms", K::RowStat, C::AttentionWorkspace);
    int q = a("q projection", K::QLocal, C::AttentionWorkspace);
    int k = a("k projection", K::KvLocal, C::AttentionWorkspace);
    int v = a("v projection", K::KvLocal, C::AttentionWorkspace);
    if (!grad) {
      f(sv.n1);
      f(sv.rstd);
    }
    if (s_.qk_norm) {
      int qn = a("q head norm", K::QLocal, C::AttentionWorkspace);
      int kn = a("k head norm", K::KvLocal, C::AttentionWorkspace);
      if (grad) {
        sv.q_pre = q;
        sv.k_pre = k;
      } else {
        f(q);
        f(k);
      }
      q = qn;
      k = kn;
    }
    int qr = rope(q, K::QLocal, C::AttentionWorkspace);
    int kr = rope(k, K::KvLocal, C::AttentionWorkspace);
    K kv_local = K::KvLocal;
    if (s_.Hkv < s_.P) {  // replicate KV heads up to the degree before the all-to-all
      int k_rep = a("K replicated to the Ulysses degree", K::KvLocalRep, C::AttentionWorkspace);
      f(kr);
      kr = k_rep;
      int v_rep = a("V replicated to the Ulysses degree", K::KvLocalRep, C::AttentionWorkspace);
      f(v);
      v = v_rep;
      kv_local = K::KvLocalRep;
    }
    int qh = qr, kh = kr, vh = v;
    if (s_.P > 1) {
      qh = all_to_all(qr, K::QLocal, K::QHead, "q after all-to-all (head layout)");
      kh = all_to_all(kr, kv_local, K::KvHead, "k after all-to-all (head layout)");
      vh = all_to_all(v, kv_local, K::KvHead, "v after all-to-all (head layout)");
    }
    int oh = a("SDPA output (head layout)", K::QHead, C::AttentionWorkspace);
    int lse = a("SDPA log-sum-exp", K::Lse, C::AttentionWorkspace);
    if (grad) {
      sv.q_h = qh;
      sv.k_h = kh;
      sv.v_h = vh;
      sv.o_h = oh;
      sv.lse = lse;
    } else {
      f(qh);
      f(kh);
      f(vh);
      f(lse);
    }
    // SDPA keeps its output with grad, so the all-to-all back drops it only without grad
    int o = s_.P > 1 ? all_to_all(oh, K::QHead, K::QLocal, "attention output after all-to-all", !grad) : oh;
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

  /// Untied Ulysses: one custom Function over stages; only n1, its output and the per-stage LSE
  /// survive. One stage's buffers are walked (every stage is the same size and reuses them).
  int untied_forward(bool grad, AttnSaved& sv) {
    sv.n1 = a("attention rmsnorm output", K::Hidden, C::AttentionWorkspace);
    sv.rstd = a("attention rmsnorm 1/rms", K::RowStat, C::AttentionWorkspace);
    sv.out = a("untied attention output (preallocated)", K::QLocal, C::AttentionWorkspace);
    sv.lse = a("per-stage log-sum-exp", K::Lse, C::AttentionWorkspace);
    {  // one stage: K/V of its GQA group, then Q, attention, output all-to-all
      int ks = a("stage k projection", K::KvStageLocal, C::AttentionWorkspace);
      ks = rope(ks, K::KvStageLocal, C::AttentionWorkspace);
      int vs = a("stage v projection", K::KvStageLocal, C::AttentionWorkspace);
      int kh = s_.P > 1 ? all_to_all(ks, K::KvStageLocal, K::KvStageHead, "stage k (head layout)") : ks;
      int vh = s_.P > 1 ? all_to_all(vs, K::KvStageLocal, K::KvStageHead, "stage v (head layout)") : vs;
      int qs = a("stage q projection", K::QStageLocal, C::AttentionWorkspace);
      qs = rope(qs, K::QStageLocal, C::AttentionWorkspace);
      int qh = s_.P > 1 ? all_to_all(qs, K::QStageLocal, K::QStageHead, "stage q (head layout)") : qs;
      int oh = a("stage attention output", K::QStageHead, C::AttentionWorkspace);
      f(qh);
      if (s_.P > 1) {
        int back = all_to_all(oh, K::QStageHead, K::QStageLocal, "stage output after all-to-all");
        f(back);  // copied into the preallocated output
      } else {
        f(oh);
      }
      f(kh);
      f(vh);
    }
    if (!grad) {
      f(sv.n1);
      f(sv.rstd);
      f(sv.lse);
    }
    int attn = a("o_proj output", K::Hidden, C::AttentionWorkspace);
    if (!grad) f(sv.out);
    const int h = a("residual h = x + attention", K::Hidden, C::AttentionWorkspace);
    f(attn);
    return h;
  }

  /// The reverse of attention_forward from the incoming dh; returns dx of the attention half
  /// (dh + the norm's gradient). Frees everything in `sv`.
  int attention_backward(int dh, AttnSaved& sv, int& grads) {
    grads = a("attention weight gradients", K::BlockGradsAttn, C::AttentionWorkspace);
    int dn1 = s_.untied ? untied_backward(dh, sv) : standard_backward(dh, sv);
    int dxa = a("attention rmsnorm input gradient", K::Hidden, C::AttentionWorkspace);
    f(dn1);
    f(sv.rstd);
    const int dx = a("block input gradient dx = dh + d(attention)", K::Hidden, C::AttentionWorkspace);
    f(dxa);
    return dx;
  }

  int rope_backward(int& dx, K kind, C cat) { return rope(dx, kind, cat); }

  int standard_backward(int dh, AttnSaved& sv) {
    (void)dh;
    int d_o = a("d o (o_proj input gradient)", K::QLocal, C::AttentionWorkspace);
    f(sv.o);
    int d_oh = d_o;
    if (s_.P > 1) d_oh = all_to_all(d_o, K::QLocal, K::QHead, "d o after all-to-all (head layout)");
    // flash-attention backward: dq, dk, dv, the fp32 dq accumulator and, with GQA, dK/dV at
    // query-head count before they are summed per KV head
    int dq = a("flash backward dq", K::QHead, C::AttentionWorkspace);
    int dk = a("flash backward dk", K::KvHead, C::AttentionWorkspace);
    int dv = a("flash backward dv", K::KvHead, C::AttentionWorkspace);
    int acc = a("flash backward dq accumulator (fp32)", K::DqAccum, C::AttentionWorkspace);
    int ek = -1, ev = -1;
    if (s_.hq > s_.hkv) {
      ek = a("flash backward dk at query-head count (GQA)", K::GqaExpanded, C::AttentionWorkspace);
      ev = a("flash backward dv at query-head count (GQA)", K::GqaExpanded, C::AttentionWorkspace);
    }
    f(ek);
    f(ev);
    f(acc);
    f(sv.q_h);
    f(sv.k_h);
    f(sv.v_h);
    f(sv.o_h);
    f(sv.lse);
    f(d_oh);
    const K kv_local = s_.Hkv < s_.P ? K::KvLocalRep : K::KvLocal;
    if (s_.P > 1) {
      dq = all_to_all(dq, K::QHead, K::QLocal, "dq after all-to-all");
      dk = all_to_all(dk, K::KvHead, kv_local, "dk after all-to-all");
      dv = all_to_all(dv, K::KvHead, kv_local, "dv after all-to-all");
    }
    if (s_.Hkv < s_.P) {  // sum the replicas' gradients
      int dk_sum = a("dk summed over KV replicas", K::KvLocal, C::AttentionWorkspace);
      f(dk);
      dk = dk_sum;
      int dv_sum = a("dv summed over KV replicas", K::KvLocal, C::AttentionWorkspace);
      f(dv);
      dv = dv_sum;
    }
    dq = rope_backward(dq, K::QLocal, C::AttentionWorkspace);
    dk = rope_backward(dk, K::KvLocal, C::AttentionWorkspace);
    if (s_.qk_norm) {
      int dq0 = a("q head norm input gradient", K::QLocal, C::AttentionWorkspace);
      f(dq);
      f(sv.q_pre);
      dq = dq0;
      int dk0 = a("k head norm input gradient", K::KvLocal, C::AttentionWorkspace);
      f(dk);
      f(sv.k_pre);
      dk = dk0;
    }
    return projections_backward(dq, dk, dv, sv);
  }

  /// dn1 = dq Wq + dk Wk + dv Wv: one product at a time added into dn1.
  int projections_backward(int& dq, int& dk, int& dv, AttnSaved& sv) {
    const int dn1 = a("attention rmsnorm output gradient", K::Hidden, C::AttentionWorkspace);
    int part = a("projection input gradient (partial)", K::Hidden, C::AttentionWorkspace);
    f(part);
    part = a("projection input gradient (partial)", K::Hidden, C::AttentionWorkspace);
    f(part);
    f(dq);
    f(dk);
    f(dv);
    f(sv.n1);
    return dn1;
  }

  int untied_backward(int dh, AttnSaved& sv) {
    (void)dh;
    int d_o = a("d o (o_proj input gradient)", K::QLocal, C::AttentionWorkspace);
    const int dn1 = a("attention input gradient accumulator", K::Hidden, C::AttentionWorkspace);
    {  // one stage (the first of its GQA group: it also recomputes and accumulates K/V)
      int ks = a("stage k projection (recomputed)", K::KvStageLocal, C::AttentionWorkspace);
      ks = rope(ks, K::KvStageLocal, C::AttentionWorkspace);
      int vs = a("stage v projection (recomputed)", K::KvStageLocal, C::AttentionWorkspace);
      int kh = s_.P > 1 ? all_to_all(ks, K::KvStageLocal, K::KvStageHead, "stage k (head layout)") : ks;
      int vh = s_.P > 1 ? all_to_all(vs, K::KvStageLocal, K::KvStageHead, "stage v (head layout)") : vs;
      int dk_acc = a("stage dk accumulator (GQA group)", K::KvStageHead, C::AttentionWorkspace);
      int dv_acc = a("stage dv accumulator (GQA group)", K::KvStageHead, C::AttentionWorkspace);
      int qs = a("stage q projection (recomputed)", K::QStageLocal, C::AttentionWorkspace);
      qs = rope(qs, K::QStageLocal, C::AttentionWorkspace);
      int qh = s_.P > 1 ? all_to_all(qs, K::QStageLocal, K::QStageHead, "stage q (head layout)") : qs;
      int o_slice = -1, do_slice = -1, oh = -1, doh = -1;
      if (s_.P > 1) {
        o_slice = a("stage output slice (contiguous)", K::QStageLocal, C::AttentionWorkspace);
        oh = all_to_all(o_slice, K::QStageLocal, K::QStageHead, "stage output (head layout)");
        do_slice = a("stage d o slice (contiguous)", K::QStageLocal, C::AttentionWorkspace);
        doh = all_to_all(do_slice, K::QStageLocal, K::QStageHead, "stage d o (head layout)");
      }
      int dq = a("stage flash backward dq", K::QStageHead, C::AttentionWorkspace);
      int dk = a("stage flash backward dk", K::KvStageHead, C::AttentionWorkspace);
      int dv = a("stage flash backward dv", K::KvStageHead, C::AttentionWorkspace);
      int acc = a("stage dq accumulator (fp32)", K::DqAccumStage, C::AttentionWorkspace);
      int ek = -1, ev = -1;
      if (s_.hs > s_.khs) {
        ek = a("stage dk at query-head count (GQA)", K::GqaExpandedStage, C::AttentionWorkspace);
        ev = a("stage dv at query-head count (GQA)", K::GqaExpandedStage, C::AttentionWorkspace);
      }
      f(ek);
      f(ev);
      f(acc);
      f(qh);
      f(oh);
      f(doh);
      f(dk);  // added into the group accumulators
      f(dv);
      int dq_local = s_.P > 1 ? all_to_all(dq, K::QStageHead, K::QStageLocal, "stage dq after all-to-all") : dq;
      dq_local = rope_backward(dq_local, K::QStageLocal, C::AttentionWorkspace);
      f(dq_local);  // dn1 += dq Wq_rows; dWq rows = dq^T n1
      // end of the GQA group: K/V gradients back to the sequence layout
      int dk_local = s_.P > 1 ? all_to_all(dk_acc, K::KvStageHead, K::KvStageLocal, "stage dk after all-to-all")
                              : dk_acc;
      dk_local = rope_backward(dk_local, K::KvStageLocal, C::AttentionWorkspace);
      f(dk_local);
      int dv_local = s_.P > 1 ? all_to_all(dv_acc, K::KvStageHead, K::KvStageLocal, "stage dv after all-to-all")
                              : dv_acc;
      f(dv_local);
      f(kh);
      f(vh);
    }
    f(d_o);
    f(sv.out);
    f(sv.lse);
    f(sv.n1);
    return dn1;
  }

  // --- MLP half ------------------------------------------------------------------------------------

  int mlp_forward(bool grad, MlpSaved& sv) {
    sv.n2 = a("MLP rmsnorm output", K::Hidden, C::MlpWorkspace);
    sv.rstd = a("MLP rmsnorm 1/rms", K::RowStat, C::MlpWorkspace);
    int y;
    if (!s_.tiled_mlp) {
      sv.gate = a("gate projection", K::Ffn, C::MlpWorkspace);
      sv.up = a("up projection", K::Ffn, C::MlpWorkspace);
      sv.act = a("silu(gate)", K::Ffn, C::MlpWorkspace);
      if (!grad) f(sv.gate);
      sv.prod = a("silu(gate) * up", K::Ffn, C::MlpWorkspace);
      if (!grad) {
        f(sv.act);
        f(sv.up);
      }
      y = a("down projection output", K::Hidden, C::MlpWorkspace);
      if (!grad) f(sv.prod);
    } else {
      y = a("tiled MLP output", K::Hidden, C::MlpWorkspace);
      int g = a("tile gate", K::FfnTile, C::MlpWorkspace);
      int u = a("tile up", K::FfnTile, C::MlpWorkspace);
      int act = a("tile silu(gate)", K::FfnTile, C::MlpWorkspace);
      f(g);
      int p = a("tile silu(gate) * up", K::FfnTile, C::MlpWorkspace);
      f(act);
      f(u);
      int yt = a("tile down projection", K::HiddenTile, C::MlpWorkspace);
      f(p);
      f(yt);
    }
    if (!grad) {
      f(sv.n2);
      f(sv.rstd);
    }
    const int out = a("block output = h + MLP", K::Hidden, C::MlpWorkspace);
    f(y);
    return out;
  }

  /// The MLP half's backward from dy; returns dh = dy + d(MLP branch). Frees `sv`.
  int mlp_backward(MlpSaved& sv, int& grads) {
    grads = a("MLP weight gradients", K::BlockGradsMlp, C::MlpWorkspace);
    int dn2;
    if (!s_.tiled_mlp) {
      int dp = a("d(silu(gate) * up)", K::Ffn, C::MlpWorkspace);
      f(sv.prod);
      int da = a("d silu(gate)", K::Ffn, C::MlpWorkspace);
      int dup = a("d up", K::Ffn, C::MlpWorkspace);
      f(dp);
      f(sv.act);
      f(sv.up);
      int dg = a("d gate", K::Ffn, C::MlpWorkspace);
      f(da);
      f(sv.gate);
      dn2 = a("MLP rmsnorm output gradient", K::Hidden, C::MlpWorkspace);
      int part = a("up-projection input gradient (partial)", K::Hidden, C::MlpWorkspace);
      f(part);
      f(dg);
      f(dup);
    } else {
      dn2 = a("tiled MLP input gradient", K::Hidden, C::MlpWorkspace);
      // one tile: recompute with grad, then autograd::grad for the tile's input and weights
      int g = a("tile gate", K::FfnTile, C::MlpWorkspace);
      int u = a("tile up", K::FfnTile, C::MlpWorkspace);
      int act = a("tile silu(gate)", K::FfnTile, C::MlpWorkspace);
      int p = a("tile silu(gate) * up", K::FfnTile, C::MlpWorkspace);
      int dp = a("tile d(silu(gate) * up)", K::FfnTile, C::MlpWorkspace);
      int dwd = a("tile down-projection weight gradient", K::MlpWeightTile, C::MlpWorkspace);
      f(p);
      int da = a("tile d silu(gate)", K::FfnTile, C::MlpWorkspace);
      int dup = a("tile d up", K::FfnTile, C::MlpWorkspace);
      f(dp);
      f(act);
      f(u);
      int dg = a("tile d gate", K::FfnTile, C::MlpWorkspace);
      f(da);
      f(g);
      int dwg = a("tile gate weight gradient", K::MlpWeightTile, C::MlpWorkspace);
      int dwu = a("tile up weight gradient", K::MlpWeightTile, C::MlpWorkspace);
      int dxt = a("tile input gradient", K::HiddenTile, C::MlpWorkspace);
      f(dg);
      f(dup);
      f(dwd);  // accumulated into the MLP weight gradients
      f(dwg);
      f(dwu);
      f(dxt);  // copied into the input gradient
    }
    f(sv.n2);
    int dhn = a("MLP rmsnorm input gradient", K::Hidden, C::MlpWorkspace);
    f(dn2);
    f(sv.rstd);
    const int dh = a("dh = dy + d(MLP)", K::Hidden, C::MlpWorkspace);
    f(dhn);
    return dh;
  }

  // --- the step ------------------------------------------------------------------------------------

  void forward() {
    m_.begin_phase(PhaseKind::FwdEmbed);
    int embed = gather(K::EmbedFull, "embedding (unsharded)");
    next_gathered_ = gather(K::BlockFull, "block parameters (unsharded)");
    x_ = a("embedding output", K::Hidden, C::Other);
    f(embed);
    std::vector<LiveEntry> before;
    for (int32_t i = 0; i < s_.L; ++i) {
      if (collapse_ && i == 2 && ghost_forward(before)) i = s_.L - 2;  // blocks 2..L-3 collapsed
      if (collapse_ && i == 1) before = m_.live_entries();
      block_forward(i);
    }
    loss_forward();
  }

  /// Adds the residue of blocks 2..L-3 at once: (L-4) x what block 1 left behind, tensor by
  /// tensor (same names, kinds and categories, so terms group with the walked blocks'). Falls
  /// back to walking them when block 1's residue is not a plain addition.
  bool ghost_forward(const std::vector<LiveEntry>& before) {
    struct Group {
      const LiveEntry* e;
      int64_t bytes = 0, count = 0;
    };
    std::vector<Group> groups;
    const std::vector<LiveEntry> after = m_.live_entries();
    auto add = [&](const std::vector<LiveEntry>& entries, int sign) {
      for (const auto& e : entries) {
        auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
          return g.e->kind == e.kind && g.e->category == e.category && g.e->host == e.host &&
                 std::strcmp(g.e->name, e.name) == 0;
        });
        if (it == groups.end()) it = groups.insert(groups.end(), Group{&e});
        it->bytes += sign * e.bytes;
        it->count += sign * e.count;
      }
    };
    add(after, +1);
    add(before, -1);
    int host_groups = 0;
    for (const auto& g : groups) {
      if (g.bytes == 0 && g.count == 0) continue;
      if (g.bytes <= 0 || g.count <= 0 || g.bytes % g.count != 0) return false;
      host_groups += g.e->host ? 1 : 0;
    }
    if (host_groups > 1) return false;
    const int32_t ghosts = static_cast<int32_t>(s_.L - 4);
    for (const auto& g : groups) {
      if (g.bytes == 0) continue;
      const int64_t each = g.bytes / g.count;
      const int h = m_.alloc(g.e->name, g.e->kind, g.e->category, each, static_cast<int32_t>(g.count) * ghosts,
                             g.e->host);
      if (g.e->host) {
        ghost_host_ = h;
        ghost_host_unit_ = g.bytes;
      } else {
        ghost_device_.push_back(h);
      }
    }
    ghosted_ = true;
    return true;
  }

  /// Backward of the collapsed blocks L-3..2: each frees its own residue, and block 2's
  /// prefetch frees block 1's offloaded input.
  void ghost_backward() {
    for (int& h : ghost_device_) f(h);
    f(ghost_host_);
    f(blocks_[1].host);
  }

  /// Frees block j's offloaded input (its prefetch moved it back to the device).
  void free_host_input(int32_t j) {
    if (ghosted_ && j >= 2 && j <= s_.L - 3) {
      if (m_.shrink(ghost_host_, ghost_host_unit_)) ghost_host_ = -1;
      return;
    }
    f(blocks_[j].host);
  }

  void block_forward(int32_t i) {
    BlockState& b = blocks_[i];
    const bool grad = !s_.ckpt;
    m_.begin_phase(PhaseKind::FwdAttn, i);
    int current = next_gathered_;
    if (i + 1 < s_.L) {
      next_gathered_ = gather(K::BlockFull, "block parameters (unsharded, prefetch)");
    } else {
      head_gathered_ = gather(K::HeadFull, "head parameters (unsharded)");
      if (s_.tied) tied_embed_ = gather(K::EmbedFull, "embedding (unsharded, tied LM head)");
      next_gathered_ = -1;
    }
    b.input = x_;
    int h = attention_forward(grad, b.attn);
    m_.begin_phase(PhaseKind::FwdMlp, i);
    int out = mlp_forward(grad, b.mlp);
    if (s_.ckpt) {
      f(h);
      if (s_.offload && i + 1 < s_.L) {
        b.host = m_.alloc("offloaded block inputs", K::OffloadedInput, C::Offloaded,
                          kind_bytes(K::OffloadedInput, s_), 1, /*host=*/true);
        f(b.input);
      } else {
        m_.retag(b.input, C::SavedActivations,
                 s_.offload ? "last block input (kept on the device)" : "checkpointed block inputs");
      }
    } else {
      // everything the block's forward left alive is what autograd saved (retag_since)
      b.h = h;
      b.out = out;
      for (int handle : {b.input, b.attn.n1, b.attn.rstd, b.attn.q_pre, b.attn.k_pre, b.attn.q_h, b.attn.k_h,
                         b.attn.v_h, b.attn.o_h, b.attn.lse, b.attn.o, b.attn.out, h, b.mlp.n2, b.mlp.rstd,
                         b.mlp.gate, b.mlp.up, b.mlp.act, b.mlp.prod, out})
        m_.retag(handle, C::SavedActivations);
      if (i > 0) b.input = -1;  // owned by block i-1 as its output (freed after its MLP backward)
    }
    f(current);  // reshard
    x_ = out;
  }

  void loss_forward() {
    m_.begin_phase(PhaseKind::FwdLoss);
    loss_input_ = x_;
    final_norm_ = a("final rmsnorm output", K::Hidden, C::LossWorkspace);
    final_rstd_ = a("final rmsnorm 1/rms", K::RowStat, C::LossWorkspace);
    if (!s_.tiled_loss) {
      int logits = a("logits", K::Logits, C::LossWorkspace);
      int l32 = s_.c != 4 ? a("logits in fp32", K::Logits32, C::LossWorkspace) : -1;
      log_probs_ = a("log-softmax (fp32)", K::Logits32, C::LossWorkspace);
      f(l32);
      f(logits);
    } else {
      saved_dx_ = a("tiled loss: saved hidden-state gradient", K::Hidden, C::LossWorkspace);
      head_grad_ = a("tiled loss: LM-head gradient accumulator (fp32)", K::HeadGradAccum, C::LossWorkspace);
      // one tile: logits (the graph root, alive to the end), the fp32 copy that log-softmax
      // reads, then the backward inside the forward
      int logits = a("tile logits", K::LogitsTile, C::LossWorkspace);
      int l32 = s_.c != 4 ? a("tile logits in fp32", K::LogitsTile32, C::LossWorkspace) : -1;
      int lp = a("tile log-softmax (fp32)", K::LogitsTile32, C::LossWorkspace);
      f(l32);
      int dlp = a("tile d log-softmax (fp32)", K::LogitsTile32, C::LossWorkspace);
      int dl32 = a("tile d logits (fp32)", K::LogitsTile32, C::LossWorkspace);
      f(dlp);
      f(lp);
      int dl = dl32;
      if (s_.c != 4) {
        dl = a("tile d logits", K::LogitsTile, C::LossWorkspace);
        f(dl32);
      }
      int dxt = a("tile hidden-state gradient", K::HiddenLossTile, C::LossWorkspace);
      int dwt = a("tile LM-head weight gradient", K::HeadWeightGrad, C::LossWorkspace);
      f(dwt);  // accumulated
      f(dxt);  // copied into the saved gradient
      f(dl);
      f(logits);
      f(final_norm_);  // the tiled loss does not keep its input
      f(head_gathered_);
      f(tied_embed_);
    }
  }

  /// The loss backward: untiled in its own phase; tiled (backward already done inside the
  /// forward) it only scales the saved gradient, inside the first backward phase.
  void loss_backward() {
    int head_grads = -1, none = -1;
    if (!s_.tiled_loss) {
      m_.begin_phase(PhaseKind::BwdLoss);
      int dlp = a("d log-softmax (fp32)", K::Logits32, C::LossWorkspace);
      int dl = a("d logits (fp32)", K::Logits32, C::LossWorkspace);
      f(dlp);
      f(log_probs_);
      if (s_.c != 4) {
        int dlc = a("d logits", K::Logits, C::LossWorkspace);
        f(dl);
        dl = dlc;
      }
      int dnf = a("final rmsnorm output gradient", K::Hidden, C::LossWorkspace);
      head_grads = a("LM-head weight gradient", K::HeadWeightGrad, C::LossWorkspace);
      f(dl);
      f(final_norm_);
      dy_ = a("last block output gradient", K::Hidden, C::LossWorkspace);
      f(dnf);
    } else {
      int scaled = a("tiled loss: gradient x grad_output", K::Hidden, C::LossWorkspace);
      f(saved_dx_);
      head_grads = head_grad_;
      head_grad_ = -1;
      dy_ = a("last block output gradient", K::Hidden, C::LossWorkspace);
      f(scaled);
    }
    f(final_rstd_);
    if (s_.ckpt) f(loss_input_);  // without checkpointing the last block owns it (its MLP graph root)
    loss_input_ = -1;
    reduce_scatter(K::HeadPack, head_grads, none);
    f(head_gathered_);
    f(tied_embed_);
  }

  void backward() {
    if (!s_.tiled_loss) loss_backward();
    for (int32_t i = s_.L - 1; i >= 0; --i) {
      if (ghosted_ && i == s_.L - 3) {
        ghost_backward();
        i = 2;  // continue with block 1
        continue;
      }
      block_backward(i);
    }
    m_.begin_phase(PhaseKind::BwdEmbed);
    int dense = a("embedding gradient (dense)", K::EmbedGradDense, C::Other);
    int none = -1;
    reduce_scatter(K::EmbedPack, dense, none);
    f(dy_);
    m_.begin_phase(PhaseKind::Optimizer);
    int temp = a("AdamW temporaries", K::OptimizerTemp, C::Other);
    f(temp);
    m_.end_phase();
  }

  void block_backward(int32_t i) {
    BlockState& b = blocks_[i];
    const bool last = i + 1 == s_.L;
    m_.begin_phase(s_.ckpt ? PhaseKind::BwdRecompute : PhaseKind::BwdMlp, i);
    if (last && s_.tiled_loss) loss_backward();
    if (last) current_gathered_ = gather(K::BlockFull, "block parameters (unsharded)");
    const int prefetch = i > 0 ? gather(K::BlockFull, "block parameters (unsharded, prefetch)") : -1;
    int h = b.h, out = b.out;
    if (s_.ckpt) {
      if (s_.offload) {
        if (!last) b.input = prefetched_input_;
        prefetched_input_ = -1;
        if (i > 0) {  // bring block i-1's input back while block i recomputes
          prefetched_input_ = a("prefetched block input", K::Hidden, C::SavedActivations);
          free_host_input(i - 1);
        }
      }
      h = attention_forward(true, b.attn);
      out = mlp_forward(true, b.mlp);
      m_.begin_phase(PhaseKind::BwdMlp, i);
    }
    int grads_mlp = -1, grads_attn = -1;
    int dh = mlp_backward(b.mlp, grads_mlp);
    f(out);  // the MLP half's graph root
    m_.begin_phase(PhaseKind::BwdAttn, i);
    int dx = attention_backward(dh, b.attn, grads_attn);
    f(h);
    f(dh);
    f(b.input);
    m_.begin_phase(PhaseKind::BwdReduceScatter, i);
    reduce_scatter(K::BlockPack, grads_attn, grads_mlp);
    f(current_gathered_);  // reshard
    current_gathered_ = prefetch;
    f(dy_);
    dy_ = dx;
  }

  const PlanShapes& s_;
  LiveSet& m_;
  std::vector<BlockState> blocks_;
  int x_ = -1, dy_ = -1;
  int next_gathered_ = -1, current_gathered_ = -1, head_gathered_ = -1, tied_embed_ = -1;
  int prefetched_input_ = -1;
  bool collapse_ = false, ghosted_ = false;
  std::vector<int> ghost_device_;
  int ghost_host_ = -1;
  int64_t ghost_host_unit_ = 0;
  int loss_input_ = -1, final_norm_ = -1, final_rstd_ = -1, log_probs_ = -1, saved_dx_ = -1, head_grad_ = -1;
};

}  // namespace

void walk_step(const PlanShapes& shapes, LiveSet& live, bool collapse) {
  Walker walker(shapes, live, collapse);
  walker.run();
}

}  // namespace odyssey::planner_detail
