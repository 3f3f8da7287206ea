// ops::rope_pack / rope_unpack_backward: RoPE fused with the Untied Ulysses head-chunk packing. On
// CUDA one kernel reads the stage's heads and writes the rotated values straight into the
// all-to-all send buffer; elsewhere LibTorch ops do the same (select heads, rotate with float64
// angles, permute into the rank-major layout).
// defines: rope_pack, rope_pack_out, rope_unpack_backward
#include <torch/torch.h>

#include "engine/ops/ops.h"
#include "engine/ops/ops_support.h"

#ifdef ODYSSEY_WITH_CUDA
#include "kernels/rope_pack.h"
#endif

namespace odyssey::ops {
namespace {

struct StageGeometry {
  int64_t batch, seq, heads, head_dim, per_rank, distinct;
};

StageGeometry check_stage(const at::Tensor& x_like, const at::Tensor& positions, const RopeStage& st,
                          const std::optional<at::Tensor>& inv_freq, double theta, const char* op) {
  detail::check_float_dtype(x_like, op, "x");
  TORCH_CHECK(x_like.dim() == 4, op, ": x must be [B, s, H, hd], got ", x_like.sizes());
  const int64_t batch = x_like.size(0), seq = x_like.size(1), heads = x_like.size(2), hd = x_like.size(3);
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.dim() == 2 && positions.size(0) == batch &&
                  positions.size(1) == seq,
              op, ": positions must be int64 [", batch, ", ", seq, "], got ", positions.scalar_type(), " ",
              positions.sizes());
  TORCH_CHECK(positions.device() == x_like.device(), op, ": positions on ", positions.device(), ", x on ",
              x_like.device());
  TORCH_CHECK(hd % 2 == 0, op, ": head_dim = ", hd, " must be even");
  TORCH_CHECK(st.ranks > 0 && st.stage_heads > 0 && st.stage_heads % st.ranks == 0, op,
              ": stage_heads = ", st.stage_heads, " must be a positive multiple of ranks = ", st.ranks);
  TORCH_CHECK(st.head_repeat > 0 && st.stage_heads % st.head_repeat == 0 && st.head_stride > 0, op,
              ": head_repeat = ", st.head_repeat, " must divide stage_heads = ", st.stage_heads,
              " and head_stride = ", st.head_stride, " must be positive");
  const int64_t distinct = st.stage_heads / st.head_repeat;
  const int64_t last = st.head_begin + (distinct - 1) * st.head_stride;
  TORCH_CHECK(st.head_begin >= 0 && last < heads, op, ": stage heads ", st.head_begin, "..", last, " must lie in [0, ",
              heads, ")");
  if (inv_freq) {
    TORCH_CHECK(
        inv_freq->scalar_type() == at::kFloat && inv_freq->numel() == hd / 2 && inv_freq->device() == x_like.device(),
        op, ": inv_freq must be float32 [", hd / 2, "] on ", x_like.device(), ", got ", inv_freq->scalar_type(), " ",
        inv_freq->sizes(), " on ", inv_freq->device());
  } else {
    TORCH_CHECK(theta > 1.0, op, ": theta = ", theta, " must exceed 1");
  }
  return {batch, seq, heads, hd, st.stage_heads / st.ranks, distinct};
}

// cos and sin of positions * inv_freq: [B, s, 1, hd/2] float32, angles computed in float64.
std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& positions, int64_t hd, double theta,
                                         const std::optional<at::Tensor>& inv_freq) {
  const auto f64 = positions.options().dtype(at::kDouble);
  const at::Tensor freq =
      inv_freq ? inv_freq->to(at::kDouble)
               : at::pow(theta, -at::arange(0, hd / 2, f64) * (2.0 / static_cast<double>(hd)));  // [hd/2]
  const at::Tensor angle = positions.to(at::kDouble).unsqueeze(-1).unsqueeze(-1) * freq;         // [B, s, 1, hd/2]
  return {at::cos(angle).to(at::kFloat), at::sin(angle).to(at::kFloat)};
}

// Input head of stage head i, and the distinct heads in stage order.
at::Tensor stage_heads_index(const RopeStage& st, const at::Device& device) {
  const at::Tensor i = at::arange(st.stage_heads, at::TensorOptions().dtype(at::kLong).device(device));
  return st.head_begin + at::div(i, st.head_repeat, "floor") * st.head_stride;  // [stage_heads]
}

at::Tensor distinct_heads_index(const RopeStage& st, int64_t distinct, const at::Device& device) {
  return st.head_begin + at::arange(distinct, at::TensorOptions().dtype(at::kLong).device(device)) * st.head_stride;
}

#ifdef ODYSSEY_WITH_CUDA
kernels::RopePackShape kernel_shape(const StageGeometry& g, const RopeStage& st) {
  kernels::RopePackShape s;
  s.batch = g.batch, s.seq = g.seq, s.heads = g.heads, s.head_dim = g.head_dim, s.ranks = st.ranks;
  s.stage_heads = st.stage_heads, s.head_begin = st.head_begin, s.head_stride = st.head_stride;
  s.head_repeat = st.head_repeat;
  return s;
}
#endif

}  // namespace

at::Tensor rope_pack(const at::Tensor& x, const at::Tensor& positions, double theta, const RopeStage& stage,
                     const std::optional<at::Tensor>& inv_freq) {
  const StageGeometry g = check_stage(x, positions, stage, inv_freq, theta, "ops::rope_pack");
  at::Tensor send = at::empty({stage.ranks, g.batch, g.seq, g.per_rank, g.head_dim}, x.options());  // [P,B,s,m,hd]
  rope_pack_out(send, x, positions, theta, stage, inv_freq);
  return send;
}

void rope_pack_out(at::Tensor& send, const at::Tensor& x, const at::Tensor& positions, double theta,
                   const RopeStage& stage, const std::optional<at::Tensor>& inv_freq) {
  const StageGeometry g = check_stage(x, positions, stage, inv_freq, theta, "ops::rope_pack_out");
  const std::vector<int64_t> expected = {stage.ranks, g.batch, g.seq, g.per_rank, g.head_dim};
  TORCH_CHECK(send.sizes() == at::IntArrayRef(expected) && send.scalar_type() == x.scalar_type() &&
                  send.is_contiguous() && send.device() == x.device(),
              "ops::rope_pack_out: send must be a contiguous ", x.scalar_type(), " tensor ", at::IntArrayRef(expected),
              " on ", x.device(), ", got ", send.scalar_type(), " ", send.sizes());
#ifdef ODYSSEY_WITH_CUDA
  if (x.is_cuda()) {
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xc = x.contiguous(), pc = positions.contiguous();
    const at::Tensor fc = inv_freq ? inv_freq->contiguous() : at::Tensor();
    kernels::rope_pack_forward(detail::kernel_dtype(x), xc.data_ptr(), pc.data_ptr<int64_t>(),
                               inv_freq ? fc.data_ptr<float>() : nullptr, theta, kernel_shape(g, stage),
                               send.data_ptr(), detail::current_stream(x));
    return;
  }
#endif
  const auto [cos, sin] = rotary(positions, g.head_dim, theta, inv_freq);                        // [B, s, 1, hd/2]
  const at::Tensor xs = x.index_select(2, stage_heads_index(stage, x.device())).to(at::kFloat);  // [B,s,h,hd]
  const at::Tensor a = xs.narrow(-1, 0, g.head_dim / 2), z = xs.narrow(-1, g.head_dim / 2, g.head_dim / 2);
  const at::Tensor rotated = at::cat({a * cos - z * sin, z * cos + a * sin}, -1);  // [B, s, h, hd]
  send.copy_(rotated.view({g.batch, g.seq, stage.ranks, g.per_rank, g.head_dim}).permute({2, 0, 1, 3, 4}));
}

void rope_unpack_backward(at::Tensor& dx, const at::Tensor& dsend, const at::Tensor& positions, double theta,
                          const RopeStage& stage, bool accumulate, const std::optional<at::Tensor>& inv_freq) {
  const StageGeometry g = check_stage(dx, positions, stage, inv_freq, theta, "ops::rope_unpack_backward");
  TORCH_CHECK(dx.is_contiguous(), "ops::rope_unpack_backward: dx must be contiguous (it is written in place)");
  const std::vector<int64_t> expected = {stage.ranks, g.batch, g.seq, g.per_rank, g.head_dim};
  TORCH_CHECK(dsend.sizes() == at::IntArrayRef(expected) && dsend.device() == dx.device(),
              "ops::rope_unpack_backward: dsend must be ", at::IntArrayRef(expected), " on ", dx.device(), ", got ",
              dsend.sizes(), " on ", dsend.device());
#ifdef ODYSSEY_WITH_CUDA
  if (dx.is_cuda()) {
    const c10::cuda::CUDAGuard guard(dx.device());
    const at::Tensor gc = dsend.to(dx.scalar_type()).contiguous(), pc = positions.contiguous();
    const at::Tensor fc = inv_freq ? inv_freq->contiguous() : at::Tensor();
    kernels::rope_pack_backward(detail::kernel_dtype(dx), gc.data_ptr(), pc.data_ptr<int64_t>(),
                                inv_freq ? fc.data_ptr<float>() : nullptr, theta, kernel_shape(g, stage), dx.data_ptr(),
                                accumulate, detail::current_stream(dx));
    return;
  }
#endif
  const auto [cos, sin] = rotary(positions, g.head_dim, theta, inv_freq);  // [B, s, 1, hd/2]
  const at::Tensor gs =
      dsend.to(at::kFloat).permute({1, 2, 0, 3, 4}).reshape({g.batch, g.seq, stage.stage_heads, g.head_dim});
  const at::Tensor ga = gs.narrow(-1, 0, g.head_dim / 2), gz = gs.narrow(-1, g.head_dim / 2, g.head_dim / 2);
  const at::Tensor unrotated = at::cat({ga * cos + gz * sin, gz * cos - ga * sin}, -1);  // [B, s, h, hd]
  // Replicated stage heads (consecutive head_repeat of them) sum into their input head.
  at::Tensor per_head = unrotated.view({g.batch, g.seq, g.distinct, stage.head_repeat, g.head_dim}).sum(3);
  const at::Tensor heads = distinct_heads_index(stage, g.distinct, dx.device());
  if (accumulate) per_head = per_head + dx.index_select(2, heads).to(at::kFloat);
  dx.index_copy_(2, heads, per_head.to(dx.scalar_type()));
}

}  // namespace odyssey::ops
