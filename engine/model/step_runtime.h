// What the autograd Functions of one training step share (embedding, blocks, head): the memory
// stack, the rank, the flat groups, positions, labels and the loss scale. Lives for the whole
// step; the Functions hold a raw pointer to it (AnswerStats: engine/memory/tiled_loss.h). defines: StepRuntime, RuntimeBinding,
// EnginePhase, failing_phase
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/memory/tiled_loss.h"
#include "engine/model/memory_stack.h"
#include "engine/parallel/flat_group.h"
#include "engine/parallel/kept_attention.h"
#include "engine/ops/layers.h"
#include "engine/parallel/comm.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"

namespace odyssey {

class OffloadStore;

struct StepRuntime {
  const ModelConfig* model = nullptr;
  const MemoryStack* stack = nullptr;  ///< the techniques, applied by apply_memory_stack (memory_stack.h)
  const RankContext* ctx = nullptr;
  Positions positions;                  ///< this rank's global positions and RoPE tables
  std::vector<FlatParamGroup*> blocks;  ///< one per layer
  FlatParamGroup* embed = nullptr;
  FlatParamGroup* head = nullptr;        ///< final norm (+ LM head when untied)
  OffloadStore* offload = nullptr;       ///< set when checkpointed inputs go to the host pool
  OffloadStore* kept_offload = nullptr;  ///< set when the kept attention goes there too (memory.offload_kept_attention)
  PhaseRecorder* recorder = nullptr;     ///< the rank's recorder, re-bound on autograd threads
  int rank = 0;                          ///< RankContext::slot: tracker counters and phase stack
  /// FSDP: a block's reduce-scatter is started at the end of its backward and finished at the
  /// end of the next block's (whose compute it overlaps); the last one after the whole backward.
  /// Memory: one more packed gradient in flight. On by default on GPUs (Trainer).
  bool defer_reduce_scatter = false;
  /// The reduction in flight and the group whose gradient it is.
  FlatParamGroup* pending_group = nullptr;
  FlatParamGroup::PendingGradient pending_gradient;
  /// Finishes the reduction in flight (if any) and adds its shard into the group's gradient.
  void finish_pending_gradient();
  /// memory.keep_attention under checkpointing: each block's kept attention result, filled by its
  /// forward and handed to its recompute's graph (one per layer; empty: nothing is kept).
  std::vector<KeptAttention> kept_attention;
  int64_t mlp_tile_tokens = 0;   ///< resolved tile size (tiled MLP)
  int64_t loss_tile_tokens = 0;  ///< resolved tile size (tiled loss)
  at::Tensor ids;                ///< [B, s] int64 token ids (block 0's input is their embedding)
  at::Tensor labels;             ///< [B, s] int64, already shifted
  at::Tensor answer_mask;        ///< [B, s] bool, or undefined
  double loss_scale = 1.0;       ///< 1 / N_global
  AnswerStats answer;            ///< filled by the head's forward
  /// Forward only (Trainer::forward_tokens): when set, the head writes each position's CE and
  /// argmax here (token_losses_forward) and builds no graph; nothing is kept for a backward.
  TokenLosses* token_losses = nullptr;
};

/// Binds the step's rank and phase recorder to the current thread (autograd may run backward on
/// its own device threads, which inherit neither).
class RuntimeBinding {
 public:
  explicit RuntimeBinding(const StepRuntime& rt) : rank_(rt.rank), recorder_(rt.recorder) {}

 private:
  RankScope rank_;
  PhaseRecorder::Bind recorder_;
};

/// A phase of the engine: a telemetry PhaseScope that also keeps a per-rank stack of phase names
/// which an exception does not unwind, so a failure (OOM, NaN) can name the phase it happened in.
class EnginePhase {
 public:
  EnginePhase(int rank, const std::string& name);
  ~EnginePhase();
  EnginePhase(const EnginePhase&) = delete;
  EnginePhase& operator=(const EnginePhase&) = delete;

 private:
  PhaseScope scope_;
  int rank_;
  int uncaught_;
};
/// Forgets the phase stack of `rank` (start of a step).
void reset_engine_phases(int rank);
/// The innermost phase `rank` was in when the last exception left it ("" when none).
std::string failing_phase(int rank);

/// "fwd/block.3/attn"-style phase names.
inline std::string block_phase(const char* direction, int64_t layer, const char* part) {
  return std::string(direction) + "/block." + std::to_string(layer) + "/" + part;
}

}  // namespace odyssey
