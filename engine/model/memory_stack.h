// The one place the memory stack is applied: memory_stack() decides, technique by technique in the
// ladder's order, how one rank runs a config; apply_memory_stack() puts that into a step's runtime.
// defines: MemoryStack, memory_stack, forward_only_stack, apply_memory_stack
#pragma once

#include <cstdint>

#include "engine/config/run_config.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/flat_group.h"

namespace odyssey {

class OffloadStore;
struct StepRuntime;

/// The rank's host stores (engine/memory/offload.h): the checkpointed block inputs', and the kept
/// attention's (memory.offload_kept_attention). Null: the rank has none (a forward-only pass).
struct OffloadStores {
  OffloadStore* block_inputs = nullptr;
  OffloadStore* kept_attention = nullptr;
};

/// How one rank runs the config's memory stack: one decision per technique, in the ladder's order
/// (kLadderRungNames, engine/config/techniques.h). Built only by memory_stack(); the trainer keeps
/// one per memory config (at construction and at each set_memory) and every step reads it.
struct MemoryStack {
  /// 1. FSDP and 7. optimizer offload: how the flat groups are laid out (their shards over the
  /// ranks, where their fp32 states live), the compute dtype and the device.
  FlatGroupOptions groups;
  /// 1. FSDP on a GPU: a block's reduce-scatter overlaps the next block's backward (one more
  /// packed gradient in flight).
  bool defer_reduce_scatter = false;
  /// 2. Ulysses: the sequence degree P; the rank holds S / P tokens and attention all-to-alls.
  int64_t sequence_degree = 1;
  /// 3. Checkpointing: a block keeps only its input for backward and recomputes the rest.
  bool checkpoint_blocks = false;
  /// 3. ... and, with memory.keep_attention, its attention output and log-sum-exp too.
  bool keep_attention = false;
  /// 4. Offload: the checkpointed block inputs go to the host pool ...
  bool offload_block_inputs = false;
  /// 4. ... and, with memory.offload_kept_attention, the kept attention beside them.
  bool offload_kept_attention = false;
  /// 5. Tiling: the MLP over sequence tiles; the LM head and loss over sequence tiles.
  bool tiled_mlp = false;
  bool tiled_loss = false;
  /// 6. Untied Ulysses: attention in head stages of memory.heads_per_stage heads.
  bool untied_attention = false;
  /// The attention kernel that kept attention's log-sum-exp is sized for: the config's query
  /// (lse_kernel_query, as the planner asks it) on this rank's device.
  LseKernelQuery lse_query;
  /// 7. Optimizer offload: fp32 master, gradient and moment shards in host memory.
  bool optimizer_states_on_host = false;
  /// The memory table the model runs: the config's, with "auto" sizes resolved by the planner
  /// (heads_per_stage, mlp_tile_tokens). Only sizes are read from it past memory_stack().
  MemoryConfig memory;
};

/// The stack of `cfg` for the rank `ctx`. `resolved` is cfg.memory with its "auto" sizes resolved
/// (with_planned_sizes, engine/planner/planner.h: the engine's model layer sits below the planner).
/// Throws std::invalid_argument for a technique without the one it requires (validate()'s rule).
MemoryStack memory_stack(const RunConfig& cfg, const MemoryConfig& resolved, const RankContext& ctx);

/// The stack of a forward without a backward (evaluation): nothing outlives a block, so no input
/// goes to the host and no attention result is kept; everything else runs as in training.
MemoryStack forward_only_stack(MemoryStack stack);

/// Puts `stack` into one step's runtime `rt` for inputs of [batch, local_tokens] tokens: the
/// techniques' per-step settings (deferred reduce-scatter, kept attention slots, the offload
/// stores, the tiles' sizes). `offload` holds the rank's stores (each used only where its technique is on).
void apply_memory_stack(const MemoryStack& stack, const ModelConfig& model, int64_t batch, int64_t local_tokens,
                        const OffloadStores& offload, StepRuntime* rt);

}  // namespace odyssey
