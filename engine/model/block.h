// One decoder block = one autograd node (BlockFunction): inputs (x, the block's master shard),
// output y. Forward and backward run the attention and MLP halves as separate phases and handle
// unshard/reshard, checkpointing (+ offload) and gradient reduction. defines: ParamRole,
// block_param_specs, BlockWeights, BlockGraph, BlockFunction, run_block
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/autograd.h>

#include "engine/config/run_config.h"
#include "engine/model/attention.h"
#include "engine/parallel/flat_group.h"
#include "engine/ops/layers.h"
#include "engine/model/step_runtime.h"
#include "engine/parallel/comm.h"

namespace odyssey {

/// Flat-group layout of one block: matrices first (weight decay), norm weights last (none):
/// wq, wk, wv, wo, w_gate, w_up, w_down, attn_norm, mlp_norm[, q_norm, k_norm]. Init: normal
/// std 0.02, output projections (wo, w_down) 0.02 / sqrt(2 n_layers), norms ones.
std::vector<ParamSpec> block_param_specs(const ModelConfig& model);

/// A block's parameters as tensors (views of the group's `full`, or autograd leaves of them).
struct BlockWeights {
  AttentionWeights attn;
  at::Tensor attn_norm;  ///< [d]
  at::Tensor mlp_norm;   ///< [d]
  at::Tensor w_gate;     ///< [f, d]
  at::Tensor w_up;       ///< [f, d]
  at::Tensor w_down;     ///< [d, f]
  /// From tensors in block_param_specs order.
  static BlockWeights from_list(const std::vector<at::Tensor>& t, bool qk_norm);
  /// Tensors of the attention half / MLP half, with their index in block_param_specs order.
  std::vector<std::pair<size_t, at::Tensor>> attention_half() const;
  std::vector<std::pair<size_t, at::Tensor>> mlp_half() const;
};

/// The block's residual stream: h = x + attn(norm(x)); y = h + mlp(norm(h)). With grad enabled
/// on leaves it builds the two inner graphs split at h_leaf = h.detach(), rooted at the two
/// branch outputs attn(...) and mlp(...). Memory reason: a graph is kept by its root's gradient
/// edge, not by the root tensor, so neither branch output, h nor y stays alive for the backward
/// (the residual additions need no saved tensor; backward adds the gradients itself).
struct BlockGraph {
  at::Tensor x_leaf;                                ///< [B, s, d] input (leaf when keeping the graph)
  std::vector<at::Tensor> attn_leaves, mlp_leaves;  ///< parameter leaves of each half
  torch::autograd::Edge attn_root;                  ///< gradient edge of the attention branch output [B, s, d]
  at::Tensor h_leaf;                                ///< [B, s, d] h, detached (MLP half's input)
  torch::autograd::Edge mlp_root;                   ///< gradient edge of the MLP branch output [B, s, d]
  at::Tensor y;                                     ///< [B, s, d] block output (only when asked for: forward)
};

/// Custom autograd Function over one block; see docs/architecture.md "One block = one autograd
/// node". Returns y [B, s, d]; its backward returns {dx, d(master shard)}.
struct BlockFunction : public torch::autograd::Function<BlockFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& master,
                            StepRuntime* rt, int64_t layer);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs);
};

/// Runs one block with grad recording on parameter/input leaves (phases named by `phase_prefix`,
/// e.g. "fwd/block.3" gives ".../attn" and ".../mlp"; empty = no phases). need_output = false (the
/// recompute): no block output is made and a tiled MLP runs no tile (only its edge is read).
BlockGraph run_block(const at::Tensor& x, const FlatParamGroup& group, const StepRuntime& rt,
                     const std::string& phase_prefix, bool keep_graph, bool need_output = true);

}  // namespace odyssey
