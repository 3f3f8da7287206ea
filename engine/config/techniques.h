// The technique registry: each memory technique once, with its preset key, label, what it trades,
// what it requires, when an edit applies and its ladder rung. Every list of techniques reads it.
// defines: TechniqueId, Technique, kTechniques, kLadderRungNames, technique, technique_on,
//          technique_flag, technique_summary, describe_techniques, technique_requirement_issues
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

/// The techniques, in ladder order.
enum class TechniqueId : uint8_t {
  Fsdp,
  Ulysses,
  Checkpointing,
  Offload,
  TiledMlp,
  TiledLoss,
  UntiedUlysses,
  OptimizerOffload
};
constexpr int kTechniqueCount = 8;

/// One technique: what the studio shows, the ladder adds, the validator requires and the run
/// summaries print. When an edit of `key` applies (next step or restart) is the schema's rule for
/// the key (KeySpec::applies), read through find_key_spec(key), never restated here.
struct Technique {
  TechniqueId id;
  const char* name;    ///< machine name in bench variants and JSON: "offload", "tiled_mlp"
  const char* key;     ///< the preset key: "memory.offload_activations"
  const char* label;   ///< the studio's toggle: "Offload to host"
  const char* noun;    ///< in run summaries and plan lines: "offload"
  const char* trades;  ///< one line: what it saves and what it costs
  /// The technique that must be on for this one to do anything (the validator's rule).
  std::optional<TechniqueId> requires_on;
  const char* requires_why;  ///< why it needs requires_on ("" when it needs nothing)
  int ladder_rung;           ///< the first rung of the ladder it is on (kLadderRungNames index)
  bool toggle;               ///< a boolean key (false: Ulysses, whose key is a degree)
  /// Where the engine applies it: its step in memory_stack() (engine/model/memory_stack.cpp, in
  /// ladder order) and the code that then runs it, as markdown with backticked paths.
  const char* applied_in;
};

/// Rung names of the technique ladder, in order (the CLI contract's names). Each rung adds the
/// techniques whose ladder_rung is its index; rung 0 is the config with none of them.
constexpr std::array<const char*, 8> kLadderRungNames = {"default", "fsdp",   "ulysses",        "checkpointing",
                                                         "offload", "tiling", "untied_ulysses", "offload_optimizer"};
constexpr int kLadderRungCount = static_cast<int>(kLadderRungNames.size());

inline constexpr std::array<Technique, kTechniqueCount> kTechniques = {{
    {TechniqueId::Fsdp, "fsdp", "parallel.fsdp", "FSDP", "FSDP",
     "Shards params, grads and AdamW state over all ranks (1/W each); costs an all-gather per block in "
     "forward and backward and a reduce-scatter of the gradients.",
     std::nullopt, "", 1, true,
     "`memory_stack` step 1: `FlatParamGroup` shards the groups (`engine/parallel/flat_group.cpp`); "
     "`BlockFunction` gathers each block before it runs and reduce-scatters its gradient (`engine/model/block.cpp`)"},
    {TechniqueId::Ulysses, "ulysses", "parallel.ulysses_degree", "Ulysses sequence parallelism", "Ulysses",
     "Splits the sequence over P ranks (activations 1/P each) and attention over heads; costs two "
     "all-to-alls per attention in forward and backward.",
     std::nullopt, "", 2, false,
     "`memory_stack` step 2: each rank gets S/P tokens (`make_rank_batch`, `engine/train/data.cpp`); "
     "`attention()` all-to-alls them to heads (`ulysses_attention`, `engine/parallel/ulysses.cpp`)"},
    {TechniqueId::Checkpointing, "checkpointing", "memory.activation_checkpointing", "Activation checkpointing",
     "checkpointing",
     "Keeps only each block's input for backward instead of all its activations; costs one extra forward "
     "of every block during backward (about +33% compute).",
     std::nullopt, "", 3, true,
     "`memory_stack` step 3: `BlockFunction` saves the block input only and recomputes in backward "
     "(`engine/model/block.cpp`)"},
    {TechniqueId::Offload, "offload", "memory.offload_activations", "Offload to host", "offload",
     "Moves the checkpointed block inputs to host memory (at most two stay on the device); costs PCIe "
     "traffic, hidden behind compute when the link is fast enough.",
     TechniqueId::Checkpointing, "only checkpointed block inputs are offloaded", 4, true,
     "`memory_stack` step 4: `BlockFunction` puts the checkpointed input in the `OffloadStore` "
     "(`engine/memory/offload.cpp`)"},
    {TechniqueId::TiledMlp, "tiled_mlp", "memory.tiled_mlp", "Tiled MLP", "tiled MLP",
     "Runs the MLP over sequence tiles so the [tokens, d_ffn] intermediates exist one tile at a time; "
     "costs recomputing each tile's forward in backward.",
     std::nullopt, "", 5, true, "`memory_stack` step 5: `run_block` calls `tiled_mlp` (`engine/memory/tiled_mlp.cpp`)"},
    {TechniqueId::TiledLoss, "tiled_loss", "memory.tiled_loss", "Tiled loss", "tiled loss",
     "LM head and cross-entropy per sequence tile, never the whole [tokens, vocab] logits; costs a little "
     "per-tile overhead.",
     std::nullopt, "", 5, true,
     "`memory_stack` step 5: `HeadFunction` calls `tiled_loss_forward` (`engine/memory/tiled_loss.cpp`)"},
    {TechniqueId::UntiedUlysses, "untied_ulysses", "memory.untied_ulysses", "Untied Ulysses", "Untied Ulysses",
     "Attention in head stages that reuse one buffer set: the workspace of one stage instead of all local "
     "heads; costs more, smaller all-to-alls and re-projection in backward.",
     std::nullopt, "", 6, true,
     "`memory_stack` step 6: `attention()` runs `untied_attention_projected` (`engine/parallel/untied_attention.cpp`)"},
    {TechniqueId::OptimizerOffload, "offload_optimizer", "memory.offload_optimizer", "Offload optimizer",
     "optimizer offload",
     "Keeps fp32 master weights, gradients and AdamW moments in host memory (the device keeps compute-dtype "
     "parameters: 2 of 16 bytes a parameter in bf16); costs PCIe traffic for gradients and parameters and "
     "the host AdamW's time, which on a GPU runs under the next step's forward (the step waits for the "
     "embedding's and first block's passes).",
     std::nullopt, "", 7, true,
     "`memory_stack` step 7: `FlatParamGroup::set_states_on_host` at the step boundary; "
     "AdamW on the host (`engine/train/optimizer.cpp`)"},
}};

/// The registry entry of `id`.
constexpr const Technique& technique(TechniqueId id) { return kTechniques[static_cast<size_t>(id)]; }

/// Whether `id` is on in `cfg` (Ulysses: a degree above 1).
bool technique_on(const RunConfig& cfg, TechniqueId id);
/// The boolean field of a toggle technique (nullptr for Ulysses, whose key is a degree).
bool* technique_flag(RunConfig& cfg, TechniqueId id);
/// "offload", "Ulysses 4", "Untied Ulysses 8 heads/stage": the technique as run summaries print it.
/// With heads_per_stage = "auto", `planned` is the memory config the planner resolved, where the
/// caller has it (with_planned_sizes, engine/planner/planner.h): "Untied Ulysses auto: 32
/// heads/stage", or "Untied Ulysses auto: off at this length (...)" where "auto" runs standard
/// attention; nullptr prints "Untied Ulysses auto heads/stage".
std::string technique_summary(const RunConfig& cfg, TechniqueId id, const MemoryConfig* planned = nullptr);
/// The techniques on in `cfg`, comma-separated ("checkpointing, offload, tiled MLP"), or "" when
/// none; `memory_only` leaves out FSDP and Ulysses (what a live edit can change).
std::string describe_techniques(const RunConfig& cfg, bool memory_only = false, const MemoryConfig* planned = nullptr);

/// A technique on without the one it requires: the key, the rule and a hint, as the validator
/// reports it ("memory.offload_activations", "needs memory.activation_checkpointing = true", ...).
struct TechniqueRequirement {
  std::string key, rule, hint;
  /// "memory.offload_activations needs memory.activation_checkpointing = true (only ...)".
  std::string text() const { return key + " " + rule + " (" + hint + ")"; }
};
std::vector<TechniqueRequirement> technique_requirement_issues(const RunConfig& cfg);

}  // namespace odyssey
