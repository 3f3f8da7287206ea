// Trainer: one rank's training step (forward through the loss, backward through the block nodes,
// global grad norm + clip, AdamW) with OOM / NaN handling (see trainer.h).
// defines: Trainer
#include "engine/train/trainer.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdlib>
#include <cmath>
#include <exception>
#include <regex>
#include <stdexcept>
#include <thread>

#include "engine/layout/planned_buffers.h"
#include "engine/layout/schedule_rules.h"
#include "engine/layout/tiles.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

struct Trainer::Forward {
  double loss = 0;
  bool has_answers = false;
  double answer_ce = 0, answer_count = 0, answer_correct = 0;
};

Trainer::Trainer(const RunConfig& cfg, const RankContext& ctx)
    : cfg_(cfg),
      ctx_(ctx),
      device_(ctx.device),
      optimizer_(cfg.training),
      offload_(ctx.device),
      kept_offload_(ctx.device, OffloadedKind::KeptAttention),
      recorder_(ctx.rank, ctx.slot) {
  MemoryTracker::instance().install_cpu_allocator();
  at::globalContext().setFlushDenormal(true);  // see configure_threads: denormals cost seconds per step
  use_portable_cpu_kernels();                  // one CPU step's memory on every x86 CPU (devices.h)
  // On CUDA the rank's device bytes come from the caching allocator of its GPU.
  if (device_.is_cuda()) {
    const int index = device_.index() < 0 ? 0 : device_.index();
    MemoryTracker::instance().set_cuda_device(ctx_.slot, index);
    // Phase times from CUDA events, not from when the host queued the kernels.
    timeline_ = make_cuda_timeline(index);
    recorder_.set_device_timeline(timeline_.get());
    // cuBLAS's two workspaces (this thread's, autograd's device thread's) before step 1, so that
    // its phases hold them as every later step's do, and as the plan does (BlasWorkspaces)
    const int64_t workspace_bytes = prepare_blas_workspaces(index, ctx_.slot);
    if (workspace_bytes != BlasWorkspaces::kBytesEach)
      notes_.push_back("cuBLAS workspaces: " + std::to_string(workspace_bytes) +
                       " B each (CUBLAS_WORKSPACE_CONFIG=" + prepare_cuda().blas_workspaces.config +
                       "), the plan counts " + std::to_string(BlasWorkspaces::kBytesEach) + " B each");
  }
  RankScope rank(ctx_.slot);
  if (auto rule = sequence_shard_rule(cfg_.training.seq_len, ctx_.sp_size))  // the validator's rule, for the real group
    throw std::invalid_argument("training.seq_len = " + std::to_string(cfg_.training.seq_len) + " " + *rule);
  data_ = make_dataset(cfg_.training, cfg_.model);
  notes_.push_back("data: " + data_->describe());
  // The memory stack, technique by technique (engine/model/memory_stack.h): the groups are laid
  // out by it here, and every step runs it.
  stack_ = memory_stack(cfg_, with_planned_sizes(cfg_).memory, ctx_);
  model_ = std::make_unique<LlamaModel>(cfg_.model, ctx_, stack_.groups);
  model_->init(static_cast<uint64_t>(cfg_.training.seed));
}

void Trainer::pin_offload_slab() {
  // CUDA: the block inputs' pinned slab now, and the kept attention's
  // (memory.offload_kept_attention), each sized by the rule every step's forward applies
  // (LlamaModel::start_offload_step, start_kept_offload_step), so step 1 finds both made. Pinning
  // takes seconds per tens of GiB (about 150 GiB a rank at 5M, 8 processes at once), which a
  // measurement of one step would have counted as the step's; a node short of host memory fails
  // here, before any step.
  if (!device_.is_cuda() || !stack_.offload_block_inputs) return;
  RankScope rank(ctx_.slot);
  const int64_t local_tokens = cfg_.training.seq_len / ctx_.sp_size;
  model_->start_offload_step(offload_, cfg_.training.batch_size, local_tokens);
  if (stack_.offload_kept_attention)
    model_->start_kept_offload_step(kept_offload_, stack_, cfg_.training.batch_size, local_tokens);
}

Trainer::~Trainer() {
  try {
    settle_host_updates();
  } catch (const std::exception&) {  // a device already in error: the pipeline's destructor still finishes the passes
  }
}

bool Trainer::overlaps_host_optimizer() const {
  return overlap_host_optimizer_.value_or(
      host_optimizer_overlaps_forward(device_.is_cuda(), cfg_.memory.offload_optimizer));
}

void Trainer::settle_host_updates() {
  RankScope rank(ctx_.slot);
  // Every group's pass is waited for, even past a group whose upload fails (it stays pending,
  // FlatParamGroup::await_update): no pass is left running on the worker when this returns, so a
  // caller that goes on to zero the gradients never races with a pass still reading them. The
  // first failure is rethrown after.
  std::exception_ptr first_failure;
  for (FlatParamGroup* g : model_->groups()) {
    try {
      g->await_update();
    } catch (...) {
      if (!first_failure) first_failure = std::current_exception();
    }
  }
  if (first_failure) std::rethrow_exception(first_failure);
  record_host_pass_span();
}

void Trainer::record_host_pass_span() {
  if (!host_span_pending_) return;
  const auto [begin_s, end_s] = host_updates_.last_pass_span_s();
  if (end_s <= 0) return;  // still running
  host_span_pending_ = false;
  DeviceSpan span;
  span.name = "host adamw (step " + std::to_string(optimizer_.steps_taken()) + ")";
  span.category = "optimizer";
  span.track = "host optimizer";
  span.t_begin_s = begin_s;
  span.t_end_s = end_s;
  recorder_.add_host_span(std::move(span));
}

void Trainer::set_memory(const MemoryConfig& memory) {
  RunConfig next = cfg_;
  next.memory = memory;
  // heads_per_stage and mlp_tile_tokens = "auto": the planner's sizes at this run's length, the
  // ones the plan and the studio show (with_planned_sizes); the model only sees concrete sizes.
  // A technique without the one it requires throws here, before anything changes.
  MemoryStack stack = memory_stack(next, with_planned_sizes(next).memory, ctx_);
  stack.defer_reduce_scatter = stack_.defer_reduce_scatter;  // a rank setting (set_defer_reduce_scatter)
  settle_host_updates();
  cfg_.memory = memory;
  stack_ = std::move(stack);
  // A host store the new stack no longer uses lets its memory go (CUDA: its pinned slab, which the
  // new table's plan no longer counts); a later table that uses it again makes a new one.
  if (!stack_.offload_block_inputs) offload_.set_transport(nullptr);
  if (!stack_.offload_kept_attention) kept_offload_.set_transport(nullptr);
  // Optimizer offload moves the fp32 states between host and device memory here, at the step
  // boundary (no graph holds the parameter views).
  for (FlatParamGroup* g : model_->groups()) g->set_states_on_host(stack_.optimizer_states_on_host);
}

std::vector<std::string> Trainer::take_notes() { return std::exchange(notes_, {}); }

double Trainer::run_forward_backward(int64_t step, Forward* out) {
  const RankBatch batch = make_rank_batch(*data_, step, cfg_.training, ctx_, device_);
  ModelInputs in{batch.ids, batch.labels, batch.answer_mask, batch.first_position, batch.global_tokens};
  if (cfg_.training.document_mask) {  // labels across a boundary already -100 (make_rank_batch)
    in.documents.starts = batch.document_starts;
    in.restart_positions = cfg_.training.document_positions == DocumentPositions::Restart;
  }
  return run_inputs(in, step, out);
}

double Trainer::run_inputs(const ModelInputs& in, int64_t step, Forward* out) {
  StepRuntime rt;
  at::Tensor loss = model_->forward(in, stack_, OffloadStores{&offload_, &kept_offload_}, &recorder_, &rt);

  // Global loss and answer statistics: one all-reduce of four sums over the world.
  at::Tensor sums;
  {
    CategoryScope category(MemCategory::Other);
    sums = at::zeros({4}, at::TensorOptions().dtype(at::kDouble).device(device_));  // [4]
    sums[0] = loss.detach().to(at::kDouble).reshape({});
    if (rt.answer.ce_sum.defined()) {
      sums[1] = rt.answer.ce_sum.to(device_);
      sums[2] = rt.answer.count.to(device_);
      sums[3] = rt.answer.correct.to(device_);
    }
    if (ctx_.world_size > 1) ctx_.world->all_reduce_sum(sums);
  }
  const at::Tensor host = sums.cpu();
  const double* s = host.data_ptr<double>();
  out->loss = s[0];
  out->has_answers = in.answer_mask.defined();
  out->answer_ce = s[1];
  out->answer_count = s[2];
  out->answer_correct = s[3];
  if (!std::isfinite(out->loss))
    throw StepFailure(StepFailure::Kind::NonFinite, step + 1, "fwd/loss", -1, -1,
                      "loss is " + std::string(std::isnan(out->loss) ? "NaN" : "Inf") + " at step " +
                          std::to_string(step + 1) + " (phase fwd/loss); stopping");
  loss.backward();
  rt.finish_pending_gradient();  // the lowest block's reduce-scatter (deferred on GPUs)
  loss = at::Tensor();           // the graph (and what it saved) dies here
  offload_.clear();
  kept_offload_.clear();
  return out->loss;
}

double Trainer::forward_backward(int64_t step) {
  RankScope rank(ctx_.slot);  // a pipelined update is awaited at each group's first use, as in step()
  PhaseRecorder::Bind bind(&recorder_);
  reset_engine_phases(ctx_.slot);
  Forward f;
  try {
    const double loss = run_forward_backward(step, &f);
    recorder_.settle();
    return loss;
  } catch (const std::exception& e) {
    fail(e, step);
  }
}

double Trainer::forward_backward(const ModelInputs& in) {
  RankScope rank(ctx_.slot);
  PhaseRecorder::Bind bind(&recorder_);
  reset_engine_phases(ctx_.slot);
  Forward f;
  try {
    const double loss = run_inputs(in, next_step_, &f);
    recorder_.settle();
    return loss;
  } catch (const std::exception& e) {
    fail(e, next_step_);
  }
}

TokenLosses Trainer::forward_tokens(const ModelInputs& in, double* loss) {
  RankScope rank(ctx_.slot);
  PhaseRecorder::Bind bind(&recorder_);
  reset_engine_phases(ctx_.slot);
  // Memory: checkpointing, tiling and the Untied stages run as in training; what only a backward
  // reads is neither offloaded nor kept (forward_only_stack).
  const MemoryStack stack = forward_only_stack(stack_);
  try {
    at::NoGradGuard no_grad;
    StepRuntime rt;
    TokenLosses out;
    rt.token_losses = &out;
    const at::Tensor local = model_->forward(in, stack, OffloadStores{}, &recorder_, &rt);  // scalar
    const double value = local.to(at::kDouble).item<double>();
    if (!std::isfinite(value))
      throw StepFailure(StepFailure::Kind::NonFinite, next_step_ + 1, "fwd/loss", -1, -1,
                        "loss is " + std::string(std::isnan(value) ? "NaN" : "Inf") + " in a forward-only pass");
    if (loss != nullptr) *loss = value;
    recorder_.settle();
    return out;
  } catch (const std::exception& e) {
    fail(e, next_step_);
  }
}

StepResult Trainer::step() {
  RankScope rank(ctx_.slot);
  PhaseRecorder::Bind bind(&recorder_);
  MemoryTracker& tracker = MemoryTracker::instance();
  const int64_t step = next_step_;  // 0-based index: data, schedule
  recorder_.set_step(step + 1);     // reported: the (step+1)-th step
  reset_engine_phases(ctx_.slot);
  tracker.reset_peak(ctx_.slot);
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.step = step + 1;
  try {
    EnginePhase phase(ctx_.slot, "step");
    Forward f;
    run_forward_backward(step, &f);
    r.loss = f.loss;
    r.has_answers = f.has_answers && f.answer_count > 0;
    r.answer_loss = f.answer_count > 0 ? f.answer_ce / f.answer_count : 0;
    r.answer_accuracy = f.answer_count > 0 ? f.answer_correct / f.answer_count : 0;
    optimizer_phase(step, r);
  } catch (const std::exception& e) {
    fail(e, step);
  }
  r.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // A GPU step: its phases get device times now that its work is done (the loss was read), and
  // its duration is the device's from the first phase edge to the last.
  if (const std::optional<double> device_span = recorder_.settle()) r.step_time_s = *device_span;
  r.tokens = cfg_.training.batch_size * cfg_.training.seq_len * ctx_.dp_size;
  const MemorySnapshot snap = tracker.snapshot(ctx_.slot);
  r.device_peak = snap.device_peak;
  r.host_peak = snap.host_peak;
  next_step_ = step + 1;
  return r;
}

void Trainer::optimizer_phase(int64_t step, StepResult& r) {
  EnginePhase opt(ctx_.slot, "optimizer");
  auto groups = model_->groups();
  {
    // offloaded: the copies down land; on a GPU each group's norm was taken on the device
    EnginePhase norm(ctx_.slot, "grad_norm");  // nested: "optimizer/grad_norm"
    r.grad_norm = global_grad_norm(groups, ctx_);
  }
  if (!std::isfinite(r.grad_norm))
    throw StepFailure(StepFailure::Kind::NonFinite, step + 1, "bwd", -1, -1,
                      "gradient norm is " + std::string(std::isnan(r.grad_norm) ? "NaN" : "Inf") + " at step " +
                          std::to_string(step + 1) + " (phase bwd, loss " + std::to_string(r.loss) + "); stopping");
  const double clip = clip_factor(r.grad_norm, cfg_.training.grad_clip);  // applied inside the step
  r.lr = lr_at(cfg_.training, step);
  record_host_pass_span();  // the last step's pipelined passes, which this step's forward awaited
  // Pipelined (a GPU with the optimizer offloaded, engine/layout/schedule_rules.h): the host's
  // passes are queued for the worker in the order the next forward uses the groups, and the step
  // ends here. The gradients are zeroed lazily now (flags only; the pass reads the values), and
  // the next backward's first contribution comes after the forward has awaited every group.
  const bool host_states =
      std::all_of(groups.begin(), groups.end(), [](const FlatParamGroup* g) { return g->master.device().is_cpu(); });
  if (overlaps_host_optimizer() && host_states) {
    EnginePhase queue(ctx_.slot, "host_adamw_queued");
    // groups() is the forward's order: embedding, blocks 0..L-1, head
    host_updates_.start(optimizer_, groups, optimizer_.begin_step(r.lr, clip));
    host_span_pending_ = true;
    AdamW::zero_grad(groups);
    return;
  }
  // Optimizer offload: AdamW on the host's shards (one fused AVX2 pass per shard over ATen's
  // threads, the clipping folded in), timed as its own phase; each shard's updated parameters go
  // up to the device as its pass ends, overlapping the next shard's pass (refresh_device_params).
  std::optional<EnginePhase> host;
  if (cfg_.memory.offload_optimizer) host.emplace(ctx_.slot, "host_adamw");  // "optimizer/host_adamw"
  optimizer_.step(groups, r.lr, clip);
  AdamW::zero_grad(groups);
}

StepResult Trainer::apply_gradients() {
  settle_host_updates();
  RankScope rank(ctx_.slot);
  PhaseRecorder::Bind bind(&recorder_);
  const int64_t step = next_step_;
  StepResult r;
  r.step = step + 1;
  try {
    optimizer_phase(step, r);
  } catch (const std::exception& e) {
    fail(e, step);
  }
  next_step_ = step + 1;
  return r;
}

void Trainer::cleanup_after_failure() {
  // a failed step's device may be in error: its held phases go on with their host times, unsettled
  recorder_.deliver_held_on_host_clock();
  // each store is cleared even where the other's wait fails (a device in error): the step's own
  // failure is the one reported, and neither store keeps the failed step's blocks
  for (OffloadStore* store : {&offload_, &kept_offload_}) {
    try {
      store->clear();
    } catch (const std::exception&) {
    }
  }
  model_->reshard_all();
  // After the failed step's buffers are released: a pass queued by the last step is finished,
  // never dropped, and its upload's staging buffer finds the memory the failure held. An upload
  // that still fails stays pending (FlatParamGroup::await_update): the next use retries it.
  try {
    settle_host_updates();
  } catch (const std::exception&) {  // the device is in error: the step's own failure is the one reported
  }
  AdamW::zero_grad(model_->groups());
}

void Trainer::fail(const std::exception& e, int64_t index) {
  const int64_t step = index + 1;  // reported steps count from 1
  const std::string phase = failing_phase(ctx_.slot);
  cleanup_after_failure();
  if (const auto* failure = dynamic_cast<const StepFailure*>(&e)) throw *failure;
  // A collective failed: another rank's fault (the launcher names it); keep the type.
  if (dynamic_cast<const CommError*>(&e) != nullptr)
    throw CommError(std::string(e.what()) + " (at step " + std::to_string(step) +
                    (phase.empty() ? std::string() : " in phase " + phase) + ")");
  int64_t layer = -1;
  std::smatch m;
  if (std::regex_search(phase, m, std::regex("block\\.(\\d+)"))) layer = std::stoll(m[1]);
  // which rank: rank threads report the first failure with its type, not the launcher's "rank R:"
  const std::string on_rank = ctx_.world_size > 1 ? " on rank " + std::to_string(ctx_.rank) : std::string();
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) {
    std::string what = e.what();
    if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) what = c10_error->what_without_backtrace();
    int64_t bytes = -1;
    const std::string first_line = what.substr(0, what.find('\n'));
    if (std::regex_search(first_line, m, std::regex("(\\d+) bytes"))) bytes = std::stoll(m[1]);
    throw StepFailure(StepFailure::Kind::OutOfMemory, step, phase, layer, bytes,
                      "out of memory at step " + std::to_string(step) + " in phase " +
                          (phase.empty() ? std::string("(none)") : phase) +
                          (layer >= 0 ? " (layer " + std::to_string(layer) + ")" : std::string()) + on_rank +
                          (bytes >= 0 ? ", " + std::to_string(bytes) + " bytes requested" : std::string()) + ": " +
                          first_line);
  }
  std::string what = e.what();
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) what = c10_error->what_without_backtrace();
  throw StepFailure(StepFailure::Kind::Other, step, phase, layer, -1,
                    "step " + std::to_string(step) + " failed" + (phase.empty() ? "" : " in phase " + phase) + on_rank +
                        ": " + what.substr(0, what.find('\n')));
}

}  // namespace odyssey
