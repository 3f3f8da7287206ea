// RMSNorm, rotary embeddings and the SwiGLU MLP as pure functions (see layers.h): RMSNorm and
// RoPE are autograd nodes of their own so that autograd keeps only what their backward needs.
// defines: make_positions, rms_norm, apply_rope, rope_rotate, swiglu_mlp
#include "engine/model/layers.h"

#include <torch/autograd.h>

#include "engine/ops/ops.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Positions make_positions(int64_t first, int64_t count, int64_t head_dim, double theta, at::Device device) {
  CategoryScope category(MemCategory::Other);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  Positions p;
  at::Tensor ids = at::arange(first, first + count, at::TensorOptions().dtype(at::kLong));  // [s]
  at::Tensor inv_freq =
      at::pow(theta, -at::arange(0, head_dim, 2, f64) / static_cast<double>(head_dim));  // [hd/2]
  at::Tensor angles = ids.to(at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);        // [s, hd/2]
  p.ids = ids.to(device);
  p.cos = angles.cos().to(at::kFloat).to(device);  // [s, hd/2]
  p.sin = angles.sin().to(at::kFloat).to(device);  // [s, hd/2]
  return p;
}

namespace {

// [SECTION] RMSNorm ------------------------------------------------------------------------------

/// 1/rms over the last dim, [..., 1] fp32. The 2-norm is a reduction that reads x as it is: no
/// temporary of x's size for fp32 x (and none on CUDA for bf16; a CPU bf16 x is cast first).
at::Tensor inverse_rms(const at::Tensor& x, double eps) {
  at::Tensor r = at::linalg_vector_norm(x, 2, {-1}, /*keepdim=*/true, at::kFloat);  // [..., 1]
  return r.pow_(2).div_(static_cast<double>(x.size(-1))).add_(eps).rsqrt_();
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    at::Tensor y, rstd;
    if (ops::uses_cuda_kernel(x)) {
      std::tie(y, rstd) = ops::rmsnorm_forward(x, weight, eps);  // y like x, rstd [rows] fp32
      std::vector<int64_t> shape = x.sizes().vec();
      shape.back() = 1;
      rstd = rstd.view(shape);  // [..., 1]
    } else {
      rstd = inverse_rms(x, eps);  // [..., 1] fp32
      y = at::empty_like(x);       // [..., n] like x
      at::mul_out(y, x, rstd);     // x * 1/rms computed in fp32, rounded once to x's dtype
      y.mul_(weight);
    }
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const at::Tensor& dy = grads[0];
    if (ops::uses_cuda_kernel(x)) {
      auto [dx, dw] = ops::rmsnorm_backward(dy, x, weight, rstd.reshape(-1));
      return {dx, dw.to(weight.scalar_type()), at::Tensor()};
    }
    // n = x/rms; dw = sum(dy * n); dx = (dy*w - n * mean(dy*w*n)) / rms. Memory: two fp32
    // tensors of x's size (n, then the product), reused in place.
    const int64_t d = x.size(-1);
    at::Tensor n = at::mul(x, rstd);    // [..., d] fp32
    at::Tensor t = at::mul(dy, n);      // [..., d] fp32: dy * n
    at::Tensor dw = t.reshape({-1, d}).sum(0);  // [d] fp32
    t.mul_(weight);                      // dy * w * n
    const at::Tensor mean = t.sum(-1, /*keepdim=*/true).div_(static_cast<double>(d));  // [..., 1]
    t.reset();
    n.mul_(mean).neg_().addcmul_(dy, weight).mul_(rstd);  // dx in fp32, in n's memory
    return {n.to(x.scalar_type()), dw.to(weight.scalar_type()), at::Tensor()};
  }
};

// [SECTION] RoPE -------------------------------------------------------------------------------

/// out = rotate(x) by the tables: first half x1*cos - sign*x2*sin, second half x2*cos +
/// sign*x1*sin (sign -1 is the inverse rotation, RoPE's backward). Only `out` is allocated.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double sign) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor c = cos.unsqueeze(0).unsqueeze(2);  // [1, s, 1, hd/2]
  const at::Tensor sn = sin.unsqueeze(0).unsqueeze(2);  // [1, s, 1, hd/2]
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);  // [B, s, h, hd/2] views
  at::Tensor out = at::empty(x.sizes(), x.options());  // [B, s, h, hd] contiguous
  at::Tensor o1 = out.narrow(-1, 0, half), o2 = out.narrow(-1, half, half);
  at::mul_out(o1, x1, c);
  o1.addcmul_(x2, sn, -sign);
  at::mul_out(o2, x2, c);
  o2.addcmul_(x1, sn, sign);
  return out;
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});  // the tables only: x is not needed to rotate back
    return rotate(x, cos, sin, 1.0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rotate(grads[0], saved[0], saved[1], -1.0), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor apply_rope(const at::Tensor& x, const Positions& pos) { return RopeFunction::apply(x, pos.cos, pos.sin); }

at::Tensor rope_rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse) {
  return rotate(x, cos, sin, inverse ? -1.0 : 1.0);
}

at::Tensor swiglu_mlp(at::Tensor x, const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down) {
  at::Tensor gate = at::linear(x, w_gate);  // [..., f]
  at::Tensor up = at::linear(x, w_up);      // [..., f]
  const bool records = at::GradMode::is_enabled() &&
                       (x.requires_grad() || w_gate.requires_grad() || w_up.requires_grad() || w_down.requires_grad());
  if (records) return at::linear(at::silu(gate) * up, w_down);  // [..., d]
  x.reset();  // memory: the input dies here when the caller moved it in
  at::silu_(gate);
  gate.mul_(up);  // silu(gate) * up in gate's memory
  up.reset();
  return at::linear(gate, w_down);  // [..., d]
}

}  // namespace odyssey
