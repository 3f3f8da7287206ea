// TiledMlpFunction: per-tile forward without grad, per-tile recompute + local dW accumulation in
// backward (see tiled_mlp.h). defines: TiledMlpFunction, tiled_mlp
#include "engine/memory/tiled_mlp.h"

#include <stdexcept>
#include <string>

#include "engine/model/layers.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor TiledMlpFunction::forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& norm_weight,
                                     const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down,
                                     double eps, int64_t tile_tokens) {
  if (tile_tokens <= 0) throw std::invalid_argument("tiled MLP: tile_tokens = " + std::to_string(tile_tokens));
  ctx->save_for_backward({h, norm_weight, w_gate, w_up, w_down});
  ctx->saved_data["eps"] = eps;
  ctx->saved_data["tile"] = tile_tokens;
  const int64_t s = h.size(1);
  at::Tensor out = at::empty_like(h);  // [B, s, d]
  for (int64_t off = 0; off < s; off += tile_tokens) {
    const int64_t n = std::min(tile_tokens, s - off);
    // Memory: only this tile's [B, n, f] gate/up/product exist at a time.
    out.narrow(1, off, n).copy_(swiglu_mlp(rms_norm(h.narrow(1, off, n), norm_weight, eps), w_gate, w_up, w_down));
  }
  return out;
}

variable_list TiledMlpFunction::backward(AutogradContext* ctx, variable_list grad_outputs) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& h = saved[0];
  const double eps = ctx->saved_data["eps"].toDouble();
  const int64_t tile = ctx->saved_data["tile"].toInt();
  const at::Tensor grad_out = grad_outputs[0];
  const int64_t s = h.size(1);

  at::Tensor dh = at::empty_like(h);  // [B, s, d]
  std::vector<at::Tensor> weights, dweights;
  for (size_t i = 1; i < saved.size(); ++i) {
    weights.push_back(saved[i].detach().requires_grad_(true));
    dweights.push_back(at::zeros(saved[i].sizes(), saved[i].options().dtype(at::kFloat)));  // fp32 accumulators
  }
  for (int64_t off = 0; off < s; off += tile) {
    const int64_t n = std::min(tile, s - off);
    variable_list grads;
    {
      at::AutoGradMode enable_grad(true);
      at::Tensor h_tile = h.narrow(1, off, n).detach().requires_grad_(true);  // [B, n, d]
      at::Tensor m_tile = swiglu_mlp(rms_norm(h_tile, weights[0], eps), weights[1], weights[2], weights[3]);
      grads = torch::autograd::grad({m_tile}, {h_tile, weights[0], weights[1], weights[2], weights[3]},
                                    {grad_out.narrow(1, off, n)});
    }
    dh.narrow(1, off, n).copy_(grads[0]);
    for (size_t k = 0; k < dweights.size(); ++k) dweights[k].add_(grads[k + 1]);
  }
  variable_list result{dh};
  for (size_t k = 0; k < dweights.size(); ++k) result.push_back(dweights[k].to(saved[k + 1].scalar_type()));
  result.push_back(at::Tensor());  // eps
  result.push_back(at::Tensor());  // tile_tokens
  return result;
}

at::Tensor tiled_mlp(const at::Tensor& h, const at::Tensor& norm_weight, const at::Tensor& w_gate,
                     const at::Tensor& w_up, const at::Tensor& w_down, double eps, int64_t tile_tokens) {
  return TiledMlpFunction::apply(h, norm_weight, w_gate, w_up, w_down, eps, tile_tokens);
}

}  // namespace odyssey
