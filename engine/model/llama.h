// The Llama decoder over flat parameter groups: embedding -> L x BlockFunction -> HeadFunction
// (final norm, LM head, cross-entropy). Pure functions over parameter views; the groups own the
// memory. defines: ModelInputs, LlamaModel
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/parallel/flat_group.h"
#include "engine/model/step_runtime.h"
#include "engine/parallel/comm.h"

namespace odyssey {

class OffloadStore;

/// One rank's slice of one step's batch.
struct ModelInputs {
  at::Tensor ids;              ///< [B, s] int64 token ids of this rank's sequence shard
  at::Tensor labels;           ///< [B, s] int64 next-token labels (shifted before sharding)
  at::Tensor answer_mask;      ///< [B, s] bool answer tokens of the long-range task, or undefined
  int64_t first_position = 0;  ///< global position of the shard's first token (sp_rank x s)
  int64_t global_tokens = 1;   ///< N_global: the trained labels of the global batch (B x S x D without documents)
  /// Packed documents (training.document_mask): each row's document starts over the whole
  /// sequence [0, S); attention stays within each document. Labels across a boundary arrive as
  /// -100 (never trained). Empty: no masking.
  DocumentSpans documents;
  bool restart_positions = true;  ///< with documents: RoPE positions restart at 0 in each document
};

/// One flat group of the model before it is allocated: its name ("embedding", "block.3",
/// "head"), its parameters in flat order and its kind.
struct GroupSpecs {
  std::string name;
  std::vector<ParamSpec> specs;
  ParamGroupKind kind = ParamGroupKind::Block;
};
/// The model's groups in LlamaModel::groups() order (embedding, blocks 0..L-1, head): what the
/// model allocates, what a Hugging Face checkpoint is checked against and an export writes.
std::vector<GroupSpecs> model_group_specs(const ModelConfig& model);

class LlamaModel {
 public:
  /// Allocates the groups (embedding, one per block, head) with zero master weights.
  LlamaModel(const ModelConfig& model, const RankContext& ctx, const FlatGroupOptions& options);
  /// Deterministic Llama-style init: group g is seeded from (seed, g).
  void init(uint64_t seed);

  const ModelConfig& config() const { return model_; }
  const RankContext& rank_context() const { return ctx_; }
  /// All groups in a fixed order: embedding, blocks 0..L-1, head.
  std::vector<FlatParamGroup*> groups();
  FlatParamGroup& embed() { return *embed_; }
  FlatParamGroup& block(int64_t layer) { return *blocks_.at(layer); }
  FlatParamGroup& head() { return *head_; }

  /// Runs one step's forward through the loss with the memory stack `stack` (memory_stack.h),
  /// which it applies to `rt` (apply_memory_stack) beside the step's inputs and groups. Returns
  /// loss_local (scalar fp32 with a graph back to every master shard); `rt` and `stack` must
  /// outlive the backward. `offload` is the rank's host store (read with offload_block_inputs).
  at::Tensor forward(const ModelInputs& in, const MemoryStack& stack, const OffloadStores& offload,
                     PhaseRecorder* recorder, StepRuntime* rt);

  /// Sizes `store` for a step of `batch` x `local_tokens` tokens: the offloaded blocks' inputs
  /// (offloaded_blocks), each [batch, local_tokens, d_model] of the compute dtype (CUDA: the pinned
  /// slab, made once). The one sizing rule: forward calls it at each step's start, and the trainer
  /// at setup (Trainer::pin_offload_slab), so that step 1 finds the slab made.
  void start_offload_step(OffloadStore& store, int64_t batch, int64_t local_tokens);

  /// Sizes the kept attention's host `store` (memory.offload_kept_attention) for a step of `batch`
  /// x `local_tokens` tokens under `stack`: the keeping blocks that send theirs to the host
  /// (kept_attention_offloaded_blocks), each one payload of kept_attention_step_payload bytes (the
  /// output of the rank's H/P heads over the whole sequence and one log-sum-exp per stage). Called
  /// where start_offload_step is, so that the second pinned slab too is made before step 1; a
  /// block's packed payload of other bytes is refused by the store (OffloadStore::put).
  void start_kept_offload_step(OffloadStore& store, const MemoryStack& stack, int64_t batch, int64_t local_tokens);

  /// Frees every gathered buffer (after a failed step: OOM mid-forward leaves groups unsharded).
  void reshard_all();

 private:
  ModelConfig model_;
  RankContext ctx_;
  std::unique_ptr<FlatParamGroup> embed_;
  std::vector<std::unique_ptr<FlatParamGroup>> blocks_;
  std::unique_ptr<FlatParamGroup> head_;
};

}  // namespace odyssey
