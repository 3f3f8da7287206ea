// ops::linear_cross_entropy: LM head + cross-entropy + both gradients over sequence x vocabulary
// tiles with an online log-sum-exp (backward inside forward, as the tiled loss needs). On CUDA the
// fused kernel (cuBLAS on LibTorch's handle and stream, workspace from the caching allocator); else
// the same two-pass algorithm in LibTorch fp32 ops. Memory reason: no [T, V] logits ever exist,
// only one [seq_tile, vocab_tile] fp32 tile.
// defines: linear_cross_entropy
#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include "engine/ops/ops.h"
#include "engine/ops/ops_support.h"

#include "kernels/linear_cross_entropy_plan.h"
#ifdef ODYSSEY_WITH_CUDA
#include "kernels/linear_cross_entropy.h"
#endif

namespace odyssey::ops {
namespace {

constexpr int64_t kIgnore = -100;

// The first label outside [0, V) that is not -100, as an error naming its index and value.
void throw_first_bad_label(const at::Tensor& labels, int64_t vocab) {
  const at::Tensor bad = (labels != kIgnore) & ((labels < 0) | (labels >= vocab));
  const at::Tensor where = bad.nonzero();
  TORCH_CHECK(where.numel() == 0, "ops::linear_cross_entropy: labels[", where[0][0].item<int64_t>(),
              "] = ", labels[where[0][0].item<int64_t>()].item<int64_t>(), " must be in [0, ", vocab, ") or ", kIgnore);
}

LinearCrossEntropyResult reference_path(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                        double grad_scale, at::Tensor* dweight, bool compute_dhidden, int64_t seq_tile,
                                        int64_t vocab_tile) {
  throw_first_bad_label(labels, weight.size(0));
  const int64_t tokens = hidden.size(0), dim = hidden.size(1), vocab = weight.size(0);
  // the tiles as the fused kernel's plan takes them (kernels/linear_cross_entropy_plan.h)
  const int64_t st = std::min(seq_tile > 0 ? seq_tile : kernels::kLceDefaultTile, tokens);
  const int64_t vt_max = kernels::lce_vocab_tile(vocab, vocab_tile);
  const auto f32 = hidden.options().dtype(at::kFloat);
  at::Tensor loss = at::empty({tokens}, f32);                                      // [T]
  at::Tensor dh = compute_dhidden ? at::empty({tokens, dim}, f32) : at::Tensor();  // [T, d] fp32
  const bool backward = compute_dhidden || dweight != nullptr;
  for (int64_t t0 = 0; t0 < tokens; t0 += st) {
    const int64_t tt = std::min(st, tokens - t0);
    const at::Tensor h = hidden.narrow(0, t0, tt).to(at::kFloat);  // [tt, d]
    const at::Tensor lab = labels.narrow(0, t0, tt);               // [tt]
    const at::Tensor valid = lab != kIgnore;
    at::Tensor row_max = at::full({tt}, -std::numeric_limits<float>::infinity(), f32);
    at::Tensor row_sum = at::zeros({tt}, f32), target = at::zeros({tt}, f32);
    auto logits_tile = [&](int64_t v0, int64_t vt) {  // [tt, vt] fp32: the only logits alive
      return h.matmul(weight.narrow(0, v0, vt).to(at::kFloat).t());
    };
    auto label_in_tile = [&](int64_t v0, int64_t vt) {
      const at::Tensor in_tile = valid & (lab >= v0) & (lab < v0 + vt);
      const at::Tensor column = (lab - v0).clamp(0, vt - 1).unsqueeze(1);  // [tt, 1]
      return std::make_pair(in_tile, column);
    };
    for (int64_t v0 = 0; v0 < vocab; v0 += vt_max) {  // pass 1: online max / sum
      const int64_t vt = std::min(vt_max, vocab - v0);
      const at::Tensor z = logits_tile(v0, vt);
      const at::Tensor new_max = at::maximum(row_max, std::get<0>(z.max(1)));
      row_sum = row_sum * at::exp(row_max - new_max) + at::exp(z - new_max.unsqueeze(1)).sum(1);
      row_max = new_max;
      const auto [in_tile, column] = label_in_tile(v0, vt);
      target = at::where(in_tile, z.gather(1, column).squeeze(1), target);
    }
    const at::Tensor lse = row_max + at::log(row_sum);  // [tt]
    loss.narrow(0, t0, tt).copy_(at::where(valid, lse - target, at::zeros_like(lse)));
    if (!backward) continue;
    at::Tensor dh_tile = compute_dhidden ? dh.narrow(0, t0, tt).zero_() : at::Tensor();
    const at::Tensor row_scale = valid.to(at::kFloat).unsqueeze(1) * grad_scale;  // [tt, 1]
    for (int64_t v0 = 0; v0 < vocab; v0 += vt_max) {                              // pass 2: softmax gradient per tile
      const int64_t vt = std::min(vt_max, vocab - v0);
      at::Tensor grad = at::exp(logits_tile(v0, vt) - lse.unsqueeze(1));  // [tt, vt] softmax
      const auto [in_tile, column] = label_in_tile(v0, vt);
      grad.scatter_add_(1, column, -in_tile.to(at::kFloat).unsqueeze(1));
      grad.mul_(row_scale);
      const at::Tensor w = weight.narrow(0, v0, vt).to(at::kFloat);  // [vt, d]
      if (compute_dhidden) dh_tile.add_(grad.matmul(w));
      if (dweight) dweight->narrow(0, v0, vt).add_(grad.t().matmul(h));
    }
  }
  return {loss, compute_dhidden ? dh.to(hidden.scalar_type()) : at::Tensor()};
}

}  // namespace

LinearCrossEntropyResult linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                              const at::Tensor& labels, double grad_scale,
                                              at::Tensor* dweight_accumulator, bool compute_dhidden, int64_t seq_tile,
                                              int64_t vocab_tile, bool check_labels) {
  constexpr const char* op = "ops::linear_cross_entropy";
  detail::check_float_dtype(hidden, op, "hidden");
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && weight.size(1) == hidden.size(1), op,
              ": hidden must be [T, d] and weight [V, d], got ", hidden.sizes(), " and ", weight.sizes());
  TORCH_CHECK(weight.scalar_type() == hidden.scalar_type() && weight.device() == hidden.device(), op, ": weight is ",
              weight.scalar_type(), " on ", weight.device(), ", hidden ", hidden.scalar_type(), " on ", hidden.device(),
              "; they must match");
  TORCH_CHECK(labels.scalar_type() == at::kLong && labels.dim() == 1 && labels.size(0) == hidden.size(0) &&
                  labels.device() == hidden.device(),
              op, ": labels must be int64 [", hidden.size(0), "] on ", hidden.device(), ", got ", labels.scalar_type(),
              " ", labels.sizes(), " on ", labels.device());
  TORCH_CHECK(seq_tile >= 0 && vocab_tile >= 0, op, ": seq_tile = ", seq_tile, ", vocab_tile = ", vocab_tile,
              " must be >= 0 (0 = 8192)");
  if (dweight_accumulator) {
    const at::Tensor& dw = *dweight_accumulator;
    TORCH_CHECK(dw.scalar_type() == at::kFloat && dw.sizes() == weight.sizes() && dw.is_contiguous() &&
                    dw.device() == hidden.device(),
                op, ": the dweight accumulator must be a contiguous float32 ", weight.sizes(), " tensor on ",
                hidden.device(), ", got ", dw.scalar_type(), " ", dw.sizes());
  }
  if (hidden.size(0) == 0) {
    return {at::empty({0}, hidden.options().dtype(at::kFloat)),
            compute_dhidden ? at::empty_like(hidden) : at::Tensor()};
  }
#ifdef ODYSSEY_WITH_CUDA
  if (hidden.is_cuda()) {
    const c10::cuda::CUDAGuard guard(hidden.device());
    const kernels::KernelDtype dtype = detail::kernel_dtype(hidden);
    const kernels::LinearCrossEntropyShape shape{hidden.size(0), hidden.size(1), weight.size(0), seq_tile, vocab_tile};
    const kernels::LceTilePlan plan = kernels::plan_linear_cross_entropy(dtype, shape);
    const at::Tensor h = hidden.contiguous(), w = weight.contiguous(), lab = labels.contiguous();
    at::Tensor workspace = at::empty({static_cast<int64_t>(plan.bytes)}, hidden.options().dtype(at::kByte));
    at::Tensor loss = at::empty({hidden.size(0)}, hidden.options().dtype(at::kFloat));  // [T]
    at::Tensor dh = compute_dhidden ? at::empty_like(h) : at::Tensor();                 // [T, d]
    at::Tensor bad = at::zeros({1}, hidden.options().dtype(at::kInt));
    kernels::linear_cross_entropy(
        dtype, h.data_ptr(), w.data_ptr(), lab.data_ptr<int64_t>(), shape, static_cast<float>(grad_scale),
        loss.data_ptr<float>(), compute_dhidden ? dh.data_ptr() : nullptr,
        dweight_accumulator ? dweight_accumulator->data_ptr<float>() : nullptr, workspace.data_ptr(), plan.bytes,
        bad.data_ptr<int32_t>(), detail::current_stream(hidden), at::cuda::getCurrentCUDABlasHandle());
    if (check_labels && bad.item<int32_t>() != 0)
      throw_first_bad_label(labels, weight.size(0));  // syncs; names the label
    return {loss, dh};
  }
#endif
  return reference_path(hidden, weight, labels, grad_scale, dweight_accumulator, compute_dhidden, seq_tile, vocab_tile);
}

}  // namespace odyssey::ops
