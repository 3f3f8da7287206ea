// The CUDA paths of engine/parallel, for a GPU host (hidden [.cuda]: `parallel_tests "[.cuda]"`):
// Untied Ulysses with the CUDA cuDNN and FlashAttention-2 (bf16) and memory-efficient (fp32)
// kernels against plain SDPA, the log-sum-exp kernels one against another, standard attention off
// SDPA's math backend (fp32 over GQA), and an NCCL group of one. Multi-rank NCCL needs one GPU per rank (run_rank_threads on
// cuda:0..W-1); with one GPU only the single-rank group runs. defines: test cases [.cuda]
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../common/engine_test_util.h"
#include "engine/ops/layers.h"
#include "engine/parallel/flash_attention.h"
#include "engine/parallel/kept_attention.h"
#include "engine/parallel/nccl_backend.h"
#include "engine/parallel/process_group_comm.h"
#include "engine/parallel/untied_attention.h"

using namespace odyssey;

namespace {

double rel(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / (scale > 0 ? scale : 1);
}

void check_untied_cuda(at::ScalarType dtype, double tolerance, LseKernelChoice choice = LseKernelChoice::Auto) {
  const at::Device gpu = odyssey::test::test_gpu();
  ModelConfig m;
  m.n_heads = 8;
  m.n_kv_heads = 2;
  m.head_dim = 64;
  m.d_model = 256;
  const int64_t B = 1, S = 1024, H = m.n_heads, Hkv = m.n_kv_heads, hd = m.head_dim, d = m.d_model;
  at::manual_seed(3);
  const auto opt = at::TensorOptions().device(gpu).dtype(dtype);
  const at::Tensor x0 = at::randn({B, S, d}, opt), wq0 = at::randn({H * hd, d}, opt) * 0.05,
                   wk0 = at::randn({Hkv * hd, d}, opt) * 0.05, wv0 = at::randn({Hkv * hd, d}, opt) * 0.05,
                   R = at::randn({B, S, H * hd}, opt);
  const Positions pos = make_positions(0, S, hd, m.rope_theta, gpu);
  auto leaf = [](const at::Tensor& t) { return t.detach().clone().requires_grad_(true); };

  // Reference: math SDPA over repeat-interleaved KV.
  at::Tensor x = leaf(x0), wq = leaf(wq0), wk = leaf(wk0), wv = leaf(wv0);
  at::Tensor q = apply_rope(at::linear(x, wq).view({B, S, H, hd}), pos).transpose(1, 2);
  at::Tensor k = apply_rope(at::linear(x, wk).view({B, S, Hkv, hd}), pos).repeat_interleave(H / Hkv, 2).transpose(1, 2);
  at::Tensor v = at::linear(x, wv).view({B, S, Hkv, hd}).repeat_interleave(H / Hkv, 2).transpose(1, 2);
  at::Tensor ref = std::get<0>(at::_scaled_dot_product_attention_math(q.to(at::kFloat), k.to(at::kFloat),
                                                                      v.to(at::kFloat), {}, 0.0, true))
                       .transpose(1, 2)
                       .reshape({B, S, H * hd});
  (ref * R.to(at::kFloat)).sum().backward();

  RankContext ctx;
  ctx.device = gpu;
  for (int64_t hps : {1, 2, 4, 8}) {
    MemoryConfig memory;
    memory.untied_ulysses = true;
    memory.heads_per_stage = hps;
    memory.lse_attention_kernel = choice;
    at::Tensor x2 = leaf(x0), wq2 = leaf(wq0), wk2 = leaf(wk0), wv2 = leaf(wv0);
    reset_attention_kernels_run();
    at::Tensor out = untied_attention(x2, AttentionWeights{wq2, wk2, wv2, {}, {}, {}}, pos, m, ctx, memory);
    (out.to(at::kFloat) * R.to(at::kFloat)).sum().backward();
    // the kernel the rule sends this run to is the one that ran (the trace's list)
    const char* expected = dtype == at::kFloat ? "efficient" : choice == LseKernelChoice::Flash2 ? "flash2" : "cudnn";
    CHECK(attention_kernels_run() == std::vector<std::string>{expected});
    INFO(c10::toString(dtype) << " heads_per_stage " << hps << " kernel choice " << to_string(choice));
    CHECK(rel(out, ref) < tolerance);
    CHECK(rel(x2.grad(), x.grad()) < tolerance);
    CHECK(rel(wq2.grad(), wq.grad()) < tolerance);
    CHECK(rel(wk2.grad(), wk.grad()) < tolerance);
    CHECK(rel(wv2.grad(), wv.grad()) < tolerance);
  }
}

}  // namespace

TEST_CASE("cuda: untied attention, fp32 (memory-efficient kernel) matches math SDPA", "[.cuda]") {
  // The same sums in other orders (../fp_tolerance.h): forward chain d (projections) + hd (QK^T) +
  // 3 S (softmax max, sum, P.V); a gradient twice that plus the weight-gradient sum over B*S = 1024
  // tokens; random inputs of mixed sign, kappa 2. d = 256, hd = 64, S = 1024.
  check_untied_cuda(at::kFloat, odyssey::test::reordering_tolerance(2 * (256 + 64 + 3 * 1024) + 1024, 2.0));
}

// bf16: both kernels round the probabilities to bf16 before P.V and the output to bf16 (2^-8
// relative each), on top of bf16 inputs to the projections; 3e-2 is about 8 such roundings of the
// largest element, the same bound for either kernel.
TEST_CASE("cuda: untied attention, bf16 (cuDNN's kernel, auto) matches math SDPA", "[.cuda]") {
  check_untied_cuda(at::kBFloat16, 3e-2, LseKernelChoice::Auto);
}

TEST_CASE("cuda: untied attention, bf16 (FlashAttention-2) matches math SDPA", "[.cuda]") {
  check_untied_cuda(at::kBFloat16, 3e-2, LseKernelChoice::Flash2);
}

TEST_CASE("cuda: standard attention over fewer KV heads in fp32 runs the memory-efficient kernel, not SDPA's math",
          "[.cuda]") {
  // SDPA has only its math backend for fp32 over GQA (sdpa_has_only_math), whose [B, h, S, S]
  // scores the planner does not charge: causal_attention calls the memory-efficient kernel over K/V
  // repeated for the call (kernel_repeats_kv), and its backward from the saved output and LSE.
  // Against math over repeated K/V: the same sums in other orders (../fp_tolerance.h), the
  // gradient's chain twice the forward's (hd for QK^T, 3 S for the softmax's max and sum and P.V)
  // plus the sums over S query positions and the h/hk query heads of a KV head; inputs of mixed
  // sign, kappa 2.
  const at::Device gpu = odyssey::test::test_gpu();
  const int64_t B = 1, h = 4, hk = 1, S = 1024, hd = 64;
  at::manual_seed(11);
  const auto opt = at::TensorOptions().device(gpu).dtype(at::kFloat);
  auto leaf = [](const at::Tensor& t) { return t.detach().clone().requires_grad_(true); };
  const at::Tensor q0 = at::randn({B, h, S, hd}, opt), k0 = at::randn({B, hk, S, hd}, opt),
                   v0 = at::randn({B, hk, S, hd}, opt), g = at::randn({B, h, S, hd}, opt);
  at::Tensor q = leaf(q0), k = leaf(k0), v = leaf(v0);
  REQUIRE(sdpa_has_only_math_for(q, k));
  reset_attention_kernels_run();
  const at::Tensor out = causal_attention(q, k, v, DocumentSpans{});  // [B, h, S, hd]
  (out * g).sum().backward();
  CHECK(attention_kernels_run() == std::vector<std::string>{"efficient"});  // neither "sdpa" nor math
  at::Tensor qr = leaf(q0), kr = leaf(k0), vr = leaf(v0);
  const at::Tensor ref = std::get<0>(at::_scaled_dot_product_attention_math(
      qr, kr.repeat_interleave(h / hk, 1), vr.repeat_interleave(h / hk, 1), {}, 0.0, /*is_causal=*/true));
  (ref * g).sum().backward();
  const double tolerance = odyssey::test::reordering_tolerance(2 * (hd + 3 * S) + S + h / hk, 2.0);
  CHECK(rel(out, ref) < tolerance);
  CHECK(rel(q.grad(), qr.grad()) < tolerance);
  CHECK(rel(k.grad(), kr.grad()) < tolerance);
  CHECK(rel(v.grad(), vr.grad()) < tolerance);
  // equal head counts stay with SDPA (its memory-efficient kernel takes them)
  CHECK_FALSE(sdpa_has_only_math_for(q, q));
}

TEST_CASE("cuda: the cuDNN and FlashAttention-2 log-sum-exp kernels agree with fp32 math", "[.cuda]") {
  // One Untied stage's call: q [B, h, S, hd] over k, v [B, hk, S, hd] (GQA 4/2) in the head layout's
  // memory order [B, S, h, hd], a gradient in another order ([B, h, S, hd] contiguous: cuDNN's
  // backward gets it copied to the output's). Each kernel against the fp32 math reference:
  // forward out and LSE, and dq, dk, dv from the saved out and LSE.
  const at::Device gpu = odyssey::test::test_gpu();
  const int64_t B = 1, h = 4, hk = 2, S = 512, hd = 64;
  at::manual_seed(5);
  const auto opt = at::TensorOptions().device(gpu).dtype(at::kBFloat16);
  const at::Tensor q = at::randn({B, S, h, hd}, opt).transpose(1, 2),
                   k = at::randn({B, S, hk, hd}, opt).transpose(1, 2),
                   v = at::randn({B, S, hk, hd}, opt).transpose(1, 2), g = at::randn({B, h, S, hd}, opt);
  // fp32 reference with KV repeated to h heads; its gradients folded back per KV head
  auto leaf = [](const at::Tensor& t) { return t.to(at::kFloat).detach().requires_grad_(true); };
  at::Tensor qf = leaf(q), kf = leaf(k), vf = leaf(v);
  const at::Tensor scores = at::matmul(qf, kf.repeat_interleave(h / hk, 1).transpose(-2, -1)) / std::sqrt(double(hd));
  const at::Tensor causal = at::ones({S, S}, opt.dtype(at::kBool)).tril();
  const at::Tensor masked = scores.masked_fill(causal.logical_not(), -INFINITY);
  const at::Tensor lse_ref = at::logsumexp(masked, -1);  // [B, h, S], natural log
  const at::Tensor out_ref = at::matmul(at::softmax(masked, -1), vf.repeat_interleave(h / hk, 1));
  (out_ref * g.to(at::kFloat)).sum().backward();
  for (LseKernelChoice choice : {LseKernelChoice::Cudnn, LseKernelChoice::Flash2}) {
    INFO("kernel choice " << to_string(choice));
    reset_attention_kernels_run();
    const FlashResult r = flash_attention_forward(q, k, v, choice);
    CHECK(attention_kernels_run() ==
          std::vector<std::string>{choice == LseKernelChoice::Cudnn ? "cudnn" : "flash2"});  // what ran
    REQUIRE(r.lse.sizes() == at::IntArrayRef({B, h, S}));
    auto [dq, dk, dv] = flash_attention_backward(g, q, k, v, r);
    // again with the gradient already in the output's layout (no copy: the graph cached above
    // must not be reused with other strides)
    const at::Tensor g_out_layout = at::empty_like(r.out).copy_(g);
    auto [dq2, dk2, dv2] = flash_attention_backward(g_out_layout, q, k, v, r);
    CHECK(rel(dq2, qf.grad()) < 3e-2);  // (against the reference: dq's atomic sums need not repeat bit for bit)
    CHECK(rel(dk2, kf.grad()) < 3e-2);
    CHECK(rel(dv2, vf.grad()) < 3e-2);
    REQUIRE(dk.sizes() == k.sizes());
    // bf16 output and probabilities (2^-8 relative), fp32 LSE: the same bound as the Untied case
    CHECK(rel(r.out, out_ref) < 3e-2);
    // a log, absolute: bf16 products are exact in fp32, so only fp32 sums differ (about 1e-5)
    CHECK((r.lse - lse_ref).abs().max().item<double>() < 1e-3);
    CHECK(rel(dq, qf.grad()) < 3e-2);
    CHECK(rel(dk, kf.grad()) < 3e-2);
    CHECK(rel(dv, vf.grad()) < 3e-2);
  }
}

TEST_CASE("cuda: an NCCL group of one runs every collective", "[.cuda]") {
  REQUIRE(nccl_available());
  const at::Device gpu = odyssey::test::test_gpu();
  auto store = c10::make_intrusive<c10d::HashStore>();
  NcclComm comm(store, GroupSpec{"world", "world", 0, 1, 0, std::chrono::seconds(60)}, gpu);
  at::Tensor in = at::arange(8, at::TensorOptions().device(gpu).dtype(at::kFloat));
  at::Tensor out = at::empty({8}, in.options());
  comm.all_gather(out, in);
  CHECK(at::equal(out, in));
  comm.reduce_scatter_sum(out, in.clone());
  CHECK(at::equal(out, in));
  comm.all_to_all(out, in);
  CHECK(at::equal(out, in));
  at::Tensor t = in.clone();
  comm.all_reduce_sum(t);
  comm.all_reduce_max(t);
  comm.broadcast(t, 0);
  CHECK(at::equal(t, in));
  comm.barrier();
}
