// TiledMlpFunction: per-tile forward without grad; in backward each tile recomputed and
// differentiated by hand, its weight gradients accumulated in place (see tiled_mlp.h).
// defines: TiledMlpFunction, tiled_mlp
#include "engine/memory/tiled_mlp.h"

#include <stdexcept>
#include <string>

#include "engine/ops/layers.h"
#include "engine/ops/ops.h"
#include "engine/telemetry/planned_buffer_log.h"

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
  // The SwiGLU's backward written out per tile: gate = x Wg^T, up = x Wu^T, h = silu(gate) * up,
  // y = h Wd^T; dWd += dy^T h, dh = dy Wd, d up = dh * silu(gate), d gate = silu'(gate) * dh * up
  // (ops::swiglu_backward_), dWu += (d up)^T x, dWg += (d gate)^T x, dx = (d up) Wu + (d gate) Wg.
  // Memory: one tile's [B n, f] intermediates, three at a time (four on the CPU), freed as soon as
  // read; the weight gradients accumulate in place (tile_grad_rules.h), not three [f, d] per tile.
  at::NoGradGuard no_grad;
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor &w_gate = saved[1], &w_up = saved[2], &w_down = saved[3];
  const int64_t tile = ctx->saved_data["tile"].toInt();
  const at::Tensor grad_out = grad_outputs[0];
  const int64_t B = x.size(0), s = x.size(1), d = x.size(2);
  const bool fp32 = w_gate.scalar_type() == at::kFloat;

  at::Tensor dx = at::empty_like(x);  // [B, s, d]
  // [f, d], [f, d], [d, f] sums over the tiles in fp32: the gradients themselves for fp32 weights
  const auto sum_options = w_gate.options().dtype(at::kFloat);
  at::Tensor d_gate_w = at::zeros(w_gate.sizes(), sum_options), d_up_w = at::zeros(w_up.sizes(), sum_options),
             d_down_w = at::zeros(w_down.sizes(), sum_options);
  for (int64_t off = 0; off < s; off += tile) {
    const int64_t n = std::min(tile, s - off);
    const at::Tensor xt = x.narrow(1, off, n).flatten(0, 1);          // [B n, d] (a view when B = 1)
    const at::Tensor dyt = grad_out.narrow(1, off, n).flatten(0, 1);  // [B n, d]
    at::Tensor gate = at::mm(xt, w_gate.t());                         // [B n, f]
    note_planned_buffer(PlannedBuffer::MlpGate, gate);
    at::Tensor up = at::mm(xt, w_up.t());           // [B n, f]
    at::Tensor h = ops::swiglu_forward(gate, up);   // [B n, f]
    add_weight_grad_product(d_down_w, dyt.t(), h);  // [d, f] += [d, B n] @ [B n, f]
    h.reset();
    at::Tensor dh = at::mm(dyt, w_down);  // [B n, f]
    // d gate in gate's memory, d up in up's (on the CPU in one new [B n, f]; up's then dies)
    auto [d_gate, d_up] = ops::swiglu_backward_(dh, gate, up);
    dh.reset();
    gate.reset();
    up.reset();
    add_weight_grad_product(d_up_w, d_up.t(), xt);      // [f, d] += [f, B n] @ [B n, d]
    add_weight_grad_product(d_gate_w, d_gate.t(), xt);  // [f, d]
    at::Tensor dxt = at::mm(d_up, w_up);                // [B n, d]
    dxt.addmm_(d_gate, w_gate);
    d_up.reset();
    d_gate.reset();
    dx.narrow(1, off, n).copy_(dxt.view({B, n, d}));
  }
  variable_list result{dx};
  for (at::Tensor* sum : {&d_gate_w, &d_up_w, &d_down_w})
    result.push_back(fp32 ? *sum : sum->to(w_gate.scalar_type()));  // the compute-dtype gradients
  result.push_back(at::Tensor());                                   // tile_tokens
  result.push_back(at::Tensor());                                   // compute_output
  return result;
}

at::Tensor tiled_mlp(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down,
                     int64_t tile_tokens, bool compute_output) {
  return TiledMlpFunction::apply(x, w_gate, w_up, w_down, tile_tokens, compute_output);
}

}  // namespace odyssey
