// The trainer of one rank: model over flat groups, data, AdamW, offload store and phase recorder;
// one call = one optimizer step inside phase scopes, with OOM and NaN turned into StepFailure.
// defines: StepResult, StepFailure, Trainer (resolve_device, compute_dtype, configure_threads: engine/parallel/devices.h)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/memory/offload.h"
#include "engine/model/llama.h"
#include "engine/model/memory_stack.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/devices.h"
#include "engine/telemetry/phase.h"
#include "engine/train/data.h"
#include "engine/train/optimizer.h"

namespace odyssey {

/// One finished optimizer step, as seen by this rank (loss and answer stats are global).
/// Steps are counted from 1 wherever they are reported (StepResult, StepFailure, phase records,
/// metrics, the progress line): step N is the N-th step, after which N steps are complete
/// (next_step() == N, the checkpoint's step). The 0-based index next_step() picks data and lr.
struct StepResult {
  int64_t step = 0;            ///< the step just taken, counted from 1 (= steps completed)
  double loss = 0;             ///< global mean loss: all-reduced sum of loss_local
  bool has_answers = false;    ///< the long-range task: answer_* are meaningful
  double answer_loss = 0;      ///< mean CE over the answer tokens of the global batch
  double answer_accuracy = 0;  ///< fraction of answer tokens predicted exactly
  double grad_norm = 0;        ///< global gradient norm before clipping
  double lr = 0;
  double step_time_s = 0;   ///< the step's duration (on a GPU, on the device's clock)
  int64_t tokens = 0;       ///< tokens of the global batch (B x S x D)
  int64_t device_peak = 0;  ///< this rank's device peak during the step (tracker)
  int64_t host_peak = 0;    ///< this rank's host-pool peak during the step
};

/// A step that could not complete. The trainer has cleaned up (groups resharded, offload store
/// and gradients cleared): the next step or a new Trainer works.
class StepFailure : public std::runtime_error {
 public:
  enum class Kind { OutOfMemory, NonFinite, Other };
  StepFailure(Kind kind, int64_t step, std::string phase, int64_t layer, int64_t bytes, const std::string& message)
      : std::runtime_error(message), kind(kind), step(step), phase(std::move(phase)), layer(layer), bytes(bytes) {}
  Kind kind;
  int64_t step;       ///< the step that failed, counted from 1 (steps completed before it + 1)
  std::string phase;  ///< "fwd/block.3/mlp"
  int64_t layer;      ///< block index, -1 outside the blocks
  int64_t bytes;      ///< bytes requested (OOM), -1 if unknown
};

class Trainer {
 public:
  /// Builds the model (initialised from training.seed), the dataset and the optimizer for the rank
  /// `ctx` (ctx.device decides where). Throws DataError / std::invalid_argument on bad input.
  Trainer(const RunConfig& cfg, const RankContext& ctx);
  ~Trainer();

  /// CUDA with memory.offload_activations: pins the offloaded block inputs' host slab now, as
  /// step 1 would (about 150 GiB a rank for the 8B at 5M), and the kept attention's with
  /// memory.offload_kept_attention, so that a training run's setup holds
  /// the pinning and step 1 does not; no-op otherwise. The training loop calls it once its
  /// weights are loaded; a Trainer that only evaluates never pins.
  void pin_offload_slab();

  /// Runs the step of index next_step() (reported as step next_step() + 1): forward, backward,
  /// clip, AdamW. Throws StepFailure, or CommError (with step and phase) when a collective failed.
  /// With the host AdamW pipelined (overlaps_host_optimizer) the step returns once the passes are
  /// queued: the next step's forward awaits each group's update at its first use, and every
  /// accessor below that exposes the model or the optimizer awaits them all first.
  StepResult step();
  /// Forward + backward of `step`'s batch only (gradients stay in the groups; tests, bench).
  /// Returns the global loss.
  double forward_backward(int64_t step);
  /// Forward + backward of given inputs (this rank's slice; a document's tokens alone, a batch
  /// built by hand), gradients added to what the groups hold. Returns the global loss.
  double forward_backward(const ModelInputs& in);
  /// Forward only of given inputs (evaluation): no graph, no gradient, no optimizer; the memory
  /// techniques the model runs (model_memory()) apply, less what only a backward needs (the
  /// offloaded and kept activations). Returns this rank's per-position CE and argmax ([B, s], CE 0
  /// where the label is -100); `loss` (optional) gets their sum / in.global_tokens, the value
  /// forward_backward(in) returns on one rank. Throws StepFailure as a step does.
  ///   TokenLosses t = trainer.forward_tokens(inputs);  // t.ce [B, s] fp32, t.argmax [B, s] int64
  TokenLosses forward_tokens(const ModelInputs& in, double* loss = nullptr);
  /// The optimizer half of step() on the gradients the groups hold now (global norm, clip, AdamW
  /// at next_step()'s learning rate, gradients zeroed) and next_step() advanced. For tests that
  /// put the gradients there themselves (equivalence on identical gradients).
  StepResult apply_gradients();

  /// Memory toggles for the following steps (no restart: nothing they change is persistent).
  void set_memory(const MemoryConfig& memory);
  const RunConfig& config() const { return cfg_; }
  /// The memory techniques the model runs: config().memory with heads_per_stage and mlp_tile_tokens
  /// = "auto" resolved by the planner (with_planned_sizes) at the run's length.
  const MemoryConfig& model_memory() const { return stack_.memory; }
  /// The memory stack every step runs (engine/model/memory_stack.h).
  const MemoryStack& stack() const { return stack_; }
  const RankContext& rank_context() const { return ctx_; }
  int64_t next_step() const { return next_step_; }
  /// The model, every pipelined host update finished and uploaded (settle_host_updates).
  LlamaModel& model() {
    settle_host_updates();
    return *model_;
  }
  const Dataset& dataset() const { return *data_; }
  PhaseRecorder& recorder() { return recorder_; }
  AdamW& optimizer() {
    settle_host_updates();
    return optimizer_;
  }
  /// Finishes the pipelined host AdamW of the last step (HostUpdatePipeline): waits for every
  /// group's pass and sends its parameters up. Nothing when none is pending.
  void settle_host_updates();
  /// The host AdamW runs under the next step's forward (engine/layout/schedule_rules.h: on a GPU
  /// with the optimizer offloaded); tests turn it on for CPU ranks to check its arithmetic.
  void set_overlap_host_optimizer(bool on) { overlap_host_optimizer_ = on; }
  bool overlaps_host_optimizer() const;
  const OffloadStore& offload_store() const { return offload_; }
  OffloadStore& offload_store() { return offload_; }
  const OffloadStore& kept_attention_store() const { return kept_offload_; }
  OffloadStore& kept_attention_store() { return kept_offload_; }
  /// Lines worth showing the user (dispatch notes, dataset description), taken once.
  std::vector<std::string> take_notes();

  /// Restores the step counter (checkpoint resume; weights and moments are loaded separately).
  void set_next_step(int64_t step) { next_step_ = step; }
  /// FSDP reduce-scatters overlap the next block's backward (StepRuntime::defer_reduce_scatter):
  /// on by default on GPUs; tests turn it on for CPU ranks to check the schedule's arithmetic.
  void set_defer_reduce_scatter(bool on) { stack_.defer_reduce_scatter = on; }
  bool defer_reduce_scatter() const { return stack_.defer_reduce_scatter; }

 private:
  struct Forward;
  double run_forward_backward(int64_t step, Forward* out);
  double run_inputs(const ModelInputs& in, int64_t step, Forward* out);
  /// The last pipelined passes as a span on the rank's "host optimizer" track, once they ended.
  void record_host_pass_span();
  void optimizer_phase(int64_t step, StepResult& r);
  [[noreturn]] void fail(const std::exception& e, int64_t index);
  void cleanup_after_failure();

  RunConfig cfg_;
  MemoryStack stack_;  ///< memory_stack(): the techniques the model runs, "auto" sizes resolved
  RankContext ctx_;
  at::Device device_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<Dataset> data_;
  AdamW optimizer_;
  /// Declared after model_ and optimizer_: destroyed first, finishing its passes over their memory.
  HostUpdatePipeline host_updates_;
  std::optional<bool> overlap_host_optimizer_;  ///< set_overlap_host_optimizer; else the rule
  bool host_span_pending_ = false;              ///< the last pipelined passes are not in the trace yet
  OffloadStore offload_;       ///< the checkpointed block inputs on the host (memory.offload_activations)
  OffloadStore kept_offload_;  ///< the kept attention on the host (memory.offload_kept_attention)
  /// GPU ranks: phase times on the device's own clock, and NVTX ranges (declared before
  /// recorder_, which points at it).
  std::unique_ptr<DeviceTimeline> timeline_;
  PhaseRecorder recorder_;
  int64_t next_step_ = 0;
  std::vector<std::string> notes_;
};

}  // namespace odyssey
