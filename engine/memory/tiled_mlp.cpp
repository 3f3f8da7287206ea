// TiledMlpFunction: per-tile forward without grad, per-tile recompute + local dW accumulation in
// backward (see tiled_mlp.h). defines: TiledMlpFunction, tiled_mlp
#include "engine/memory/tiled_mlp.h"

#include <stdexcept>
#include <string>

#include "engine/ops/layers.h"

namespace odyssey {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor TiledMlpFunction::forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_gate,
                                     const at::Tensor& w_up, const at::Tensor& w_down, int64_t tile_tokens,
                                     bool compute_output) {
  if (tile_tokens <= 0) throw std::invalid_argument("tiled MLP: tile_tokens = " + std::to_string(tile_tokens));
  ctx->save_for_backward({x, w_gate, w_up, w_down});
  ctx->saved_data["tile"] = tile_tokens;
  const int64_t s = x.size(1);
  at::Tensor out = at::empty({x.size(0), s, w_down.size(0)}, x.options());  // [B, s, d]
  if (!compute_output) return out;  // a recompute: the backward runs every tile's forward itself
  for (int64_t off = 0; off < s; off += tile_tokens) {
    const int64_t n = std::min(tile_tokens, s - off);
    // Memory: only this tile's [B, n, f] gate/up/product exist at a time.
    out.narrow(1, off, n).copy_(swiglu_mlp(x.narrow(1, off, n), w_gate, w_up, w_down));
  }
  return out;
}

variable_list TiledMlpFunction::backward(AutogradContext* ctx, variable_list grad_outputs) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const int64_t tile = ctx->saved_data["tile"].toInt();
  const at::Tensor grad_out = grad_outputs[0];
  const int64_t s = x.size(1);

  at::Tensor dx = at::empty_like(x);  // [B, s, d]
  std::vector<at::Tensor> weights;
  std::vector<at::Tensor> dweights(saved.size() - 1);  // fp32 [f, d] accumulators (the first tile's gradients)
  for (size_t i = 1; i < saved.size(); ++i) weights.push_back(saved[i].detach().requires_grad_(true));
  for (int64_t off = 0; off < s; off += tile) {
    const int64_t n = std::min(tile, s - off);
    variable_list grads;
    {
      at::AutoGradMode enable_grad(true);
      at::Tensor x_tile = x.narrow(1, off, n).detach().requires_grad_(true);  // [B, n, d]
      at::Tensor m_tile = swiglu_mlp(x_tile, weights[0], weights[1], weights[2]);  // [B, n, d]
      grads = torch::autograd::grad({m_tile}, {x_tile, weights[0], weights[1], weights[2]},
                                    {grad_out.narrow(1, off, n)});
    }
    dx.narrow(1, off, n).copy_(grads[0]);
    for (size_t k = 0; k < dweights.size(); ++k) {
      if (dweights[k].defined())
        dweights[k].add_(grads[k + 1]);
      else
        dweights[k] = grads[k + 1].to(at::kFloat);  // fp32 weights: the tile's gradient itself, no copy
    }
  }
  variable_list result{dx};
  for (size_t k = 0; k < dweights.size(); ++k) result.push_back(dweights[k].to(saved[k + 1].scalar_type()));
  result.push_back(at::Tensor());  // tile_tokens
  result.push_back(at::Tensor());  // compute_output
  return result;
}

at::Tensor tiled_mlp(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down,
                     int64_t tile_tokens, bool compute_output) {
  return TiledMlpFunction::apply(x, w_gate, w_up, w_down, tile_tokens, compute_output);
}

}  // namespace odyssey
