// Ulysses and Untied Ulysses attention against the single-rank reference (plain causal SDPA on
// the full sequence with repeat-interleaved KV), ranks as threads, P in {1, 2, 4}: outputs and
// gradients (dx, dwq, dwk, dwv, q/k norms, dwo where the output projection is fused, and the input
// RMSNorm's weight where it is folded in) within the fp32 reordering tolerance derived in
// tolerance() below. defines: test cases [ulysses]
#include <catch2/catch.hpp>

#include <mutex>

#include "engine/ops/layers.h"
#include "engine/parallel/ulysses.h"
#include "engine/parallel/untied_attention.h"
#include "../fp_tolerance.h"
#include "rank_threads.h"

using namespace odyssey;

namespace {

struct Problem {
  ModelConfig model;
  int64_t B = 2, S = 32;
  at::Tensor x, wq, wk, wv, wo, qn, kn, R, Rd;  // full-sequence inputs; R (Rd: projected output) weights the loss
  at::Tensor xn;                                // [d] the input RMSNorm's weight
  bool norm_input = false;                      // x is the block input: the reference norms it with xn first
};

Problem make_problem(int64_t H, int64_t Hkv, bool qk_norm, int64_t B = 2, int64_t hd = 8, int64_t d = 32) {
  Problem p;
  p.B = B;
  p.model.n_heads = H;
  p.model.n_kv_heads = Hkv;
  p.model.head_dim = hd;
  p.model.d_model = d;
  p.model.qk_norm = qk_norm;
  at::manual_seed(1234 + H * 10 + Hkv);
  p.x = at::randn({p.B, p.S, d});
  p.wq = at::randn({H * hd, d}) * 0.2;
  p.wk = at::randn({Hkv * hd, d}) * 0.2;
  p.wv = at::randn({Hkv * hd, d}) * 0.2;
  p.qn = 1.0 + 0.1 * at::randn({hd});
  p.kn = 1.0 + 0.1 * at::randn({hd});
  p.wo = at::randn({d, H * hd}) * 0.2;
  p.R = at::randn({p.B, p.S, H * hd});
  p.Rd = at::randn({p.B, p.S, d});
  p.xn = 1.0 + 0.1 * at::randn({d});
  return p;
}

struct Grads {
  at::Tensor out, dx, dwq, dwk, dwv, dqn, dkn, dwo, dxn;
};

/// The loss weight for an attention output: R before the output projection, Rd after it.
const at::Tensor& loss_weight(const Problem& p, const at::Tensor& out) {
  return out.size(-1) == p.model.d_model ? p.Rd : p.R;
}

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }

/// Single rank, full sequence, KV repeat-interleaved to H heads, plain causal SDPA (math path);
/// `project`: followed by the output projection wo.
Grads reference(const Problem& p, bool project = false) {
  const auto& m = p.model;
  const int64_t B = p.B, S = p.S, H = m.n_heads, Hkv = m.n_kv_heads, hd = m.head_dim;
  at::Tensor x = leaf(p.x), wq = leaf(p.wq), wk = leaf(p.wk), wv = leaf(p.wv), qn = leaf(p.qn), kn = leaf(p.kn);
  at::Tensor xn = leaf(p.xn);
  const at::Tensor normed = p.norm_input ? rms_norm(x, xn, m.norm_eps) : x;  // [B, S, d]
  at::Tensor q = at::linear(normed, wq).view({B, S, H, hd});
  at::Tensor k = at::linear(normed, wk).view({B, S, Hkv, hd});
  at::Tensor v = at::linear(normed, wv).view({B, S, Hkv, hd});
  if (m.qk_norm) {
    q = rms_norm(q, qn, m.norm_eps);
    k = rms_norm(k, kn, m.norm_eps);
  }
  const Positions pos = make_positions(0, S, m, at::kCPU);  // the model's RoPE, scaled or not
  q = apply_rope(q, pos).transpose(1, 2);
  k = apply_rope(k, pos).repeat_interleave(H / Hkv, 2).transpose(1, 2);
  v = v.repeat_interleave(H / Hkv, 2).transpose(1, 2);
  at::Tensor o = std::get<0>(at::_scaled_dot_product_attention_math(q, k, v, {}, 0.0, true));  // [B, H, S, hd]
  at::Tensor out = o.transpose(1, 2).reshape({B, S, H * hd});
  at::Tensor wo = leaf(p.wo);
  if (project) out = at::linear(out, wo);  // [B, S, d]
  (out * loss_weight(p, out)).sum().backward();
  return {out.detach(),
          x.grad(),
          wq.grad(),
          wk.grad(),
          wv.grad(),
          m.qk_norm ? qn.grad() : at::Tensor(),
          m.qk_norm ? kn.grad() : at::Tensor(),
          wo.grad(),
          p.norm_input ? xn.grad() : at::Tensor()};
}

/// The same on P rank threads; outputs and dx concatenated over ranks, weight grads summed.
/// NormedAttentionFn also takes the input norm's weight (a leaf: its gradient is checked).
using AttentionFn =
    std::function<at::Tensor(const at::Tensor&, const AttentionWeights&, const Positions&, const RankContext&)>;
using NormedAttentionFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const AttentionWeights&,
                                                   const Positions&, const RankContext&)>;

Grads distributed_normed(const Problem& p, int P, const NormedAttentionFn& attention) {
  const int64_t s = p.S / P;
  std::vector<Grads> per_rank(P);
  odyssey::test::run_sp_ranks(P, [&](RankContext& ctx) {
    const int r = ctx.sp_rank;
    at::Tensor x = leaf(p.x.narrow(1, r * s, s));
    at::Tensor xn = leaf(p.xn);
    AttentionWeights w{leaf(p.wq), leaf(p.wk), leaf(p.wv), leaf(p.wo), leaf(p.qn), leaf(p.kn)};
    const Positions pos = make_positions(r * s, s, p.model, at::kCPU);
    at::Tensor out = attention(x, xn, w, pos, ctx);  // [B, s, H*hd], or [B, s, d] when wo is applied
    (out * loss_weight(p, out).narrow(1, r * s, s)).sum().backward();
    per_rank[r] = {out.detach(),    x.grad(),        w.wq.grad(), w.wk.grad(), w.wv.grad(),
                   w.q_norm.grad(), w.k_norm.grad(), w.wo.grad(), xn.grad()};
  });
  Grads g;
  std::vector<at::Tensor> outs, dxs;
  for (auto& r : per_rank) {
    outs.push_back(r.out);
    dxs.push_back(r.dx);
  }
  g.out = at::cat(outs, 1);
  g.dx = at::cat(dxs, 1);
  auto sum = [&](at::Tensor Grads::*field) {
    at::Tensor total;
    for (auto& r : per_rank) {
      if (!(r.*field).defined()) return at::Tensor();
      total = total.defined() ? total + r.*field : (r.*field).clone();
    }
    return total;
  };
  g.dwq = sum(&Grads::dwq);
  g.dwk = sum(&Grads::dwk);
  g.dwv = sum(&Grads::dwv);
  g.dqn = sum(&Grads::dqn);
  g.dkn = sum(&Grads::dkn);
  g.dwo = sum(&Grads::dwo);
  g.dxn = sum(&Grads::dxn);
  return g;
}

Grads distributed(const Problem& p, int P, const AttentionFn& attention) {
  return distributed_normed(p, P,
                            [&](const at::Tensor& x, const at::Tensor&, const AttentionWeights& w, const Positions& pos,
                                const RankContext& ctx) { return attention(x, w, pos, ctx); });
}

/// The tolerance of `p`'s outputs and gradients (../fp_tolerance.h): the reference and the
/// Ulysses/Untied paths do the same math in another order (sequence shards and head stages,
/// all-to-alls, per-rank weight-gradient partial sums added after). The longest forward chain:
/// Q/K/V projections over d, QK-norm over hd, QK^T over hd, the softmax's exp and sum over S,
/// P.V over S, the output projection over H*hd; a gradient adds the backward (about the same
/// chain again) and the weight-gradient sum over the B*S tokens. Random inputs of mixed sign:
/// kappa 2.
double tolerance(const Problem& p) {
  const auto& m = p.model;
  const int64_t forward = m.d_model + 2 * m.head_dim + 3 * p.S + m.n_heads * m.head_dim +
                          (p.norm_input ? m.d_model : 0);  // the input norm's mean over d
  return odyssey::test::reordering_tolerance(2 * forward + p.B * p.S, 2.0);
}

void require_equivalent(const Grads& got, const Grads& want, const std::string& label, double tol) {
  INFO(label << " (tolerance " << tol << ")");
  CHECK(odyssey::test::rel_error(got.out, want.out) < tol);
  CHECK(odyssey::test::rel_error(got.dx, want.dx) < tol);
  CHECK(odyssey::test::rel_error(got.dwq, want.dwq) < tol);
  CHECK(odyssey::test::rel_error(got.dwk, want.dwk) < tol);
  CHECK(odyssey::test::rel_error(got.dwv, want.dwv) < tol);
  if (want.dwo.defined()) {
    REQUIRE(got.dwo.defined());
    CHECK(odyssey::test::rel_error(got.dwo, want.dwo) < tol);
  }
  if (want.dqn.defined()) {
    REQUIRE(got.dqn.defined());
    CHECK(odyssey::test::rel_error(got.dqn, want.dqn) < tol);
    CHECK(odyssey::test::rel_error(got.dkn, want.dkn) < tol);
  }
  if (want.dxn.defined()) {
    REQUIRE(got.dxn.defined());
    CHECK(odyssey::test::rel_error(got.dxn, want.dxn) < tol);
  }
}

struct HeadCase {
  const char* name;
  int64_t H, Hkv;
  bool qk_norm;
};

/// MHA, Hkv = P, Hkv < P (and for P = 1, GQA), one of them with QK-norm.
std::vector<HeadCase> head_cases(int P) {
  std::vector<HeadCase> cases{{"mha", 8, 8, false}, {"mha+qk_norm", 8, 8, true}};
  if (P == 1) {
    cases.push_back({"gqa 8/2", 8, 2, false});
  } else {
    cases.push_back({"kv = P", 8, P, false});
    cases.push_back({"kv < P", 8, P / 2, true});
  }
  return cases;
}

}  // namespace

TEST_CASE("ulysses attention equals the single-rank reference (P = 1, 2, 4)", "[ulysses][equivalence]") {
  for (int P : {1, 2, 4}) {
    for (const auto& hc : head_cases(P)) {
      const Problem p = make_problem(hc.H, hc.Hkv, hc.qk_norm);
      const Grads want = reference(p);
      const Grads got = distributed(
          p, P, [&](const at::Tensor& x, const AttentionWeights& w, const Positions& pos, const RankContext& ctx) {
            return ulysses_attention(x, w, pos, p.model, ctx);
          });
      require_equivalent(got, want, "P = " + std::to_string(P) + ", " + hc.name, tolerance(p));
    }
  }
}

namespace {

/// The decoder block's no-graph path (the checkpointed forward) on 2 ranks, default stages: the
/// Function's output, the projection outside; the input norm folded in when p.norm_input.
at::Tensor projected_without_graph(const Problem& p) {
  MemoryConfig memory;
  memory.untied_ulysses = true;
  std::vector<at::Tensor> outs(2);
  odyssey::test::run_sp_ranks(2, [&](RankContext& ctx) {
    const int64_t s = p.S / 2;
    at::NoGradGuard no_grad;
    AttentionWeights w{p.wq, p.wk, p.wv, p.wo, {}, {}};
    const Positions pos = make_positions(ctx.sp_rank * s, s, p.model, at::kCPU);
    outs[ctx.sp_rank] = untied_attention_projected(p.x.narrow(1, ctx.sp_rank * s, s),
                                                   p.norm_input ? p.xn : at::Tensor(), w, pos, p.model, ctx, memory);
  });
  return at::cat(outs, 1);  // [B, S, d]
}

/// Untied Ulysses (`project`: with the output projection inside the Function) against the
/// single-rank reference for every valid heads_per_stage of every case at degrees 1, 2 and 4.
void check_untied_every_stage_size(bool project, const std::vector<HeadCase>& extra_cases) {
  for (int P : {1, 2, 4}) {
    std::vector<HeadCase> cases = head_cases(P);
    cases.insert(cases.end(), extra_cases.begin(), extra_cases.end());
    for (const auto& hc : cases) {
      if (hc.H % P != 0) continue;
      const Problem p = make_problem(hc.H, hc.Hkv, hc.qk_norm);
      const Grads want = reference(p, project);
      for (int64_t hps : valid_heads_per_stage(hc.H, P)) {
        MemoryConfig memory;
        memory.untied_ulysses = true;
        memory.heads_per_stage = hps;
        const Grads got = distributed(
            p, P, [&](const at::Tensor& x, const AttentionWeights& w, const Positions& pos, const RankContext& ctx) {
              return project ? untied_attention_projected(x, {}, w, pos, p.model, ctx, memory)
                             : untied_attention(x, w, pos, p.model, ctx, memory);
            });
        require_equivalent(got, want,
                           std::string(project ? "projected, " : "") + "P = " + std::to_string(P) + ", " + hc.name +
                               ", heads_per_stage = " + std::to_string(hps),
                           tolerance(p));
      }
    }
  }
}

}  // namespace

TEST_CASE("untied ulysses equals the single-rank reference for every valid heads_per_stage",
          "[ulysses][untied][equivalence]") {
  check_untied_every_stage_size(/*project=*/false, {});
}

TEST_CASE("untied ulysses with the output projection fused (d o built per stage from dh) equals the reference",
          "[ulysses][untied][equivalence]") {
  // The decoder block's path: untied_attention_projected returns [B, s, d] and its backward takes
  // dh, building each stage's d o slice from wo's columns. Also covers the straddling-group case
  // (H 12 / Hkv 4) and the no-graph path (forward only, then the projection outside).
  check_untied_every_stage_size(/*project=*/true, {{"straddling groups", 12, 4, false}});
  const Problem p = make_problem(8, 2, false);
  CHECK(odyssey::test::rel_error(projected_without_graph(p), reference(p, /*project=*/true).out) < tolerance(p));
}

TEST_CASE("untied ulysses: stages straddling KV groups (k and g not dividing each other)",
          "[ulysses][untied][equivalence]") {
  // H = 12, Hkv = 4: g = 3 query heads per KV head. P = 1 with 2 or 4 heads per stage, P = 2 with
  // 4 (2 per rank): stages cover parts of two KV groups, so a KV head is needed by two stages.
  const Problem p = make_problem(12, 4, false);
  const Grads want = reference(p);
  for (auto [P, hps] : std::vector<std::pair<int, int64_t>>{{1, 2}, {1, 4}, {2, 4}, {2, 2}, {4, 4}}) {
    MemoryConfig memory;
    memory.untied_ulysses = true;
    memory.heads_per_stage = hps;
    const Grads got = distributed(
        p, P, [&](const at::Tensor& x, const AttentionWeights& w, const Positions& pos, const RankContext& ctx) {
          return untied_attention(x, w, pos, p.model, ctx, memory);
        });
    require_equivalent(got, want,
                       "H 12 / Hkv 4, P = " + std::to_string(P) + ", heads_per_stage = " + std::to_string(hps),
                       tolerance(p));
  }
}

TEST_CASE("ulysses and untied with batch 1 (all-to-all straight into the output)", "[ulysses][untied][equivalence]") {
  for (int P : {2, 4}) {
    for (const auto& hc : head_cases(P)) {
      const Problem p = make_problem(hc.H, hc.Hkv, hc.qk_norm, /*B=*/1);
      const Grads want = reference(p);
      const Grads plain = distributed(
          p, P, [&](const at::Tensor& x, const AttentionWeights& w, const Positions& pos, const RankContext& ctx) {
            return ulysses_attention(x, w, pos, p.model, ctx);
          });
      require_equivalent(plain, want, "B = 1, ulysses, P = " + std::to_string(P) + ", " + hc.name, tolerance(p));
      for (int64_t hps : valid_heads_per_stage(hc.H, P)) {
        MemoryConfig memory;
        memory.untied_ulysses = true;
        memory.heads_per_stage = hps;
        const Grads got = distributed(
            p, P, [&](const at::Tensor& x, const AttentionWeights& w, const Positions& pos, const RankContext& ctx) {
              return untied_attention(x, w, pos, p.model, ctx, memory);
            });
        require_equivalent(got, want,
                           "B = 1, untied, P = " + std::to_string(P) + ", " + hc.name + ", hps " + std::to_string(hps),
                           tolerance(p));
      }
    }
  }
}

namespace {

/// Makes the Untied Function take the GPU path (ops::rope_pack into the send buffers) on CPU tensors
/// for the scope: LibTorch's rope_pack does there what the CUDA kernel does on a GPU.
struct ForcedRopePack {
  ForcedRopePack() { force_untied_rope_pack(true); }
  ~ForcedRopePack() { force_untied_rope_pack(false); }
  ForcedRopePack(const ForcedRopePack&) = delete;
  ForcedRopePack& operator=(const ForcedRopePack&) = delete;
};

}  // namespace

TEST_CASE("untied ulysses through rope_pack (RoPE written into the send buffers, the GPU path) equals the reference",
          "[ulysses][untied][equivalence]") {
  const ForcedRopePack forced;
  REQUIRE(untied_rope_pack(at::empty({1})));
  // Every degree, head layout (QK-norm, KV replicated below P) and stage size, with and without the
  // fused output projection; then batch 1, where the all-to-all receives into the output itself.
  check_untied_every_stage_size(/*project=*/false, {});
  check_untied_every_stage_size(/*project=*/true, {{"straddling groups", 12, 4, false}});
  for (int P : {2, 4}) {
    const Problem p = make_problem(8, P / 2, /*qk_norm=*/true, /*B=*/1);
    const Grads want = reference(p);
    MemoryConfig memory;
    memory.untied_ulysses = true;
    memory.heads_per_stage = P;
    const Grads got = distributed(
        p, P, [&](const at::Tensor& x, const AttentionWeights& w, const Positions& pos, const RankContext& ctx) {
          return untied_attention(x, w, pos, p.model, ctx, memory);
        });
    require_equivalent(got, want, "rope_pack, B = 1, P = " + std::to_string(P), tolerance(p));
  }
}

TEST_CASE("untied ulysses with scaled RoPE (llama3, yarn): rope_pack rotates by the scaled frequencies",
          "[ulysses][untied][equivalence]") {
  // The GPU path takes the frequencies as a table (Positions::inv_freq) instead of deriving them
  // from theta; under YaRN's attention factor it must fall back to the tables that carry it. Both
  // against the single-rank reference built from the same rule (engine/config/rope.h). The
  // original context (8) is shorter than the sequence (32), so the scaling changes the angles.
  for (const RopeScaling& scaling :
       {RopeScaling{.kind = RopeScalingKind::Llama3, .factor = 4.0, .original_max_position = 8},
        RopeScaling{.kind = RopeScalingKind::Yarn, .factor = 4.0, .original_max_position = 8}}) {
    Problem p = make_problem(8, 2, /*qk_norm=*/false);
    p.model.rope_scaling = scaling;
    const Grads want = reference(p);
    Problem unscaled = p;
    unscaled.model.rope_scaling = RopeScaling{};
    REQUIRE(odyssey::test::rel_error(reference(unscaled).out, want.out) >
            10 * tolerance(p));  // the scaling matters here
    for (bool forced : {false, true}) {
      std::optional<ForcedRopePack> pack;
      if (forced) pack.emplace();
      MemoryConfig memory;
      memory.untied_ulysses = true;
      memory.heads_per_stage = 2;
      const Grads got = distributed(
          p, 2, [&](const at::Tensor& x, const AttentionWeights& w, const Positions& pos, const RankContext& ctx) {
            return untied_attention(x, w, pos, p.model, ctx, memory);
          });
      require_equivalent(got, want, std::string(to_string(scaling.kind)) + (forced ? ", rope_pack" : ", tables"),
                         tolerance(p));
    }
  }
}

TEST_CASE("untied ulysses with the input RMSNorm folded into its projections equals norm-then-attention",
          "[ulysses][untied][equivalence]") {
  // The decoder block's path: x is the block input, the Function norms it inside (rmsnorm(x) @ W^T
  // = (x @ (W * w)^T) * rstd) and turns the normed input's gradient into x's in place. Against the
  // single-rank reference that norms first: the output, dx through the norm, and the norm weight's
  // gradient, for every degree, head layout and stage size, with and without rope_pack; plus the
  // no-graph forward.
  for (bool packed : {false, true}) {
    std::optional<ForcedRopePack> pack;
    if (packed) pack.emplace();
    for (int P : {1, 2, 4}) {
      std::vector<HeadCase> cases = head_cases(P);
      cases.push_back({"straddling groups", 12, 4, false});
      for (const auto& hc : cases) {
        if (hc.H % P != 0) continue;
        Problem p = make_problem(hc.H, hc.Hkv, hc.qk_norm);
        p.norm_input = true;
        const Grads want = reference(p, /*project=*/true);
        for (int64_t hps : valid_heads_per_stage(hc.H, P)) {
          MemoryConfig memory;
          memory.untied_ulysses = true;
          memory.heads_per_stage = hps;
          const Grads got = distributed_normed(
              p, P,
              [&](const at::Tensor& x, const at::Tensor& xn, const AttentionWeights& w, const Positions& pos,
                  const RankContext& ctx) { return untied_attention_projected(x, xn, w, pos, p.model, ctx, memory); });
          require_equivalent(got, want,
                             std::string(packed ? "rope_pack, " : "") + "input norm folded, P = " + std::to_string(P) +
                                 ", " + hc.name + ", heads_per_stage = " + std::to_string(hps),
                             tolerance(p));
        }
      }
    }
  }
  Problem p = make_problem(8, 2, false);
  p.norm_input = true;
  CHECK(odyssey::test::rel_error(projected_without_graph(p), reference(p, /*project=*/true).out) < tolerance(p));
}
