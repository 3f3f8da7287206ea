// The non-block ends of the decoder as autograd nodes: EmbedFunction (token embedding, inputs:
// embedding master shard) and HeadFunction (final norm + LM head + cross-entropy, untiled or
// tiled, inputs: x and the head master shard). defines: embedding_param_specs, head_param_specs,
// embed_tokens, EmbedFunction, HeadFunction
#pragma once

#include <cstdint>
#include <vector>

#include <torch/autograd.h>

#include "engine/parallel/flat_group.h"
#include "engine/model/step_runtime.h"

namespace odyssey {

/// Embedding group: the [V, d] matrix (normal std 0.02, weight decay).
std::vector<ParamSpec> embedding_param_specs(const ModelConfig& model);
/// Head group: lm_head [V, d] (untied only; normal std 0.02, weight decay), then final_norm [d].
std::vector<ParamSpec> head_param_specs(const ModelConfig& model);

/// The embedding rows of `ids` [B, s]: [B, s, d] in the compute dtype, the embedding group
/// gathered around the lookup. Block 0's input: EmbedFunction's forward, and block 0's backward
/// under offload, which looks it up again from the step's ids instead of a host copy
/// (offloaded_blocks, engine/layout/planned_buffers.h).
at::Tensor embed_tokens(StepRuntime& rt, const at::Tensor& ids);

/// x [B, s, d] = embedding rows of `ids` [B, s]. Phase fwd/embed; backward (phase bwd/embed)
/// scatters dx into a packed fp32 [V, d] gradient and reduces it into the shard.
struct EmbedFunction : public torch::autograd::Function<EmbedFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& master, const at::Tensor& ids,
                            StepRuntime* rt);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs);
};

/// loss_local = Σ CE(final_norm(x) @ head^T, labels) x loss_scale (scalar fp32). Phase fwd/loss.
/// Untiled: keeps the graph (final norm, logits and CE intermediates, category loss_workspace) and
/// runs its backward in phase bwd/loss. Tiled (memory.tiled_loss): the final norm's output goes
/// through the LM head and CE tile by tile with the backward inside the forward; it keeps the
/// final norm's graph, d(normed) [B, s, d] and d(head) [V, d]; backward scales them by the incoming
/// gradient and runs the final norm's backward (no phase of its own: it opens bwd/block.L-1).
/// With tied embeddings the LM head is the embedding matrix and its gradient is added to the
/// embedding group's gradient shard directly.
/// Forward only (rt->token_losses set, under no grad): each position's CE and argmax go there,
/// tile by tile when memory.tiled_loss, and loss_local is their sum x loss_scale; nothing is saved.
struct HeadFunction : public torch::autograd::Function<HeadFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& master,
                            StepRuntime* rt);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs);
};

}  // namespace odyssey
