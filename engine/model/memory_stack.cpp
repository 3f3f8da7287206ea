// The memory stack applied to a rank, technique by technique in the ladder's order: the one place
// that reads the config's techniques and says where each takes effect (see memory_stack.h).
// defines: memory_stack, forward_only_stack, apply_memory_stack
#include "engine/model/memory_stack.h"

#include <stdexcept>

#include "engine/config/techniques.h"
#include "engine/layout/schedule_rules.h"
#include "engine/memory/offload.h"
#include "engine/model/step_runtime.h"
#include "engine/parallel/devices.h"

namespace odyssey {

MemoryStack memory_stack(const RunConfig& cfg, const MemoryConfig& resolved, const RankContext& ctx) {
  // A technique without the one it requires is refused as validate() refuses it, never quietly
  // switched off (the registry's rule, engine/config/techniques.h).
  RunConfig next = cfg;
  next.memory = resolved;
  for (const TechniqueRequirement& broken : technique_requirement_issues(next))
    throw std::invalid_argument(broken.text());

  MemoryStack stack;
  stack.memory = resolved;
  stack.lse_query = lse_kernel_query(next);
  stack.lse_query.cuda = ctx.device.is_cuda();  // the planner reads runs_cuda_path(cfg)
  stack.groups.compute = compute_dtype(cfg.training.dtype);
  stack.groups.device = ctx.device;

  // 1. FSDP (parallel.fsdp). Each flat group holds 1/W of its fp32 master, gradient and moments
  //    (FlatParamGroup); a block all-gathers its parameters just before it runs, forward and
  //    recompute alike, prefetching the next block's (BlockFunction), and reduce-scatters its
  //    gradient after its backward. On a GPU the reduce-scatter runs on the collectives' stream,
  //    finished at the end of the next block's backward (StepRuntime::defer_reduce_scatter).
  stack.groups.fsdp = cfg.parallel.fsdp;
  stack.defer_reduce_scatter = defers_reduce_scatter(ctx.device.is_cuda());

  // 2. Ulysses (parallel.ulysses_degree). The rank's batch holds S/P tokens of every sequence
  //    (make_rank_batch); attention all-to-alls them to S tokens of H/P heads and back
  //    (ulysses_attention, through attention()).
  stack.sequence_degree = ctx.sp_size;

  // 3. Activation checkpointing (memory.activation_checkpointing). A block saves only its input
  //    and recomputes its forward in backward (BlockFunction); with memory.keep_attention it also
  //    keeps its attention output and log-sum-exp, and the recompute runs no attention kernel
  //    (KeptAttention, engine/parallel/kept_attention.h).
  stack.checkpoint_blocks = resolved.activation_checkpointing;
  stack.keep_attention = resolved.activation_checkpointing && resolved.keep_attention;

  // 4. Offload (memory.offload_activations). The checkpointed block inputs go to the host pool
  //    while the next block computes and come back one block ahead of the backward (OffloadStore,
  //    from BlockFunction). With memory.offload_kept_attention the kept attention goes too, packed
  //    into one buffer per block (pack_kept_attention), through a store of its own.
  stack.offload_block_inputs = resolved.offload_activations;
  stack.offload_kept_attention =
      stack.keep_attention && resolved.offload_activations && resolved.offload_kept_attention;

  // 5. Tiling (memory.tiled_mlp, memory.tiled_loss). The MLP runs over sequence tiles of
  //    memory.mlp_tile_tokens (tiled_mlp, from run_block); the LM head and the cross-entropy over
  //    tiles of memory.loss_tile_tokens, never the whole [tokens, vocab] logits (tiled_loss_forward,
  //    from HeadFunction).
  stack.tiled_mlp = resolved.tiled_mlp;
  stack.tiled_loss = resolved.tiled_loss;

  // 6. Untied Ulysses (memory.untied_ulysses). Attention runs in stages of
  //    memory.heads_per_stage heads reusing one buffer set, the norm folded into the stages'
  //    projections (untied_attention_projected, through attention()).
  stack.untied_attention = resolved.untied_ulysses;

  // 7. Optimizer offload (memory.offload_optimizer). The fp32 states live in host memory and the
  //    device keeps compute-dtype parameters (FlatParamGroup::set_states_on_host, at the step
  //    boundary); AdamW runs on the host (AdamW, engine/train/optimizer.h), on a GPU under the
  //    next step's forward (host_optimizer_overlaps_forward, engine/layout/schedule_rules.h).
  stack.groups.offload_optimizer = resolved.offload_optimizer;
  stack.optimizer_states_on_host = resolved.offload_optimizer;
  return stack;
}

MemoryStack forward_only_stack(MemoryStack stack) {
  // Memory: without a backward nothing a block saves is ever read, so none is sent to the host
  // or kept past the block.
  stack.offload_block_inputs = false;
  stack.memory.offload_activations = false;
  stack.keep_attention = false;
  stack.memory.keep_attention = false;
  stack.offload_kept_attention = false;
  stack.memory.offload_kept_attention = false;
  return stack;
}

void apply_memory_stack(const MemoryStack& stack, const ModelConfig& model, int64_t batch, int64_t local_tokens,
                        const OffloadStores& offload, StepRuntime* rt) {
  rt->stack = &stack;
  // 1. FSDP: the deferred reduce-scatter's pending gradient lives in the runtime.
  rt->defer_reduce_scatter = stack.defer_reduce_scatter;
  // 2. Ulysses: nothing per step (the rank context holds the sequence group).
  // 3. Checkpointing: one kept-attention slot per layer, filled by the forward, taken by the recompute.
  KeptAttention empty_slot;
  empty_slot.kernel_choice = stack.memory.lse_attention_kernel;
  rt->kept_attention.assign(stack.keep_attention ? model.n_layers : 0, empty_slot);
  // 4. Offload: the blocks put their checkpointed inputs (and their kept attention) in the rank's stores.
  rt->offload = stack.offload_block_inputs ? offload.block_inputs : nullptr;
  rt->kept_offload = stack.offload_kept_attention ? offload.kept_attention : nullptr;
  // 5. Tiling: the tiles' sizes for this step's inputs, [B, n, f] and [B, n, V] (engine/layout/tiles.h).
  rt->mlp_tile_tokens = mlp_tile(stack.memory, model, batch, local_tokens).positions;
  rt->loss_tile_tokens = loss_tile(stack.memory, model, batch, local_tokens).positions;
  // 6. Untied Ulysses: attention() dispatches on the stack's memory table (its stage size).
  // 7. Optimizer offload: nothing per step (the groups' states were placed at the step boundary).
}

}  // namespace odyssey
