// BlockFunction: one decoder block as one autograd node, with the attention and MLP halves as
// separate phases, checkpointing (+ offload of its input), unshard/reshard around forward and
// backward and the packed gradient reduction. defines: block_param_specs, BlockWeights, run_block,
// BlockFunction
#include "engine/model/block.h"

#include <cmath>
#include <optional>

#include "engine/memory/checkpoint.h"
#include "engine/memory/offload.h"
#include "engine/memory/tiled_mlp.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"
#include "engine/telemetry/tensor_tags.h"

namespace odyssey {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {
// Indices in block_param_specs order.
enum BlockParam : size_t { kWq, kWk, kWv, kWo, kWGate, kWUp, kWDown, kAttnNorm, kMlpNorm, kQNorm, kKNorm };
}  // namespace

std::vector<ParamSpec> block_param_specs(const ModelConfig& m) {
  const double std_in = 0.02;
  const double std_out = 0.02 / std::sqrt(2.0 * static_cast<double>(m.n_layers));
  std::vector<ParamSpec> specs = {
      {"wq", {m.q_dim(), m.d_model}, true, std_in},      {"wk", {m.kv_dim(), m.d_model}, true, std_in},
      {"wv", {m.kv_dim(), m.d_model}, true, std_in},     {"wo", {m.d_model, m.q_dim()}, true, std_out},
      {"w_gate", {m.d_ffn, m.d_model}, true, std_in},    {"w_up", {m.d_ffn, m.d_model}, true, std_in},
      {"w_down", {m.d_model, m.d_ffn}, true, std_out},   {"attn_norm", {m.d_model}, false, 0.0},
      {"mlp_norm", {m.d_model}, false, 0.0},
  };
  if (m.qk_norm) {
    specs.push_back({"q_norm", {m.head_dim}, false, 0.0});
    specs.push_back({"k_norm", {m.head_dim}, false, 0.0});
  }
  return specs;
}

BlockWeights BlockWeights::from_list(const std::vector<at::Tensor>& t, bool qk_norm) {
  BlockWeights w;
  w.attn.wq = t[kWq];
  w.attn.wk = t[kWk];
  w.attn.wv = t[kWv];
  w.attn.wo = t[kWo];
  if (qk_norm) {
    w.attn.q_norm = t[kQNorm];
    w.attn.k_norm = t[kKNorm];
  }
  w.attn_norm = t[kAttnNorm];
  w.mlp_norm = t[kMlpNorm];
  w.w_gate = t[kWGate];
  w.w_up = t[kWUp];
  w.w_down = t[kWDown];
  return w;
}

std::vector<std::pair<size_t, at::Tensor>> BlockWeights::attention_half() const {
  std::vector<std::pair<size_t, at::Tensor>> out = {
      {kAttnNorm, attn_norm}, {kWq, attn.wq}, {kWk, attn.wk}, {kWv, attn.wv}, {kWo, attn.wo}};
  if (attn.q_norm.defined()) {
    out.emplace_back(kQNorm, attn.q_norm);
    out.emplace_back(kKNorm, attn.k_norm);
  }
  return out;
}

std::vector<std::pair<size_t, at::Tensor>> BlockWeights::mlp_half() const {
  return {{kMlpNorm, mlp_norm}, {kWGate, w_gate}, {kWUp, w_up}, {kWDown, w_down}};
}

BlockGraph run_block(const at::Tensor& x, const FlatParamGroup& group, const StepRuntime& rt,
                     const std::string& phase_prefix, bool keep_graph) {
  const ModelConfig& model = *rt.model;
  auto leaf = [&](const at::Tensor& t) { return keep_graph ? t.detach().requires_grad_(true) : t; };
  std::vector<at::Tensor> params;
  for (const auto& v : group.views()) params.push_back(leaf(v));
  const BlockWeights w = BlockWeights::from_list(params, model.qk_norm);

  BlockGraph g;
  g.x_leaf = leaf(x);
  {
    std::optional<EnginePhase> phase;
    if (!phase_prefix.empty()) phase.emplace(rt.rank, phase_prefix + "/attn");
    CategoryScope category(MemCategory::AttentionWorkspace);
    at::Tensor normed = rms_norm(g.x_leaf, w.attn_norm, model.norm_eps);  // [B, s, d]
    // memory: moved in, so without a graph the normed input dies once the projections exist
    at::Tensor attn = attention(std::move(normed), w.attn, rt.positions, model, *rt.ctx, *rt.memory);  // [B, s, d]
    g.h = g.x_leaf + attn;  // [B, s, d]
  }
  g.h_leaf = keep_graph ? g.h.detach().requires_grad_(true) : g.h;
  {
    std::optional<EnginePhase> phase;
    if (!phase_prefix.empty()) phase.emplace(rt.rank, phase_prefix + "/mlp");
    CategoryScope category(MemCategory::MlpWorkspace);
    at::Tensor normed = rms_norm(g.h_leaf, w.mlp_norm, model.norm_eps);  // [B, s, d]
    at::Tensor mlp = rt.memory->tiled_mlp
                         ? tiled_mlp(normed, w.w_gate, w.w_up, w.w_down, rt.mlp_tile_tokens)
                         : swiglu_mlp(std::move(normed), w.w_gate, w.w_up, w.w_down);  // [B, s, d]
    normed.reset();  // memory: without a graph the normed input is dead before the block output exists
    g.y = g.h_leaf + mlp;  // [B, s, d] block output
  }
  if (keep_graph) {
    for (const auto& [index, t] : w.attention_half()) g.attn_leaves.push_back(t);
    for (const auto& [index, t] : w.mlp_half()) g.mlp_leaves.push_back(t);
  }
  return g;
}

namespace {

StepRuntime* runtime_of(AutogradContext* ctx) {
  return reinterpret_cast<StepRuntime*>(ctx->saved_data["rt"].toInt());
}

void save_rng(AutogradContext* ctx, const RngState& rng) {
  ctx->saved_data["rng_cpu"] = rng.cpu;
  if (rng.device.defined()) ctx->saved_data["rng_device"] = rng.device;
}

RngState load_rng(AutogradContext* ctx, at::Device device) {
  RngState rng;
  rng.cpu = ctx->saved_data["rng_cpu"].toTensor();
  if (ctx->saved_data.count("rng_device")) {
    rng.device = ctx->saved_data["rng_device"].toTensor();
    rng.device_type = device;
  }
  return rng;
}

std::vector<at::Tensor> tensor_list(const c10::IValue& v) { return v.toTensorVector(); }

}  // namespace

at::Tensor BlockFunction::forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& master,
                                  StepRuntime* rt, int64_t layer) {
  (void)master;  // the parameters come from the group's unsharded views; master is the graph edge
  RuntimeBinding binding(*rt);
  FlatParamGroup& group = *rt->blocks.at(layer);
  const int64_t n_layers = static_cast<int64_t>(rt->blocks.size());
  const bool checkpointing = rt->memory->activation_checkpointing;
  ctx->saved_data["rt"] = reinterpret_cast<int64_t>(rt);
  ctx->saved_data["layer"] = layer;
  const std::string prefix = "fwd/block." + std::to_string(layer);

  group.unshard();
  if (layer + 1 < n_layers) rt->blocks[layer + 1]->unshard();  // prefetch the next block's parameters

  at::Tensor y;
  if (checkpointing) {
    save_rng(ctx, capture_rng_state(x.device()));
    {
      at::NoGradGuard no_grad;  // nothing inside the block is saved
      y = run_block(x, group, *rt, prefix, /*keep_graph=*/false).y;
    }
    if (rt->offload && layer + 1 < n_layers) {
      rt->offload->put(layer, x);  // the device copy dies when the caller drops x
    } else {
      retag_tensor(x, MemCategory::SavedActivations);  // the checkpoint: block input [B, s, d]
      ctx->save_for_backward({x});
    }
  } else {
    MemoryTracker& tracker = MemoryTracker::instance();
    const uint64_t marker = tracker.mark();
    BlockGraph g;
    {
      at::AutoGradMode enable_grad(true);
      g = run_block(x, group, *rt, prefix, /*keep_graph=*/true);
    }
    ctx->saved_data["x_leaf"] = g.x_leaf;
    ctx->saved_data["h"] = g.h;
    ctx->saved_data["h_leaf"] = g.h_leaf;
    ctx->saved_data["y"] = g.y;
    ctx->saved_data["attn_leaves"] = g.attn_leaves;
    ctx->saved_data["mlp_leaves"] = g.mlp_leaves;
    y = g.y.detach();
    // What the two inner graphs keep alive are this block's saved activations now.
    tracker.retag_since(rt->rank, marker, MemCategory::AttentionWorkspace, MemCategory::SavedActivations);
    tracker.retag_since(rt->rank, marker, MemCategory::MlpWorkspace, MemCategory::SavedActivations);
  }
  group.reshard();
  return y;
}

variable_list BlockFunction::backward(AutogradContext* ctx, variable_list grad_outputs) {
  StepRuntime* rt = runtime_of(ctx);
  RuntimeBinding binding(*rt);
  const int64_t layer = ctx->saved_data["layer"].toInt();
  FlatParamGroup& group = *rt->blocks.at(layer);
  const bool checkpointing = rt->memory->activation_checkpointing;
  const at::Tensor& grad_y = grad_outputs[0];

  group.unshard();
  if (layer > 0) rt->blocks[layer - 1]->unshard();  // prefetch the previous block's parameters

  BlockGraph g;
  if (checkpointing) {
    EnginePhase phase(rt->rank, block_phase("bwd", layer, "recompute"));
    at::Tensor x;
    if (rt->offload && rt->offload->holds(layer)) {
      x = rt->offload->take(layer);
      if (layer > 0) rt->offload->prefetch(layer - 1);  // next block's input comes back meanwhile
    } else {
      x = ctx->get_saved_variables().at(0);
    }
    RngFork rng(load_rng(ctx, x.device()));
    at::AutoGradMode enable_grad(true);
    g = run_block(x, group, *rt, /*phase_prefix=*/"", /*keep_graph=*/true);
  } else {
    g.x_leaf = ctx->saved_data["x_leaf"].toTensor();
    g.h = ctx->saved_data["h"].toTensor();
    g.h_leaf = ctx->saved_data["h_leaf"].toTensor();
    g.y = ctx->saved_data["y"].toTensor();
    g.attn_leaves = tensor_list(ctx->saved_data["attn_leaves"]);
    g.mlp_leaves = tensor_list(ctx->saved_data["mlp_leaves"]);
    for (const char* key : {"x_leaf", "h", "h_leaf", "y", "attn_leaves", "mlp_leaves"}) ctx->saved_data.erase(key);
  }

  const BlockWeights names = BlockWeights::from_list(group.views(), rt->model->qk_norm);
  std::vector<at::Tensor> param_grads(group.specs().size());

  variable_list mlp_grads;
  {
    EnginePhase phase(rt->rank, block_phase("bwd", layer, "mlp"));
    CategoryScope category(MemCategory::MlpWorkspace);
    variable_list inputs{g.h_leaf};
    inputs.insert(inputs.end(), g.mlp_leaves.begin(), g.mlp_leaves.end());
    mlp_grads = torch::autograd::grad({g.y}, inputs, {grad_y}, /*retain_graph=*/false);
    g.y = at::Tensor();
    g.h_leaf = at::Tensor();
  }
  const auto mlp_half = names.mlp_half();
  for (size_t k = 0; k < mlp_half.size(); ++k) param_grads[mlp_half[k].first] = mlp_grads[k + 1];

  variable_list attn_grads;
  {
    EnginePhase phase(rt->rank, block_phase("bwd", layer, "attn"));
    CategoryScope category(MemCategory::AttentionWorkspace);
    variable_list inputs{g.x_leaf};
    inputs.insert(inputs.end(), g.attn_leaves.begin(), g.attn_leaves.end());
    attn_grads = torch::autograd::grad({g.h}, inputs, {mlp_grads[0]}, /*retain_graph=*/false);
    mlp_grads.clear();
    g = BlockGraph();
  }
  const auto attn_half = names.attention_half();
  for (size_t k = 0; k < attn_half.size(); ++k) param_grads[attn_half[k].first] = attn_grads[k + 1];

  at::Tensor shard_grad;
  {
    EnginePhase phase(rt->rank, block_phase("bwd", layer, "reduce_scatter"));
    shard_grad = group.reduce_gradients(param_grads);  // [shard] fp32, summed over the ranks
  }
  group.reshard();
  return {attn_grads[0], shard_grad, at::Tensor(), at::Tensor()};
}

}  // namespace odyssey
