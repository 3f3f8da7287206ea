// Fused linear + cross-entropy: the CPU reference against closed forms and finite differences, the
// tile plan's arithmetic, and an emulation of the kernel's tiled online log-sum-exp on the CPU built
// from the kernel's own per-element math (everywhere); the CUDA kernel against the reference ([.cuda]).
#include <catch2/catch.hpp>

#include <algorithm>

#include "kernels/linear_cross_entropy.h"
#include "kernel_test_support.h"

using namespace odyssey::kernels;
using namespace odyssey::kernels::test;

namespace {

// Naive formula in fp64: scale * sum_t CE(h_t W^T, label_t), skipping ignored tokens.
double scaled_loss(const std::vector<double>& h, const std::vector<double>& w, const std::vector<int64_t>& labels,
                   int64_t tokens, int64_t dim, int64_t vocab, double scale) {
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    if (labels[t] == kIgnoreIndex) continue;
    std::vector<double> z(vocab);
    for (int64_t v = 0; v < vocab; ++v)
      for (int64_t k = 0; k < dim; ++k) z[v] += h[t * dim + k] * w[v * dim + k];
    double m = *std::max_element(z.begin(), z.end()), s = 0.0;
    for (double zv : z) s += std::exp(zv - m);
    total += m + std::log(s) - z[labels[t]];
  }
  return scale * total;
}

// The kernel's algorithm on the CPU: tiles from the plan, fp32 logits per tile, MaxSum merges and
// ce_grad exactly as the device code applies them.
void tiled_emulation(const HostTensor& h, const HostTensor& w, const std::vector<int64_t>& labels,
                     const LinearCrossEntropyShape& shape, float scale, std::vector<float>& loss,
                     std::vector<double>& dh, std::vector<double>& dw) {
  const LceTilePlan plan = plan_linear_cross_entropy(KernelDtype::F32, shape);
  const int64_t d = shape.dim;
  auto logit = [&](int64_t t, int64_t v) {
    float z = 0.0f;
    for (int64_t k = 0; k < d; ++k) z += static_cast<float>(h.at(t * d + k) * w.at(v * d + k));
    return z;
  };
  for (int64_t st = 0; st < plan.n_seq_tiles; ++st) {
    const int64_t t0 = st * plan.seq_tile, tt = std::min(plan.seq_tile, shape.tokens - t0);
    std::vector<MaxSum> stats(tt, MaxSum{-INFINITY, 0.0f});
    std::vector<float> target(tt, 0.0f), lse(tt);
    for (int64_t vi = 0; vi < plan.n_vocab_tiles; ++vi) {
      const int64_t v0 = vi * plan.vocab_tile, vt = std::min(plan.vocab_tile, shape.vocab - v0);
      for (int64_t r = 0; r < tt; ++r) {
        MaxSum tile{-INFINITY, 0.0f};
        for (int64_t c = 0; c < vt; ++c) tile = merge_max_sum(tile, MaxSum{logit(t0 + r, v0 + c), 1.0f});
        stats[r] = merge_max_sum(stats[r], tile);
        const int64_t label = labels[t0 + r];
        if (label >= v0 && label < v0 + vt) target[r] = logit(t0 + r, label);
      }
    }
    for (int64_t r = 0; r < tt; ++r) {
      lse[r] = stats[r].max + std::log(stats[r].sum);
      loss[t0 + r] = labels[t0 + r] == kIgnoreIndex ? 0.0f : lse[r] - target[r];
    }
    for (int64_t vi = 0; vi < plan.n_vocab_tiles; ++vi) {
      const int64_t v0 = vi * plan.vocab_tile, vt = std::min(plan.vocab_tile, shape.vocab - v0);
      for (int64_t r = 0; r < tt; ++r) {
        const int64_t t = t0 + r, label = labels[t];
        if (label == kIgnoreIndex) continue;
        for (int64_t c = 0; c < vt; ++c) {
          const float g = ce_grad(logit(t, v0 + c), lse[r], v0 + c == label, scale);
          for (int64_t k = 0; k < d; ++k) {
            dh[t * d + k] += g * w.at((v0 + c) * d + k);
            dw[(v0 + c) * d + k] += g * h.at(t * d + k);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("linear cross-entropy reference: zero weights give log V and uniform gradients", "[kernels][lce]") {
  const int64_t tokens = 3, dim = 4, vocab = 5;
  const float scale = 0.5f;
  HostTensor h = random_tensor(KernelDtype::F32, tokens * dim, 1);
  HostTensor w(KernelDtype::F32, vocab * dim);  // zeros
  const std::vector<int64_t> labels = {2, kIgnoreIndex, 4};
  std::vector<float> loss(tokens), dw(vocab * dim, 0.0f);
  HostTensor dh(KernelDtype::F32, tokens * dim);
  linear_cross_entropy_reference(KernelDtype::F32, h.data(), w.data(), labels.data(), tokens, dim, vocab, scale,
                                 loss.data(), dh.data(), dw.data());
  CHECK(loss[0] == Approx(std::log(5.0)));
  CHECK(loss[1] == 0.0f);  // ignored
  CHECK(loss[2] == Approx(std::log(5.0)));
  CHECK(max_abs(dh.values()) == 0.0);  // W = 0
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t k = 0; k < dim; ++k) {
      double expected = 0.0;
      for (int64_t t : {0, 2}) expected += scale * (0.2 - (v == labels[t] ? 1.0 : 0.0)) * h.at(t * dim + k);
      CHECK(dw[v * dim + k] == Approx(expected).margin(1e-6));
    }
}

TEST_CASE("linear cross-entropy reference gradients equal finite differences", "[kernels][lce]") {
  const int64_t tokens = 4, dim = 3, vocab = 6;
  const double scale = 0.25;
  HostTensor h = random_tensor(KernelDtype::F32, tokens * dim, 2), w = random_tensor(KernelDtype::F32, vocab * dim, 3);
  const std::vector<int64_t> labels = {5, 0, kIgnoreIndex, 3};
  std::vector<float> loss(tokens), dw(vocab * dim, 1.0f);  // dweight accumulates onto 1.0
  HostTensor dh(KernelDtype::F32, tokens * dim);
  linear_cross_entropy_reference(KernelDtype::F32, h.data(), w.data(), labels.data(), tokens, dim, vocab,
                                 static_cast<float>(scale), loss.data(), dh.data(), dw.data());
  const auto hv = h.values(), wv = w.values();
  CHECK(scale * (loss[0] + loss[1] + loss[3]) ==
        Approx(scaled_loss(hv, wv, labels, tokens, dim, vocab, scale)).epsilon(1e-6));
  const double step = 1e-6;
  for (size_t i = 0; i < hv.size(); ++i) {
    auto plus = hv, minus = hv;
    plus[i] += step, minus[i] -= step;
    const double numeric = (scaled_loss(plus, wv, labels, tokens, dim, vocab, scale) -
                            scaled_loss(minus, wv, labels, tokens, dim, vocab, scale)) /
                           (2 * step);
    CHECK(dh.at(i) == Approx(numeric).margin(1e-6).epsilon(1e-4));
  }
  for (size_t i = 0; i < wv.size(); ++i) {
    auto plus = wv, minus = wv;
    plus[i] += step, minus[i] -= step;
    const double numeric = (scaled_loss(hv, plus, labels, tokens, dim, vocab, scale) -
                            scaled_loss(hv, minus, labels, tokens, dim, vocab, scale)) /
                           (2 * step);
    CHECK(dw[i] - 1.0 == Approx(numeric).margin(1e-6).epsilon(1e-4));
  }
}

TEST_CASE("linear cross-entropy reference refuses a label outside the vocabulary", "[kernels][lce]") {
  std::vector<float> h(2, 1.0f), w(6, 1.0f), loss(1);
  const std::vector<int64_t> labels = {3};
  CHECK_THROWS_WITH(linear_cross_entropy_reference(KernelDtype::F32, h.data(), w.data(), labels.data(), 1, 2, 3, 1.0f,
                                                   loss.data(), nullptr, nullptr),
                    Catch::Contains("labels[0] = 3") && Catch::Contains("[0, 3)"));
}

TEST_CASE("linear cross-entropy tile plan: defaults, remainders, layout", "[kernels][lce]") {
  // Llama-3.2-1B at 128K tokens: the workspace is the tile, not [tokens, vocab].
  LinearCrossEntropyShape big{131072, 2048, 128256, 0, 0};
  const LceTilePlan p = plan_linear_cross_entropy(KernelDtype::BF16, big);
  CHECK(p.seq_tile == 8192);
  CHECK(p.vocab_tile == 8192);
  CHECK(p.n_seq_tiles == 16);
  CHECK(p.n_vocab_tiles == 16);  // 15 full tiles + 5376
  const size_t tile = 8192u * 8192u;
  CHECK(p.bytes >= tile * 4 + tile * 2 + 8192u * 2048u * 4);
  CHECK(p.bytes < tile * 4 + tile * 2 + 8192u * 2048u * 4 + 4 * 256 + 3 * 8192 * 4);
  CHECK(p.bytes * 100 < static_cast<size_t>(131072) * 128256 * 4);  // under 1% of the full fp32 logits
  for (size_t off :
       {p.logits_offset, p.grad_offset, p.row_max_offset, p.row_sum_offset, p.target_offset, p.dhidden_acc_offset})
    CHECK(off % 256 == 0);
  // fp32: the gradient overwrites the logits tile and dhidden accumulates in place.
  const LceTilePlan f = plan_linear_cross_entropy(KernelDtype::F32, LinearCrossEntropyShape{10, 4, 11, 3, 4});
  CHECK(f.grad_offset == f.logits_offset);
  CHECK(f.n_seq_tiles == 4);
  CHECK(f.n_vocab_tiles == 3);
  // Tiles larger than the problem shrink to it.
  const LceTilePlan small = plan_linear_cross_entropy(KernelDtype::F32, LinearCrossEntropyShape{5, 4, 7, 100, 100});
  CHECK(small.seq_tile == 5);
  CHECK(small.vocab_tile == 7);
  CHECK_THROWS_WITH(plan_linear_cross_entropy(KernelDtype::F32, LinearCrossEntropyShape{0, 4, 7, 0, 0}),
                    Catch::Contains("tokens = 0"));
  CHECK_THROWS_WITH(plan_linear_cross_entropy(KernelDtype::F32, LinearCrossEntropyShape{5, 4, 7, -1, 0}),
                    Catch::Contains("seq_tile = -1"));
}

TEST_CASE("linear cross-entropy: the widest plannable tiling of a full vocabulary", "[kernels][lce]") {
  // The benchmark's untiled comparator once asked for one [32768, 128256] tile: 4.2e9 elements,
  // past cuBLAS's int, so the plan threw and the benchmark stopped before its other stages.
  CHECK_THROWS_WITH(
      plan_linear_cross_entropy(KernelDtype::BF16, LinearCrossEntropyShape{32768, 2048, 128256, 32768, 128256}),
      Catch::Contains("too large"));
  const LinearCrossEntropyShape wide = widest_vocab_tiles(32768, 2048, 128256);
  CHECK(wide.vocab_tile == 128256);
  CHECK(wide.seq_tile == 0x7fffffff / 128256);  // 16743 tokens of the whole vocabulary
  const LceTilePlan p = plan_linear_cross_entropy(KernelDtype::BF16, wide);
  CHECK(p.seq_tile * p.vocab_tile <= kMaxLceTileElements);
  CHECK(p.n_vocab_tiles == 1);
  CHECK(p.n_seq_tiles == 2);
  CHECK(widest_vocab_tiles(100, 16, 50).seq_tile == 100);  // small problems: one tile
  // Whole rows in one tile: pass 2 reads pass 1's logits, 3 head GEMMs as the unfused head runs;
  // the default 8192-entry tiles over Llama's vocabulary (16 tiles) compute the logits twice.
  CHECK(lce_head_gemms(p.n_vocab_tiles) == 3);
  CHECK(lce_head_gemms(plan_linear_cross_entropy(KernelDtype::BF16, {32768, 2048, 128256, 0, 0}).n_vocab_tiles) == 4);
}

TEST_CASE("linear cross-entropy: the training step's tiles are whole rows of the loss tile", "[kernels][lce]") {
  // The default loss tile over Llama's vocabulary: 2^30 / (4 x 128256) = 2092 positions (about
  // 1 GiB of fp32 logits, engine/layout/tiles.h), one sequence: one [2092, 128256] tile a sequence
  // tile, so 3 head GEMMs where the default 8192-entry tiles (16 of them) ran 4.
  const FusedLossTiles llama = fused_loss_tiles(1, 2092, 128256);
  CHECK(llama.seq_tile == 2092);
  CHECK(llama.vocab_tile == 128256);
  const LceTilePlan p =
      plan_linear_cross_entropy(KernelDtype::BF16, {32768, 2048, 128256, llama.seq_tile, llama.vocab_tile});
  CHECK(p.n_vocab_tiles == 1);
  CHECK(p.n_seq_tiles == 16);  // ceil(32768 / 2092)
  CHECK(lce_head_gemms(p.n_vocab_tiles) == 3);
  // The workspace is the loss tile's fp32 logits, their bf16 gradient, three fp32 row statistics
  // and the fp32 dhidden accumulator, each piece rounded up to 256 B.
  auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  CHECK(static_cast<int64_t>(p.bytes) == aligned(2092LL * 128256 * 4) + aligned(2092LL * 128256 * 2) +
                                             3 * aligned(2092 * 4) + aligned(2092LL * 2048 * 4));
  // B sequences of the same positions make one tile of B x positions rows ...
  CHECK(fused_loss_tiles(4, 2092, 128256).seq_tile == 4 * 2092);
  // ... as far as cuBLAS's int allows a whole-row tile: 16743 rows of Llama's vocabulary.
  const FusedLossTiles clamped = fused_loss_tiles(16, 2092, 128256);
  CHECK(clamped.seq_tile == kMaxLceTileElements / 128256);
  CHECK(plan_linear_cross_entropy(KernelDtype::BF16, {1 << 20, 2048, 128256, clamped.seq_tile, clamped.vocab_tile})
                .seq_tile *
            128256 <=
        kMaxLceTileElements);
  // The answer statistics' chunk is the tile's rows: their [rows, V] compute-dtype logits fit in
  // the fp32 logits tile the kernel has just released.
  CHECK(fused_loss_answer_rows(1, 2092, 128256) == 2092);
  CHECK(fused_loss_answer_rows(16, 2092, 128256) == clamped.seq_tile);
}

TEST_CASE("the kernel's tiled online log-sum-exp equals the untiled reference", "[kernels][lce]") {
  // Tiles of 3 tokens x 4 vocabulary entries over 10 x 11: remainders in both directions, labels in
  // every vocabulary tile, ignored tokens, large logits (the online max must rescale the sums).
  const int64_t tokens = 10, dim = 5, vocab = 11;
  const float scale = 0.1f;
  HostTensor h = random_tensor(KernelDtype::F32, tokens * dim, 5, 3.0),
             w = random_tensor(KernelDtype::F32, vocab * dim, 6, 2.0);
  const std::vector<int64_t> labels = {0, 3, 4, kIgnoreIndex, 7, 8, 10, 10, kIgnoreIndex, 1};
  std::vector<float> loss_ref(tokens), dw_ref(vocab * dim, 0.0f);
  HostTensor dh_ref(KernelDtype::F32, tokens * dim);
  linear_cross_entropy_reference(KernelDtype::F32, h.data(), w.data(), labels.data(), tokens, dim, vocab, scale,
                                 loss_ref.data(), dh_ref.data(), dw_ref.data());
  std::vector<float> loss(tokens);
  std::vector<double> dh(tokens * dim, 0.0), dw(vocab * dim, 0.0);
  tiled_emulation(h, w, labels, LinearCrossEntropyShape{tokens, dim, vocab, 3, 4}, scale, loss, dh, dw);
  CHECK(max_abs_diff(as_doubles(loss), as_doubles(loss_ref)) <= 1e-4 * max_abs(as_doubles(loss_ref)));
  CHECK(max_abs_diff(dh, dh_ref.values()) <= 1e-5 * std::max(1.0, max_abs(dh_ref.values())));
  CHECK(max_abs_diff(dw, as_doubles(dw_ref)) <= 1e-5 * std::max(1.0, max_abs(as_doubles(dw_ref))));
  CHECK(max_abs(as_doubles(loss_ref)) > 1.0);  // the case is not trivially small
}

TEST_CASE("fused linear cross-entropy kernel matches the CPU reference", "[kernels][lce][.cuda]") {
  // Tolerances: fp32 (cuBLAS with fp32 compute) loss within 1e-4 absolute, gradients within 1e-4 of
  // their largest value; bf16 (dlogits rounded to bf16 before the GEMMs) gradients within 2/128.
  const auto dtype = GENERATE(KernelDtype::F32, KernelDtype::BF16);
  struct Case {
    int64_t tokens, dim, vocab, seq_tile, vocab_tile;
  };
  // The second and fourth run one vocabulary tile of whole rows: pass 2 reads pass 1's logits tile
  // instead of computing it again (lce_head_gemms), over one and over three sequence tiles.
  const Case cases[] = {
      {300, 64, 1000, 128, 256}, {77, 96, 515, 0, 0}, {64, 128, 4096, 64, 1024}, {300, 64, 1000, 128, 1000}};
  for (const Case& c : cases) {
    CAPTURE(to_string(dtype), c.tokens, c.dim, c.vocab, c.seq_tile, c.vocab_tile);
    const LinearCrossEntropyShape shape{c.tokens, c.dim, c.vocab, c.seq_tile, c.vocab_tile};
    HostTensor h = random_tensor(dtype, c.tokens * c.dim, 7), w = random_tensor(dtype, c.vocab * c.dim, 8, 0.2);
    std::vector<int64_t> labels(c.tokens);
    for (int64_t t = 0; t < c.tokens; ++t) labels[t] = t % 9 == 4 ? kIgnoreIndex : (t * 37) % c.vocab;
    labels[1] = c.vocab + 5;  // invalid: ignored and counted by the kernel
    std::vector<int64_t> ref_labels = labels;
    ref_labels[1] = kIgnoreIndex;
    const float scale = 1.0f / static_cast<float>(c.tokens);
    std::vector<float> loss_ref(c.tokens), dw_ref(c.vocab * c.dim, 0.5f);
    HostTensor dh_ref(dtype, c.tokens * c.dim);
    linear_cross_entropy_reference(dtype, h.data(), w.data(), ref_labels.data(), c.tokens, c.dim, c.vocab, scale,
                                   loss_ref.data(), dh_ref.data(), dw_ref.data());

    const LceTilePlan plan = plan_linear_cross_entropy(dtype, shape);
    DeviceBuffer hd = to_device(h), wd = to_device(w), ld = to_device(labels);
    DeviceBuffer lossd(c.tokens * sizeof(float)), dhd(c.tokens * c.dim * dtype_bytes(dtype));
    DeviceBuffer dwd = to_device(std::vector<float>(c.vocab * c.dim, 0.5f)), ws(plan.bytes),
                 bad = to_device(std::vector<int32_t>{0});
    linear_cross_entropy(dtype, hd.get(), wd.get(), ld.as<int64_t>(), shape, scale, lossd.as<float>(), dhd.get(),
                         dwd.as<float>(), ws.get(), plan.bytes, bad.as<int32_t>(), nullptr);
    const double grad_tol = dtype == KernelDtype::F32 ? 1e-4 : 2.0 / 128;
    CHECK(max_abs_diff(as_doubles(to_host_vector<float>(lossd, c.tokens)), as_doubles(loss_ref)) <=
          1e-4 * std::max(1.0, max_abs(as_doubles(loss_ref))) * (dtype == KernelDtype::F32 ? 1 : 10));
    CHECK(max_abs_diff(to_host(dhd, dtype, c.tokens * c.dim).values(), dh_ref.values()) <=
          grad_tol * max_abs(dh_ref.values()));
    const auto dw = as_doubles(to_host_vector<float>(dwd, c.vocab * c.dim));
    std::vector<double> dw_delta_ref(dw_ref.size()), dw_delta(dw.size());
    for (size_t i = 0; i < dw.size(); ++i) dw_delta_ref[i] = dw_ref[i] - 0.5, dw_delta[i] = dw[i] - 0.5;
    CHECK(max_abs_diff(dw_delta, dw_delta_ref) <= grad_tol * max_abs(dw_delta_ref));
    CHECK(to_host_vector<int32_t>(bad, 1)[0] == 1);
  }
}

TEST_CASE("fused linear cross-entropy kernel refuses a short workspace", "[kernels][lce][.cuda]") {
  DeviceBuffer buf(1024);
  const LinearCrossEntropyShape shape{8, 4, 16, 0, 0};
  CHECK_THROWS_WITH(linear_cross_entropy(KernelDtype::F32, buf.get(), buf.get(), buf.as<int64_t>(), shape, 1.0f,
                                         buf.as<float>(), nullptr, nullptr, buf.get(), 16, nullptr, nullptr),
                    Catch::Contains("workspace_bytes = 16"));
}
