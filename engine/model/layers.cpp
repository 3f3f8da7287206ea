// RMSNorm, rotary embeddings and the SwiGLU MLP as pure functions (see layers.h).
// defines: make_positions, rms_norm, apply_rope, swiglu_mlp
#include "engine/model/layers.h"

#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

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

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);                                      // [..., n] fp32
  at::Tensor inv = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);  // [..., 1]
  return (xf * inv).to(x.scalar_type()) * weight;                       // [..., n]
}

at::Tensor apply_rope(const at::Tensor& x, const Positions& pos) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor xf = x.to(at::kFloat);                  // [B, s, h, hd]
  at::Tensor x1 = xf.narrow(-1, 0, half);            // [B, s, h, hd/2]
  at::Tensor x2 = xf.narrow(-1, half, half);         // [B, s, h, hd/2]
  at::Tensor cos = pos.cos.unsqueeze(0).unsqueeze(2);  // [1, s, 1, hd/2]
  at::Tensor sin = pos.sin.unsqueeze(0).unsqueeze(2);  // [1, s, 1, hd/2]
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1).to(x.scalar_type());  // [B, s, h, hd]
}

at::Tensor swiglu_mlp(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up,
                      const at::Tensor& w_down) {
  at::Tensor gate = at::linear(x, w_gate);     // [..., f]
  at::Tensor up = at::linear(x, w_up);         // [..., f]
  return at::linear(at::silu(gate) * up, w_down);  // [..., d]
}

}  // namespace odyssey
