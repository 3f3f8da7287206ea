// EmbedFunction and HeadFunction: the embedding lookup and the LM-head loss as autograd nodes over
// their flat groups (see head.h). defines: embedding_param_specs, head_param_specs,
// EmbedFunction, HeadFunction
#include "engine/model/head.h"

#include "engine/memory/tiled_loss.h"
#include "engine/ops/layers.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"
#include "engine/telemetry/planned_buffer_log.h"

namespace odyssey {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<ParamSpec> embedding_param_specs(const ModelConfig& m) {
  return {{"embedding", {m.vocab_size, m.d_model}, true, 0.02}};
}

std::vector<ParamSpec> head_param_specs(const ModelConfig& m) {
  std::vector<ParamSpec> specs;
  if (!m.tie_embeddings) specs.push_back({"lm_head", {m.vocab_size, m.d_model}, true, 0.02});
  specs.push_back({"final_norm", {m.d_model}, false, 0.0});
  return specs;
}

namespace {

StepRuntime* runtime_of(AutogradContext* ctx) { return reinterpret_cast<StepRuntime*>(ctx->saved_data["rt"].toInt()); }

// The head's weights: final norm from the head group, LM head from the head or embedding group.
struct HeadWeights {
  at::Tensor norm;  ///< [d]
  at::Tensor head;  ///< [V, d]
};

HeadWeights head_weights(const StepRuntime& rt) {
  const bool tied = rt.model->tie_embeddings;
  return {rt.head->view(tied ? 0 : 1), tied ? rt.embed->view(0) : rt.head->view(0)};
}

void unshard_head(const StepRuntime& rt) {
  rt.head->unshard();
  if (rt.model->tie_embeddings) rt.embed->unshard();
}

void reshard_head(const StepRuntime& rt) {
  rt.head->reshard();
  if (rt.model->tie_embeddings) rt.embed->reshard();
}

/// dense[ids[n]] += rows[n] for every token n: dense [V, d] fp32, ids [N], rows [N, d] fp32. On
/// CUDA through index_put_'s accumulating kernel, which sorts the ids and adds each row's
/// duplicates in one fixed order, so a rerun's fp32 gradient is equal bit for bit; index_add_'s
/// atomics there add in arrival order. Its extra memory is the sort's: a few [N] int64 tensors and
/// cub's scratch (a few MiB at 128K tokens), beside the rows' own fp32 copy. On the CPU index_add_
/// is serial, deterministic.
void add_embedding_rows(const at::Tensor& dense, const at::Tensor& ids, const at::Tensor& rows) {
  if (dense.is_cuda()) {
    c10::List<std::optional<at::Tensor>> index;
    index.push_back(ids);
    dense.index_put_(index, rows, /*accumulate=*/true);
  } else {
    dense.index_add_(0, ids, rows);
  }
}

}  // namespace

at::Tensor embed_tokens(StepRuntime& rt, const at::Tensor& ids) {
  rt.embed->unshard();
  at::Tensor x = at::embedding(rt.embed->view(0), ids);  // [B, s, d] compute dtype
  rt.embed->reshard();
  return x;
}

at::Tensor EmbedFunction::forward(AutogradContext* ctx, const at::Tensor& master, const at::Tensor& ids,
                                  StepRuntime* rt) {
  (void)master;
  RuntimeBinding binding(*rt);
  EnginePhase phase(rt->rank, "fwd/embed");
  ctx->saved_data["rt"] = reinterpret_cast<int64_t>(rt);
  ctx->save_for_backward({ids});
  // Block 0's input; block 0 retags it saved_activations when it keeps it as its checkpoint.
  CategoryScope category(MemCategory::Other);
  return embed_tokens(*rt, ids);  // [B, s, d]
}

variable_list EmbedFunction::backward(AutogradContext* ctx, variable_list grad_outputs) {
  StepRuntime* rt = runtime_of(ctx);
  RuntimeBinding binding(*rt);
  EnginePhase phase(rt->rank, "bwd/embed");
  const at::Tensor ids = ctx->get_saved_variables().at(0);
  const at::Tensor& dx = grad_outputs[0];  // [B, s, d]
  const int64_t V = rt->model->vocab_size, d = rt->model->d_model;
  at::Tensor flat, rows;
  {
    CategoryScope category(MemCategory::Other);
    flat = at::zeros({rt->embed->padded_numel()}, dx.options().dtype(at::kFloat));  // [padded] fp32 dense gradient
    note_planned_buffer(PlannedBuffer::EmbedPack, flat);
    rows = dx.reshape({-1, d}).to(at::kFloat);  // [B*s, d] fp32: a copy in bf16, dx itself in fp32
    if (rows.data_ptr() != dx.data_ptr()) note_planned_buffer(PlannedBuffer::EmbedGradRows32, rows);
  }
  add_embedding_rows(flat.narrow(0, 0, V * d).view({V, d}), ids.reshape(-1), rows);
  rows.reset();                                                  // freed before the reduction's buffers
  rt->embed->accumulate_gradient(rt->embed->reduce_flat(flat));  // [shard] fp32, not through autograd
  return {at::Tensor(), at::Tensor(), at::Tensor()};
}

at::Tensor HeadFunction::forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& master, StepRuntime* rt) {
  (void)master;
  RuntimeBinding binding(*rt);
  EnginePhase phase(rt->rank, "fwd/loss");
  ctx->saved_data["rt"] = reinterpret_cast<int64_t>(rt);
  const int64_t V = rt->model->vocab_size;
  unshard_head(*rt);
  const HeadWeights w = head_weights(*rt);
  CategoryScope category(MemCategory::LossWorkspace);
  if (rt->token_losses != nullptr) {  // forward only: per-position CE and argmax, no graph
    at::NoGradGuard no_grad;
    at::Tensor normed = rms_norm(x.detach(), w.norm, rt->model->norm_eps);  // [B, s, d]
    const int64_t tile = rt->stack->tiled_loss ? rt->loss_tile_tokens : 0;
    *rt->token_losses = token_losses_forward(normed, w.head, rt->labels, tile);
    at::Tensor loss = rt->token_losses->ce.sum() * rt->loss_scale;  // scalar: the training loss's value
    reshard_head(*rt);
    return loss;
  }
  at::AutoGradMode enable_grad(true);
  at::Tensor x_leaf = x.detach().requires_grad_(true);
  at::Tensor norm_leaf = w.norm.detach().requires_grad_(true);
  at::Tensor normed = rms_norm(x_leaf, norm_leaf, rt->model->norm_eps);  // [B, s, d] final norm output
  at::Tensor loss;
  if (rt->stack->tiled_loss) {
    // Backward inside forward, tile by tile; what survives is dx [B, s, d] and d(head) [V, d].
    LossOutputs out = tiled_loss_forward(normed.detach(), w.head, rt->labels, rt->answer_mask, rt->loss_scale,
                                         rt->loss_tile_tokens, &rt->answer);
    ctx->saved_data["root"] = normed;
    ctx->saved_data["leaves"] = std::vector<at::Tensor>{x_leaf, norm_leaf};
    ctx->saved_data["d_normed"] = out.dx;
    ctx->saved_data["d_head"] = out.d_head;
    loss = out.loss;
  } else {
    at::Tensor head_leaf = w.head.detach().requires_grad_(true);
    at::Tensor logits = head_logits(normed, head_leaf);  // [B, s, V] fp32: the memory tiling removes
    at::Tensor root = at::cross_entropy_loss(logits.reshape({-1, V}), rt->labels.reshape(-1), {}, at::Reduction::Sum) *
                      rt->loss_scale;
    accumulate_answer_stats(logits, rt->labels, rt->answer_mask, &rt->answer);
    ctx->saved_data["root"] = root;
    ctx->saved_data["leaves"] = std::vector<at::Tensor>{x_leaf, norm_leaf, head_leaf};
    loss = root.detach();
  }
  reshard_head(*rt);
  return loss;
}

variable_list HeadFunction::backward(AutogradContext* ctx, variable_list grad_outputs) {
  StepRuntime* rt = runtime_of(ctx);
  RuntimeBinding binding(*rt);
  const at::Tensor& g = grad_outputs[0];  // scalar, 1 when the loss is the root
  at::Tensor root = ctx->saved_data["root"].toTensor();
  auto leaves = ctx->saved_data["leaves"].toTensorVector();
  at::Tensor dx, d_norm, d_head;
  if (rt->stack->tiled_loss) {
    // The tiled forward already computed the gradients for an incoming 1: scale them and run the
    // final norm's backward.
    CategoryScope category(MemCategory::LossWorkspace);
    at::Tensor d_normed = ctx->saved_data["d_normed"].toTensor();
    d_head = ctx->saved_data["d_head"].toTensor();
    for (const char* key : {"root", "leaves", "d_normed", "d_head"}) ctx->saved_data.erase(key);
    d_normed.mul_(g.to(d_normed.scalar_type()));
    d_head.mul_(g);
    unshard_head(*rt);
    auto grads = torch::autograd::grad({root}, leaves, {d_normed}, /*retain_graph=*/false);
    dx = grads[0];
    d_norm = grads[1];
  } else {
    EnginePhase phase(rt->rank, "bwd/loss");
    CategoryScope category(MemCategory::LossWorkspace);
    for (const char* key : {"root", "leaves"}) ctx->saved_data.erase(key);
    unshard_head(*rt);
    auto grads = torch::autograd::grad({root}, leaves, {g}, /*retain_graph=*/false);
    dx = grads[0];
    d_norm = grads[1];
    d_head = grads[2];
  }
  root = at::Tensor();
  leaves.clear();
  // The reduced shards go into the gradients wherever they live (the host, offloaded), not
  // through autograd: every group's gradient takes one route.
  if (rt->model->tie_embeddings) {
    rt->head->accumulate_gradient(rt->head->reduce_gradients({d_norm}));
    rt->embed->accumulate_gradient(rt->embed->reduce_gradients({d_head}));  // the embedding's second contribution
  } else {
    rt->head->accumulate_gradient(rt->head->reduce_gradients({d_head, d_norm}));
  }
  reshard_head(*rt);
  return {dx, at::Tensor(), at::Tensor()};
}

}  // namespace odyssey
