// BlockFunction: one decoder block as one autograd node, with the attention and MLP halves as
// separate phases, checkpointing (+ offload of its input, + the kept attention result),
// unshard/reshard around forward and backward and the packed gradient reduction. defines: block_param_specs, BlockWeights, run_block,
// BlockFunction
#include "engine/model/block.h"

#include <cmath>
#include <optional>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/variable.h>

#include "engine/layout/schedule_rules.h"
#include "engine/memory/rng_state.h"
#include "engine/memory/offload.h"
#include "engine/memory/tiled_mlp.h"
#include "engine/model/head.h"
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
      {"wq", {m.q_dim(), m.d_model}, true, std_in},    {"wk", {m.kv_dim(), m.d_model}, true, std_in},
      {"wv", {m.kv_dim(), m.d_model}, true, std_in},   {"wo", {m.d_model, m.q_dim()}, true, std_out},
      {"w_gate", {m.d_ffn, m.d_model}, true, std_in},  {"w_up", {m.d_ffn, m.d_model}, true, std_in},
      {"w_down", {m.d_model, m.d_ffn}, true, std_out}, {"attn_norm", {m.d_model}, false, 0.0},
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
                     const std::string& phase_prefix, bool keep_graph, bool need_output) {
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
    // the attention's RMSNorm runs inside attention() (folded into Untied Ulysses' projections)
    at::Tensor attn = attention(g.x_leaf, w.attn_norm, w.attn, rt.positions, model, *rt.ctx, *rt.stack);  // [B, s, d]
    if (keep_graph) g.attn_root = torch::autograd::impl::gradient_edge(attn);
    at::NoGradGuard residual;              // memory: the root is the branch's edge, so the sum records nothing
    const at::Tensor h = g.x_leaf + attn;  // [B, s, d]
    attn.reset();
    g.h_leaf = keep_graph ? h.detach().requires_grad_(true) : h;  // shares h's storage
    // Memory: the block input offloaded last (the previous block's) is freed once this attention
    // is queued, its copy to the host having overlapped it (OffloadStore::put); no-op otherwise.
    if (rt.offload != nullptr) rt.offload->release_copied_input();
    if (rt.kept_offload != nullptr) rt.kept_offload->release_copied_input();  // the same for kept attention
  }
  {
    std::optional<EnginePhase> phase;
    if (!phase_prefix.empty()) phase.emplace(rt.rank, phase_prefix + "/mlp");
    CategoryScope category(MemCategory::MlpWorkspace);
    at::Tensor normed = rms_norm(g.h_leaf, w.mlp_norm, model.norm_eps);  // [B, s, d]
    // A recompute (need_output false) keeps only the branch's edge: the tiled MLP runs no tile
    // then, since its backward recomputes every tile (the untiled one must save its intermediates).
    at::Tensor mlp = rt.stack->tiled_mlp
                         ? tiled_mlp(normed, w.w_gate, w.w_up, w.w_down, rt.mlp_tile_tokens, need_output)
                         : swiglu_mlp(std::move(normed), w.w_gate, w.w_up, w.w_down);  // [B, s, d]
    normed.reset();  // memory: without a graph the normed input is dead before the block output exists
    if (keep_graph) g.mlp_root = torch::autograd::impl::gradient_edge(mlp);
    if (need_output) {
      at::NoGradGuard residual;
      g.y = g.h_leaf + mlp;  // [B, s, d] block output
    }
  }
  if (keep_graph) {
    for (const auto& [index, t] : w.attention_half()) g.attn_leaves.push_back(t);
    for (const auto& [index, t] : w.mlp_half()) g.mlp_leaves.push_back(t);
  }
  return g;
}

namespace {

StepRuntime* runtime_of(AutogradContext* ctx) { return reinterpret_cast<StepRuntime*>(ctx->saved_data["rt"].toInt()); }

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

/// memory.keep_attention: `layer`'s kept-attention slot, or null where it keeps nothing (no kept
/// attention, or a block below the top memory.keep_attention_blocks: it recomputes its attention).
KeptAttention* kept_slot(StepRuntime& rt, int64_t layer) {
  if (rt.kept_attention.empty()) return nullptr;
  const auto n_layers = static_cast<int64_t>(rt.kept_attention.size());
  return kept_attention_blocks(n_layers, rt.stack->memory.keep_attention_blocks).keeps(layer)
             ? &rt.kept_attention.at(layer)
             : nullptr;
}

/// memory.offload_kept_attention: the blocks whose kept attention goes to the host.
OffloadedBlocks kept_blocks_on_host(const StepRuntime& rt, int64_t n_layers) {
  return kept_attention_offloaded_blocks(n_layers, rt.stack->memory.keep_attention_blocks);
}

/// The two branch roots of a block kept between its forward and backward without a graph
/// checkpoint (their gradient edges keep the graphs alive; no tensor is held for them).
struct BlockRoots : torch::CustomClassHolder {
  torch::autograd::Edge attn, mlp;
};

/// autograd::grad from a root's gradient edge instead of a root tensor: the gradients of
/// `inputs` (leaves) for `grad` flowing into `root`; the graph is freed as it runs.
variable_list grad_from_edge(const torch::autograd::Edge& root, const at::Tensor& grad, const variable_list& inputs) {
  torch::autograd::edge_list outputs;
  outputs.reserve(inputs.size());
  for (const auto& t : inputs) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::try_get_grad_accumulator(t);
    outputs.emplace_back(acc ? std::move(acc) : std::make_shared<torch::autograd::Identity>(), 0);
  }
  return torch::autograd::Engine::get_default_engine().execute({root}, {grad}, /*keep_graph=*/false,
                                                               /*create_graph=*/false, /*accumulate_grad=*/false,
                                                               outputs);
}

/// dh = dy + d(MLP branch) for the backward. Memory reason: when dy (the gradient the block
/// received) is referred to only by the autograd engine's call and this backward's argument list
/// (and, for a view, only the view refers to its base), the sum is written into it, so the block
/// never holds dy and dh at once; dx = dh + d(attention) then lands in the same buffer, and one
/// [B, s, d] gradient flows down all blocks. Otherwise (dy shared) a new tensor. The planner
/// counts the in-place case; parallel_tests "[maxlen]" would fail if it stopped happening (one
/// [s, d] more per token than planned).
at::Tensor add_mlp_residual(const at::Tensor& incoming, const at::Tensor& branch) {
  constexpr size_t kEngineRefs = 2;  // the engine's input list and this backward's grad_outputs
  const bool exclusive = incoming.use_count() <= kEngineRefs &&
                         (!incoming.is_view() || incoming._base().use_count() == 1) &&
                         incoming.scalar_type() == branch.scalar_type();
  if (!exclusive) return incoming + branch;
  at::Tensor sum = incoming;
  sum.add_(branch);
  return sum;
}

}  // namespace

at::Tensor BlockFunction::forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& master, StepRuntime* rt,
                                  int64_t layer) {
  (void)master;  // the parameters come from the group's unsharded views; master is the graph edge
  RuntimeBinding binding(*rt);
  FlatParamGroup& group = *rt->blocks.at(layer);
  const int64_t n_layers = static_cast<int64_t>(rt->blocks.size());
  const bool checkpointing = rt->stack->checkpoint_blocks;
  ctx->saved_data["rt"] = reinterpret_cast<int64_t>(rt);
  ctx->saved_data["layer"] = layer;
  const std::string prefix = "fwd/block." + std::to_string(layer);

  group.unshard();  // finishes the gather the previous block started
  // Prefetch: the next block's parameters gather while this block computes (the all-gather runs
  // on the backend; the same bytes at the same moment as a blocking gather). Time: a host AdamW
  // pass still running for the next block (the offloaded optimizer's pipeline) would hold this
  // thread before this block's kernels are queued, and the device would wait for two passes
  // where the step needs one; then the prefetch follows this block's kernels instead. Only for an
  // unsharded group, whose prefetch is a cast: a sharded one starts an all-gather, and collectives
  // must be issued in the same order on every rank (NCCL), which a per-rank timing decision would
  // not keep. Under FSDP the device still waits for the next block's pass too.
  FlatParamGroup* next = layer + 1 < n_layers ? rt->blocks[layer + 1] : nullptr;
  const bool prefetch_after = next != nullptr && !next->sharded() && next->update_running();
  if (next != nullptr && !prefetch_after) next->unshard_async();

  at::Tensor y;
  if (checkpointing) {
    save_rng(ctx, capture_rng_state(x.device()));
    // memory.keep_attention: the attention's output and LSE outlive the block (kept_attention.h)
    KeptAttention* kept = kept_slot(*rt, layer);
    {
      at::NoGradGuard no_grad;  // nothing inside the block is saved (but what kept_attention keeps)
      std::optional<KeptAttentionScope> keeping;
      if (kept) keeping.emplace(kept, KeptAttentionScope::Mode::Keep);
      y = run_block(x, group, *rt, prefix, /*keep_graph=*/false).y;
    }
    const OffloadedBlocks kept_on_host = kept_blocks_on_host(*rt, n_layers);
    if (kept && rt->kept_offload && kept_on_host.holds(layer)) {
      // memory.offload_kept_attention: packed into one buffer and sent to the host beside the
      // input; the device copy lives until the next block's attention is queued (OffloadStore::put)
      at::Tensor payload;
      {
        CategoryScope category(MemCategory::SavedActivations);
        payload = pack_kept_attention(*kept);  // [payload] uint8
      }
      // the store was sized at the step's start (LlamaModel::start_kept_offload_step): a payload
      // of other bytes than the rule's is refused there
      rt->kept_offload->put(layer, payload);
    } else if (kept) {  // what the block keeps for its backward beside its input
      for (const at::Tensor& t : kept->tensors()) retag_tensor(t, MemCategory::SavedActivations);
    }
    const OffloadedBlocks offloaded = offloaded_blocks(n_layers);
    if (rt->offload && offloaded.holds(layer)) {
      rt->offload->put(layer, x);  // the device copy lives until the next block's attention is queued
    } else if (rt->offload && offloaded.embeds(layer)) {
      ctx->saved_data["embedded_input"] = true;  // memory: nothing kept; backward looks it up again
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
    ctx->saved_data["h_leaf"] = g.h_leaf;
    auto roots = c10::make_intrusive<BlockRoots>();
    roots->attn = std::move(g.attn_root);
    roots->mlp = std::move(g.mlp_root);
    ctx->saved_data["roots"] = c10::IValue::make_capsule(roots);
    ctx->saved_data["attn_leaves"] = g.attn_leaves;
    ctx->saved_data["mlp_leaves"] = g.mlp_leaves;
    y = g.y.detach();
    // What the two inner graphs keep alive are this block's saved activations now.
    tracker.retag_since(rt->rank, marker, MemCategory::AttentionWorkspace, MemCategory::SavedActivations);
    tracker.retag_since(rt->rank, marker, MemCategory::MlpWorkspace, MemCategory::SavedActivations);
  }
  group.reshard();
  if (prefetch_after) next->unshard_async();
  return y;
}

namespace {
/// Starts `group`'s reduce-scatter of `param_grads` and leaves it in flight on the runtime.
void param_grads_to_pending(FlatParamGroup& group, std::vector<at::Tensor>& param_grads, StepRuntime& rt) {
  rt.pending_gradient = group.start_reduce_gradients(param_grads);
  rt.pending_group = &group;
  param_grads.clear();  // memory: the packed copy is what the reduction reads
}
}  // namespace

variable_list BlockFunction::backward(AutogradContext* ctx, variable_list grad_outputs) {
  StepRuntime* rt = runtime_of(ctx);
  RuntimeBinding binding(*rt);
  const int64_t layer = ctx->saved_data["layer"].toInt();
  FlatParamGroup& group = *rt->blocks.at(layer);
  const bool checkpointing = rt->stack->checkpoint_blocks;
  const at::Tensor& grad_y = grad_outputs[0];

  group.unshard();                                        // finishes the gather the next block's backward started
  if (layer > 0) rt->blocks[layer - 1]->unshard_async();  // prefetch: gathers while this block computes

  BlockGraph g;
  bool input_in_slot = false;  // x is the offload store's device slot until release(layer)
  bool kept_in_slot = false;   // the kept attention is its store's device slot until release(layer)
  if (checkpointing) {
    EnginePhase phase(rt->rank, block_phase("bwd", layer, "recompute"));
    at::Tensor x;
    if (rt->offload && rt->offload->holds(layer)) {
      x = rt->offload->take(layer);
      input_in_slot = true;
    } else if (ctx->saved_data.count("embedded_input")) {
      CategoryScope category(MemCategory::SavedActivations);  // as a prefetched input
      x = embed_tokens(*rt, rt->ids);                         // [B, s, d]: the same rows the forward looked up
    } else {
      x = ctx->get_saved_variables().at(0);  // the last block's input stayed on the device
    }
    // The block below's input comes back while this one recomputes (from the last block on).
    if (rt->offload && layer > 0) rt->offload->prefetch(layer - 1);
    RngFork rng(load_rng(ctx, x.device()));
    at::AutoGradMode enable_grad(true);
    // memory.keep_attention: the attention replays its kept result (no attention kernel runs),
    // brought back from the host where it went there (memory.offload_kept_attention), and the
    // block below's comes back while this one recomputes
    KeptAttention* kept = kept_slot(*rt, layer);
    if (kept && rt->kept_offload && rt->kept_offload->holds(layer)) {
      unpack_kept_attention(*kept, rt->kept_offload->take(layer));
      kept_in_slot = true;
    }
    if (rt->kept_offload && layer > 0) rt->kept_offload->prefetch(layer - 1);
    std::optional<KeptAttentionScope> replaying;
    if (kept) replaying.emplace(kept, KeptAttentionScope::Mode::Replay);
    g = run_block(x, group, *rt, /*phase_prefix=*/"", /*keep_graph=*/true, /*need_output=*/false);
    if (kept) kept->release();  // memory: the recompute's graph holds it now, until its backward
  } else {
    g.x_leaf = ctx->saved_data["x_leaf"].toTensor();
    g.h_leaf = ctx->saved_data["h_leaf"].toTensor();
    auto roots = c10::static_intrusive_pointer_cast<BlockRoots>(ctx->saved_data["roots"].toCapsule());
    g.attn_root = std::move(roots->attn);
    g.mlp_root = std::move(roots->mlp);
    g.attn_leaves = tensor_list(ctx->saved_data["attn_leaves"]);
    g.mlp_leaves = tensor_list(ctx->saved_data["mlp_leaves"]);
    for (const char* key : {"x_leaf", "h_leaf", "roots", "attn_leaves", "mlp_leaves"}) ctx->saved_data.erase(key);
  }

  const BlockWeights names = BlockWeights::from_list(group.views(), rt->model->qk_norm);
  std::vector<at::Tensor> param_grads(group.specs().size());

  // dh = dy + d(MLP branch), dx = dh + d(attention branch): the residual sums, written into the
  // incoming gradient when it is ours alone (add_mlp_residual).
  at::Tensor dh;
  variable_list mlp_grads;
  {
    EnginePhase phase(rt->rank, block_phase("bwd", layer, "mlp"));
    CategoryScope category(MemCategory::MlpWorkspace);
    variable_list inputs{g.h_leaf};
    inputs.insert(inputs.end(), g.mlp_leaves.begin(), g.mlp_leaves.end());
    mlp_grads = grad_from_edge(g.mlp_root, grad_y, inputs);  // [0]: d h through the MLP branch
    g.mlp_root = {};
    g.h_leaf = at::Tensor();                      // memory: h is free now (the MLP graph that saved it has run)
    dh = add_mlp_residual(grad_y, mlp_grads[0]);  // [B, s, d]
    mlp_grads[0] = at::Tensor();
  }
  const auto mlp_half = names.mlp_half();
  for (size_t k = 0; k < mlp_half.size(); ++k) param_grads[mlp_half[k].first] = mlp_grads[k + 1];
  mlp_grads.clear();

  variable_list attn_grads;
  {
    EnginePhase phase(rt->rank, block_phase("bwd", layer, "attn"));
    CategoryScope category(MemCategory::AttentionWorkspace);
    variable_list inputs{g.x_leaf};
    inputs.insert(inputs.end(), g.attn_leaves.begin(), g.attn_leaves.end());
    attn_grads = grad_from_edge(g.attn_root, dh, inputs);  // [0]: d x through the attention branch
    g = BlockGraph();
    dh.add_(attn_grads[0]);  // dx [B, s, d]: dh is this backward's own here (new, or grad_y when exclusive)
    attn_grads[0] = std::move(dh);
  }
  const auto attn_half = names.attention_half();
  for (size_t k = 0; k < attn_half.size(); ++k) param_grads[attn_half[k].first] = attn_grads[k + 1];

  {
    EnginePhase phase(rt->rank, block_phase("bwd", layer, "reduce_scatter"));
    if (defers_block_reduce_scatter(rt->defer_reduce_scatter, group.sharded())) {
      // The reduction of the block above overlapped this block's backward: finish it now, then
      // start this block's, which the next block's backward overlaps. The gradient reaches the
      // master shard when it finishes, not through autograd.
      rt->finish_pending_gradient();
      param_grads_to_pending(group, param_grads, *rt);
    } else {
      // [shard] fp32, summed over the ranks, into the gradient wherever it lives (host, offloaded)
      group.accumulate_gradient(group.reduce_gradients(param_grads));
    }
  }
  group.reshard();
  // Every read of x is queued: its slot may take block layer - 2 (the planner frees the input here).
  if (input_in_slot) rt->offload->release(layer);
  if (kept_in_slot) rt->kept_offload->release(layer);
  return {attn_grads[0], at::Tensor(), at::Tensor(), at::Tensor()};  // master: accumulated above
}

}  // namespace odyssey
