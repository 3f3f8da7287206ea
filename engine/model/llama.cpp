// LlamaModel: flat groups, init, and the forward chain embedding -> blocks -> loss as autograd
// nodes (see llama.h). defines: LlamaModel
#include "engine/model/llama.h"

#include "engine/layout/attention_kernels.h"
#include "engine/layout/heads.h"
#include "engine/layout/planned_buffers.h"
#include "engine/memory/offload.h"
#include "engine/model/block.h"
#include "engine/model/head.h"

namespace odyssey {

std::vector<GroupSpecs> model_group_specs(const ModelConfig& model) {
  std::vector<GroupSpecs> out;
  out.push_back({"embedding", embedding_param_specs(model), ParamGroupKind::Embedding});
  for (int64_t i = 0; i < model.n_layers; ++i)
    out.push_back({"block." + std::to_string(i), block_param_specs(model), ParamGroupKind::Block});
  out.push_back({"head", head_param_specs(model), ParamGroupKind::Head});
  return out;
}

LlamaModel::LlamaModel(const ModelConfig& model, const RankContext& ctx, const FlatGroupOptions& options)
    : model_(model), ctx_(ctx) {
  for (GroupSpecs& g : model_group_specs(model_)) {
    FlatGroupOptions o = options;
    o.kind = g.kind;
    auto group = std::make_unique<FlatParamGroup>(g.name, std::move(g.specs), ctx_, o);
    if (g.kind == ParamGroupKind::Embedding)
      embed_ = std::move(group);
    else if (g.kind == ParamGroupKind::Head)
      head_ = std::move(group);
    else
      blocks_.push_back(std::move(group));
  }
}

void LlamaModel::init(uint64_t seed) {
  auto all = groups();
  int64_t next_chunk = 0;  // the groups' initialisation chunks numbered over the model
  for (FlatParamGroup* group : all) next_chunk = group->init(seed, next_chunk);
}

std::vector<FlatParamGroup*> LlamaModel::groups() {
  std::vector<FlatParamGroup*> out{embed_.get()};
  for (auto& b : blocks_) out.push_back(b.get());
  out.push_back(head_.get());
  return out;
}

at::Tensor LlamaModel::forward(const ModelInputs& in, const MemoryStack& stack, const OffloadStores& offload,
                               PhaseRecorder* recorder, StepRuntime* rt) {
  const int64_t batch = in.ids.size(0), s = in.ids.size(1);
  apply_memory_stack(stack, model_, batch, s, offload, rt);  // the techniques, in the ladder's order
  rt->model = &model_;
  rt->ctx = &ctx_;
  rt->positions = make_positions(in.first_position, s, model_, in.ids.device(), in.documents, in.restart_positions);
  rt->blocks.clear();
  for (auto& b : blocks_) rt->blocks.push_back(b.get());
  rt->embed = embed_.get();
  rt->head = head_.get();
  rt->recorder = recorder;
  rt->rank = ctx_.slot;  // the memory tracker's and phase stack's index of this rank
  rt->ids = in.ids;
  rt->labels = in.labels;
  rt->answer_mask = in.answer_mask;
  rt->loss_scale = 1.0 / static_cast<double>(in.global_tokens);
  rt->answer = AnswerStats();

  if (rt->offload) start_offload_step(*rt->offload, batch, s);  // before anything runs
  if (rt->kept_offload) start_kept_offload_step(*rt->kept_offload, stack, batch, s);
  at::Tensor x = EmbedFunction::apply(embed_->master, in.ids, rt);  // [B, s, d]
  for (int64_t i = 0; i < model_.n_layers; ++i) {
    // Reassigning x drops this scope's reference: an offloaded input's device copy dies here.
    x = BlockFunction::apply(x, blocks_[i]->master, rt, i);  // [B, s, d]
  }
  return HeadFunction::apply(x, head_->master, rt);  // scalar loss_local
}

void LlamaModel::start_offload_step(OffloadStore& store, int64_t batch, int64_t local_tokens) {
  store.start_step(offloaded_blocks(model_.n_layers), {batch, local_tokens, model_.d_model}, embed_->compute_dtype());
}

void LlamaModel::start_kept_offload_step(OffloadStore& store, const MemoryStack& stack, int64_t batch,
                                         int64_t local_tokens) {
  const int64_t P = stack.sequence_degree;
  const int64_t heads = model_.n_heads / P;  // the rank's query heads in the head layout
  const int64_t stage_heads =
      stack.untied_attention ? effective_heads_per_stage(stack.memory.heads_per_stage, P) / P : heads;
  const at::ScalarType dtype = embed_->compute_dtype();
  // The kernel the kept attention calls decides only whether its log-sum-exp is padded (the
  // memory-efficient kernel's, CUDA fp32): the query the planner asks (packed documents included),
  // on this rank's device.
  const LseKernel kernel = lse_attention_kernel(stack.lse_query);
  const int64_t S = local_tokens * P;
  const KeptAttentionPayload payload =
      kept_attention_step_payload(batch, S, heads, model_.head_dim, static_cast<int64_t>(c10::elementSize(dtype)),
                                  stage_heads, lse_positions(kernel, S));
  store.start_step(kept_attention_offloaded_blocks(model_.n_layers, stack.memory.keep_attention_blocks),
                   {payload.bytes()}, at::kByte);  // [payload] uint8 a block
}

void LlamaModel::reshard_all() {
  for (auto* g : groups()) g->reshard();
}

}  // namespace odyssey
