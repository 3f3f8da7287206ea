// run_training: rank launch (one rank until the distributed stack lands), resume, the step loop
// with stop/pause/live toggles at step boundaries, the telemetry sinks (metrics.jsonl, trace.json,
// summary.json, the studio's Timeline) and checkpoints. defines: RunControl, run_training,
// export_full_state, import_full_state
#include "engine/train/run.h"

#include <chrono>

#include "engine/config/preset.h"
#include "engine/config/sizes.h"
#include "engine/parallel/job.h"
#include "engine/parallel/rank_launch.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/metrics_jsonl.h"
#include "engine/telemetry/phase_peaks.h"
#include "engine/telemetry/summary.h"
#include "engine/telemetry/timeline.h"
#include "engine/telemetry/trace_writer.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/files.h"
#include "engine/util/json.h"

namespace odyssey {

// [section] RunControl ----------------------------------------------------------------------------

void RunControl::request_stop() {
  stop_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  cv_.notify_all();
}

void RunControl::pause() { paused_ = true; }

void RunControl::resume() {
  paused_ = false;
  std::lock_guard<std::mutex> lock(mutex_);
  cv_.notify_all();
}

void RunControl::set_memory(const MemoryConfig& memory, int64_t version) {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_history_[version] = memory;
  memory_version_ = std::max(memory_version_, version);
}

int64_t RunControl::memory_version() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return memory_version_;
}

MemoryConfig RunControl::memory_of(int64_t version) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memory_history_.find(version);
  if (it == memory_history_.end())
    throw std::logic_error("run control: no memory toggles with version " + std::to_string(version));
  return it->second;
}

bool RunControl::wait_while_paused(bool notify) {
  if (!paused_) return !stop_;
  if (notify && on_pause_change) on_pause_change(true);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !paused_.load() || stop_.load(); });
  }
  if (notify && on_pause_change) on_pause_change(false);
  return !stop_;
}

const char* to_string(RunOutcome::Status status) {
  switch (status) {
    case RunOutcome::Status::Finished: return "finished";
    case RunOutcome::Status::Stopped: return "stopped";
    case RunOutcome::Status::Failed: return "failed";
  }
  return "?";
}

// [section] full state (restart hand-over) -----------------------------------------------------------

FullState export_full_state(Trainer& trainer) {
  const RankContext& ctx = trainer.rank_context();
  FullState state;
  state.next_step = trainer.next_step();
  state.optimizer_steps = trainer.optimizer().steps_taken();
  state.model = trainer.config().model;
  CategoryScope category(MemCategory::Other);
  for (auto* g : trainer.model().groups()) {
    std::vector<at::Tensor> full;
    for (const at::Tensor& shard : {g->master.detach(), g->exp_avg, g->exp_avg_sq}) {
      at::Tensor all = at::empty({g->padded_numel()}, shard.options());  // [padded] fp32
      if (g->sharded())
        ctx.world->all_gather(all, shard);
      else
        all.copy_(shard);
      full.push_back(all.narrow(0, 0, g->numel()).to(at::kCPU).clone());  // [N] fp32 on the CPU
    }
    state.groups[g->name()] = std::move(full);
  }
  return state;
}

void import_full_state(Trainer& trainer, const FullState& state) {
  if (!(state.model == trainer.config().model))
    throw std::invalid_argument("restart: the model changed; weights cannot be carried over");
  at::NoGradGuard no_grad;
  for (auto* g : trainer.model().groups()) {
    const auto& full = state.groups.at(g->name());
    const at::Tensor targets[3] = {g->master.detach(), g->exp_avg, g->exp_avg_sq};
    for (int k = 0; k < 3; ++k) {
      at::Tensor padded = at::zeros({g->padded_numel()}, at::kFloat);
      padded.narrow(0, 0, g->numel()).copy_(full[k]);
      targets[k].copy_(padded.narrow(0, g->shard_offset(), g->shard_numel()));
    }
    g->reshard();
  }
  trainer.set_next_step(state.next_step);
  trainer.optimizer().set_steps_taken(state.optimizer_steps);
}

// [section] the run -------------------------------------------------------------------------------

namespace {

// Everything one run writes, shared by its rank threads.
struct RunSinks {  // all thread-safe
  std::unique_ptr<MetricsJsonlWriter> metrics;
  std::unique_ptr<TraceWriter> trace;
  std::atomic<bool> tracing{false};
  PhasePeakTable run_peaks;
};

std::string describe_memory(const MemoryConfig& m) {
  std::string s;
  auto add = [&](bool on, const std::string& what) {
    if (on) s += (s.empty() ? "" : ", ") + what;
  };
  add(m.activation_checkpointing, "checkpointing");
  add(m.offload_activations && m.activation_checkpointing, "offload");
  add(m.tiled_mlp, "tiled MLP");
  add(m.tiled_loss, "tiled loss");
  add(m.untied_ulysses, "untied Ulysses");
  return s.empty() ? "no memory techniques" : s;
}

// The step loop of one rank. Rank 0 decides at each boundary (continue, stop, pause, which live
// toggles) and broadcasts the decision, so every rank acts at the same step; rank 0 writes the
// outputs. Peaks of every rank reach rank 0 through an all-gather (threads, torchrun, emulation).
void train_rank(const RunConfig& cfg, RankContext& ctx, const RunOptions& opt, RunSinks& sinks, RunOutcome& out) {
  const bool lead = ctx.rank == 0;
  auto log = [&](const std::string& line) {
    if (lead && opt.log) opt.log(line);
  };
  Trainer trainer(cfg, ctx);
  PhaseRecorder& recorder = trainer.recorder();
  if (opt.epoch_s >= 0) recorder.set_epoch_s(opt.epoch_s);
  if (opt.timeline) opt.timeline->attach(recorder);
  if (sinks.trace) {
    recorder.add_sink([&sinks](const PhaseRecord& r) {
      if (sinks.tracing) sinks.trace->on_record(r);
    });
    recorder.add_edge_sink([&sinks](const PhaseEdge& e) {
      if (sinks.tracing) sinks.trace->on_edge(e);
    });
  }
  if (opt.initial_state) {
    import_full_state(trainer, *opt.initial_state);
    log("restart: weights and optimizer state carried over at step " + std::to_string(trainer.next_step()));
  }
  if (!opt.resume_dir.empty()) {
    const CheckpointInfo info = load_checkpoint(trainer, opt.resume_dir);
    log("resumed from " + info.path + " at step " + std::to_string(info.step));
  }
  for (const auto& note : trainer.take_notes()) log(note);
  if (ctx.world_size > 1 || ctx.emulated)
    log("ranks: " + std::to_string(ctx.world_size) + " (Ulysses " + std::to_string(ctx.sp_size) + " x data " +
        std::to_string(ctx.dp_size) + (cfg.parallel.fsdp ? ", FSDP" : "") + (ctx.emulated ? ", emulated" : "") + ")");
  log("memory: " + describe_memory(cfg.memory));

  const int64_t total = opt.steps >= 0 ? opt.steps : cfg.training.steps;
  const double flops_per_token = plan_step_time(cfg).model_flops_per_token;
  const double peak_flops = cfg.hardware.bf16_tflops * 1e12 * ctx.world_size;
  int64_t config_version = 0;
  int64_t steps_run = 0;
  const bool write_checkpoints = opt.checkpoints && !opt.out_dir.empty();
  const int reported_ranks = ctx.emulated ? 1 : ctx.world_size;  // emulation: the other ranks do not exist
  at::Tensor decision, peaks;
  {
    CategoryScope category(MemCategory::Other);
    decision = at::zeros({2}, at::TensorOptions().dtype(at::kLong).device(ctx.device));               // [action, version]
    peaks = at::zeros({2LL * ctx.world_size}, at::TensorOptions().dtype(at::kDouble).device(ctx.device));  // [W x 2]
  }
  enum Action : int64_t { kContinue = 0, kStop = 1, kPause = 2 };

  while (trainer.next_step() < total) {
    // Step boundary: rank 0 decides for all.
    int64_t action = kContinue, version = config_version;
    if (lead && opt.control) {
      action = opt.control->stop_requested() ? kStop : opt.control->paused() ? kPause : kContinue;
      version = opt.control->memory_version();
    }
    if (ctx.world_size > 1) {
      decision[0] = action;
      decision[1] = version;
      ctx.world->broadcast(decision, 0);
      action = decision[0].item<int64_t>();
      version = decision[1].item<int64_t>();
    }
    if (action == kStop) {
      out.status = RunOutcome::Status::Stopped;
      break;
    }
    if (action == kPause) {
      // Every rank waits on the shared control (in-process ranks; a pause only comes from the
      // Session), then the boundary is decided again.
      if (opt.control) opt.control->wait_while_paused(/*notify=*/lead);
      continue;
    }
    if (version > config_version && opt.control) {
      const MemoryConfig memory = opt.control->memory_of(version);
      config_version = version;
      trainer.set_memory(memory);
      for (const auto& note : trainer.take_notes()) log(note);
      log("memory toggles applied at step " + std::to_string(trainer.next_step()) + ": " + describe_memory(memory));
    }
    sinks.tracing = sinks.trace && steps_run < cfg.output.trace_steps;  // the first trace_steps steps
    const StepResult r = trainer.step();  // throws StepFailure
    ++steps_run;

    at::Tensor mine = at::tensor({static_cast<double>(r.device_peak), static_cast<double>(r.host_peak)},
                                 at::TensorOptions().dtype(at::kDouble).device(ctx.device));  // [2]
    if (ctx.world_size > 1)
      ctx.world->all_gather(peaks, mine);
    else
      peaks.copy_(mine);
    PhasePeakTable step_peaks;
    step_peaks.add(recorder.take_records());
    if (lead) {
      StepMetrics m;
      m.step = r.step;
      m.loss = r.loss;
      m.loss_meaningful = !ctx.emulated;
      m.step_time_s = r.step_time_s;
      m.tokens_per_s = r.step_time_s > 0 ? r.tokens / r.step_time_s : 0;
      m.mfu = peak_flops > 0 ? flops_per_token * m.tokens_per_s / peak_flops : 0;
      m.lr = r.lr;
      m.grad_norm = r.grad_norm;
      m.config_version = config_version;
      const at::Tensor host = peaks.cpu();
      for (int k = 0; k < reported_ranks; ++k) {
        m.rank_peak_bytes.push_back(static_cast<int64_t>(host[2 * k].item<double>()));
        m.rank_host_peak_bytes.push_back(static_cast<int64_t>(host[2 * k + 1].item<double>()));
        m.peak_bytes = std::max(m.peak_bytes, m.rank_peak_bytes.back());
      }
      sinks.run_peaks.merge(step_peaks);
      if (sinks.metrics) sinks.metrics->write(m, &step_peaks);
      if (sinks.trace && sinks.tracing) sinks.trace->on_step(m);
      if (opt.timeline) opt.timeline->add_metrics(m);
      out.metrics.push_back(m);
      out.results.push_back(r);
      if (opt.on_step) opt.on_step(m, r);
    } else {
      sinks.run_peaks.merge(step_peaks);  // other in-process ranks' phases count in summary.json
    }
    if (write_checkpoints && cfg.output.checkpoint_every > 0 && trainer.next_step() % cfg.output.checkpoint_every == 0 &&
        trainer.next_step() < total) {
      save_checkpoint(trainer, opt.out_dir);
      log("checkpoint at step " + std::to_string(trainer.next_step()));
    }
  }
  if (lead) out.next_step = trainer.next_step();
  if (write_checkpoints) {
    save_checkpoint(trainer, opt.out_dir);
    log("checkpoint at step " + std::to_string(trainer.next_step()) + " in " + opt.out_dir + "/checkpoints");
  }
  if (opt.final_state) {
    auto state = std::make_shared<FullState>(export_full_state(trainer));  // collective
    if (lead) *opt.final_state = std::move(state);
  }
}

// The first failure of any rank, kept with its type (the rank launcher reports only the text).
struct FirstFailure {
  std::mutex mutex;
  std::exception_ptr error;
  void record(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = e;
  }
};

}  // namespace

// The seam where a job's ranks start (engine/parallel's launchers): torchrun's rank of this
// process, rank 0 alone under emulation, or parallel.world_size rank threads (one thread for a
// single rank too, for the same thread-local behaviour).
void run_on_ranks(const RunConfig& cfg, const std::function<void(RankContext&)>& fn) {
  const JobMode mode = job_mode(cfg.parallel);
  if (mode == JobMode::Torchrun) {
    const TorchrunEnv env = *torchrun_env();
    configure_threads(1);
    RankContext ctx = join_torchrun(env, cfg.parallel, resolve_device(cfg.training.device, env.local_rank));
    RankScope rank(ctx.rank);
    fn(ctx);
    return;
  }
  configure_threads(static_cast<int>(cfg.parallel.world_size));  // also under emulation: a real rank's share
  if (mode == JobMode::Emulated) {
    ParallelConfig one;  // one thread bound to rank 0, like a real rank thread
    run_rank_threads(one, at::kCPU, [&](RankContext&) {
      RankContext ctx = make_emulated_rank_context(cfg.parallel, resolve_device(cfg.training.device, 0));
      fn(ctx);
    });
    return;
  }
  run_rank_threads(cfg.parallel, resolve_device(cfg.training.device, 0), fn);
}

RunOutcome run_training(const RunConfig& cfg, const RunOptions& opt) {
  RunOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  RunSinks sinks;
  std::string write_error;
  try {
    MemoryTracker::instance().install_cpu_allocator();
    if (!opt.out_dir.empty()) {
      std::string error;
      if (!make_dirs(opt.out_dir, &error)) throw std::runtime_error("--out: " + error);
      const bool append = !opt.resume_dir.empty() && same_path(opt.resume_dir, opt.out_dir);
      sinks.metrics = std::make_unique<MetricsJsonlWriter>(opt.out_dir + "/metrics.jsonl", append);
      if (cfg.output.trace && cfg.output.trace_steps > 0)
        sinks.trace = std::make_unique<TraceWriter>(opt.out_dir + "/trace.json");
    }
    FirstFailure failure;
    try {
      run_on_ranks(cfg, [&](RankContext& ctx) {
        try {
          train_rank(cfg, ctx, opt, sinks, out);
        } catch (...) {
          failure.record(std::current_exception());
          throw;  // the launcher abandons the other ranks' collectives at once
        }
      });
    } catch (...) {
      if (failure.error) std::rethrow_exception(failure.error);  // the first failing rank's error, typed
      throw;
    }
  } catch (const StepFailure& e) {
    out.status = RunOutcome::Status::Failed;
    out.error = e.what();
  } catch (const DataError& e) {
    out.status = RunOutcome::Status::Failed;
    out.bad_input = true;
    out.error = e.what();
  } catch (const CheckpointError& e) {
    out.status = RunOutcome::Status::Failed;
    out.bad_input = true;
    out.error = e.what();
  } catch (const std::invalid_argument& e) {
    out.status = RunOutcome::Status::Failed;
    out.bad_input = true;
    out.error = e.what();
  } catch (const std::exception& e) {
    out.status = RunOutcome::Status::Failed;
    out.error = e.what();
  }
  if (out.status == RunOutcome::Status::Failed && opt.log) opt.log("error: " + out.error);
  if (!out.metrics.empty() && out.next_step == 0) out.next_step = out.metrics.back().step + 1;

  if (!opt.out_dir.empty() && is_directory(opt.out_dir)) {
    try {
      if (sinks.trace) sinks.trace->close();
    } catch (const std::exception& e) {
      if (opt.log) opt.log(std::string("trace: ") + e.what());
    }
    RunSummary summary;
    summary.preset = opt.preset;
    summary.status = to_string(out.status);
    summary.error = out.error;
    summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    summary.steps = out.metrics;
    summary.phases = &sinks.run_peaks;
    std::string extra;
    JsonWriter w(extra);
    w.begin_object().key("next_step").value(out.next_step).key("memory").value(describe_memory(cfg.memory));
    if (!out.results.empty() && out.results.front().has_answers) {
      w.key("answer_loss_first").value(out.results.front().answer_loss);
      w.key("answer_loss_final").value(out.results.back().answer_loss);
      w.key("answer_accuracy_final").value(out.results.back().answer_accuracy);
    }
    w.end_object();
    summary.extra_json = extra;
    if (!write_summary_json(opt.out_dir + "/summary.json", summary, &write_error) && opt.log)
      opt.log("summary: " + write_error);
  }
  return out;
}

}  // namespace odyssey
