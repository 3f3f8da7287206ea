// Tiled MLP: the block's SwiGLU MLP over sequence tiles, so the [tile, d_ffn] intermediates exist
// one tile at a time in forward and in backward. defines: TiledMlpFunction, tiled_mlp
#pragma once

#include <cstdint>

#include <torch/autograd.h>

namespace odyssey {

/// Custom Function with the weights as explicit inputs: forward runs without grad tile by tile
/// (saving only its inputs: the normed MLP input and the weights), backward recomputes each tile
/// and differentiates it by hand (no autograd graph per tile, no hook fires per tile), each
/// tile's weight-gradient products added in place into fp32 sums over the tiles
/// (engine/layout/tile_grad_rules.h: no [f, d] temporary per tile except bf16 on the CPU). A
/// tile covers `tile_tokens` positions of every sequence of the batch (dim 1).
/// compute_output = false (a checkpoint's recompute, which reads only the branch's gradient edge):
/// the forward saves its inputs and returns an uninitialised [B, s, d] without running a tile, since
/// the backward recomputes every tile anyway; the MLP's forward then runs twice a step, not three
/// times (a twelfth of a 1B step's FLOPs at 32K), and the memory is the same as the computed one.
struct TiledMlpFunction : public torch::autograd::Function<TiledMlpFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_gate,
                            const at::Tensor& w_up, const at::Tensor& w_down, int64_t tile_tokens, bool compute_output);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs);
};

/// swiglu_mlp(x, w_gate, w_up, w_down) over tiles of `tile_tokens`. x: [B, s, d] -> [B, s, d]
/// (uninitialised with compute_output = false: only its gradient edge may be used).
at::Tensor tiled_mlp(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down,
                     int64_t tile_tokens, bool compute_output = true);

}  // namespace odyssey
