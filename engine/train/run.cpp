// run_training: the one training loop, on every rank of every launch mode (rank threads, torchrun
// processes, emulation): resume, stop/pause/live toggles decided at step boundaries for all ranks,
// every rank's peaks and phase records gathered to rank 0, which writes metrics.jsonl, trace.json
// and summary.json and feeds the studio's Timeline; checkpoints. defines: RunControl,
// run_training, export_full_state, import_full_state
#include "engine/train/run.h"

#include <chrono>

#include "engine/config/preset.h"
#include "engine/config/sizes.h"
#include "engine/parallel/job.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/metrics_jsonl.h"
#include "engine/telemetry/phase_peaks.h"
#include "engine/telemetry/summary.h"
#include "engine/telemetry/timeline.h"
#include "engine/telemetry/trace_writer.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/step_records.h"
#include "engine/util/files.h"
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

// What one run shares between the ranks of this process. The outputs exist only in the process
// that runs rank 0 (a torchrun process with RANK != 0 writes checkpoints only).
struct RunShared {
  bool reports = true;            // rank 0 runs here: outputs, log, RunOutcome's metrics
  bool separate_processes = false;  // torchrun: each rank's RunOutcome is its own process's
  std::unique_ptr<MetricsJsonlWriter> metrics;
  std::unique_ptr<TraceWriter> trace;
  PhasePeakTable run_peaks;  // summary.json: every rank's phases (gathered to rank 0)
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

enum Action : int64_t { kContinue = 0, kStop = 1, kPause = 2 };

// The step boundary, decided for all ranks at once: a max all-reduce of {stop, pause, version}.
// Any rank's stop request counts (each torchrun process has its own Ctrl-C); pause and the live
// toggles' version come from rank 0 (the Session's control).
std::pair<int64_t, int64_t> decide(const RankContext& ctx, const RunControl* control, at::Tensor& decision,
                                   int64_t version) {
  const bool lead = ctx.rank == 0;
  int64_t stop = 0, pause = 0;
  if (control) {
    stop = control->stop_requested() ? 1 : 0;
    if (lead) {
      pause = control->paused() ? 1 : 0;
      version = control->memory_version();
    }
  }
  decision[0] = stop;
  decision[1] = pause;
  decision[2] = lead ? version : 0;
  ctx.world->all_reduce_max(decision);
  const at::Tensor d = decision.cpu();
  const int64_t action = d[0].item<int64_t>() ? kStop : d[1].item<int64_t>() ? kPause : kContinue;
  return {action, d[2].item<int64_t>()};
}

// The step loop of one rank (the one loop of every launch mode). Rank 0 writes the outputs from
// every rank's gathered peaks and phase records.
void train_rank(const RunConfig& cfg, RankContext& ctx, const RunOptions& opt, RunShared& shared, RunOutcome& out) {
  const bool lead = ctx.rank == 0;
  const bool owns_outcome = lead || shared.separate_processes;  // who fills this process's RunOutcome
  auto log = [&](const std::string& line) {
    if (lead && opt.log) opt.log(line);
  };
  Trainer trainer(cfg, ctx);
  PhaseRecorder& recorder = trainer.recorder();
  if (opt.epoch_s >= 0) {
    recorder.set_epoch_s(opt.epoch_s);
  } else if (shared.separate_processes) {
    // Processes have their own clocks: count from a common instant (the barrier's end), so the
    // ranks' phases line up in one trace.
    ctx.world->barrier();
    recorder.set_epoch_s(telemetry_now_s());
  }
  if (opt.timeline) opt.timeline->attach(recorder);
  // Every rank's phase records go to rank 0 when there are outputs to write (a collective: every
  // rank takes the same decision from the same options).
  const bool collect = !opt.out_dir.empty();
  const bool trace = collect && cfg.output.trace && cfg.output.trace_steps > 0;
  EdgeBuffer edges;
  if (trace) edges.attach(recorder);
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
        std::to_string(ctx.dp_size) + (cfg.parallel.fsdp ? ", FSDP" : "") + (ctx.emulated ? ", emulated" : "") +
        (shared.separate_processes ? ", one process each" : "") + ")");
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
    decision = at::zeros({3}, at::TensorOptions().dtype(at::kLong).device(ctx.device));               // [stop, pause, version]
    peaks = at::zeros({2LL * ctx.world_size}, at::TensorOptions().dtype(at::kDouble).device(ctx.device));  // [W x 2]
  }

  while (trainer.next_step() < total) {
    const auto [action, version] = decide(ctx, opt.control, decision, config_version);
    if (action == kStop) {
      if (owns_outcome) out.status = RunOutcome::Status::Stopped;
      break;
    }
    if (action == kPause) {
      // Every in-process rank waits on the shared control (a pause comes from the Session, which
      // runs rank threads), then the boundary is decided again.
      if (opt.control) opt.control->wait_while_paused(/*notify=*/lead);
      continue;
    }
    if (version > config_version && opt.control) {
      const MemoryConfig memory = opt.control->memory_of(version);
      config_version = version;
      trainer.set_memory(memory);
      for (const auto& note : trainer.take_notes()) log(note);
      log("memory toggles applied from step " + std::to_string(trainer.next_step() + 1) + ": " + describe_memory(memory));
    }
    // The first trace_steps steps of this process (a resumed run's trace continues after the
    // steps its checkpoint kept, see TraceWriter's resume constructor).
    const bool traced = trace && steps_run < cfg.output.trace_steps;
    edges.set_capture(traced);
    const StepResult r = trainer.step();  // throws StepFailure, CommError
    edges.set_capture(false);
    ++steps_run;

    // Every rank's device and host peak to rank 0 (two doubles per rank, exact below 2^53 bytes).
    at::Tensor mine = at::tensor({static_cast<double>(r.device_peak), static_cast<double>(r.host_peak)},
                                 at::TensorOptions().dtype(at::kDouble).device(ctx.device));  // [2]
    ctx.world->all_gather(peaks, mine);
    RankStepRecords own{recorder.take_records(), edges.take()};
    std::vector<RankStepRecords> ranks;
    if (collect)
      ranks = gather_step_records(ctx, std::move(own));
    else if (lead)
      ranks.push_back(std::move(own));
    if (lead) {
      PhasePeakTable step_peaks;  // this step, max over ranks
      for (RankStepRecords& rank : ranks) {
        step_peaks.add(rank.records);
        if (!traced || !shared.trace) continue;
        for (EdgeRecord& e : rank.edges) shared.trace->on_edge(e.view());
        for (const PhaseRecord& record : rank.records) shared.trace->on_record(record);
      }
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
      shared.run_peaks.merge(step_peaks);
      if (shared.metrics) shared.metrics->write(m, &step_peaks);
      if (shared.trace && traced) shared.trace->on_step(m);
      if (opt.timeline) opt.timeline->add_metrics(m);
      out.metrics.push_back(m);
      out.results.push_back(r);
      if (opt.on_step) opt.on_step(m, r);
    }
    if (write_checkpoints && cfg.output.checkpoint_every > 0 && trainer.next_step() % cfg.output.checkpoint_every == 0 &&
        trainer.next_step() < total) {
      save_checkpoint(trainer, opt.out_dir);
      log("checkpoint at step " + std::to_string(trainer.next_step()));
    }
  }
  if (owns_outcome) out.next_step = trainer.next_step();
  if (write_checkpoints) {
    save_checkpoint(trainer, opt.out_dir);
    log("checkpoint at step " + std::to_string(trainer.next_step()) + " in " + opt.out_dir + "/checkpoints");
  }
  if (opt.final_state) {
    auto state = std::make_shared<FullState>(export_full_state(trainer));  // collective
    if (lead) *opt.final_state = std::move(state);
  }
}

}  // namespace

RunOutcome run_training(const RunConfig& cfg, const RunOptions& opt) {
  RunOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  RunShared shared;
  std::string write_error;
  std::unique_ptr<RunDirLock> lock;
  auto fail = [&](const std::exception& e, bool bad_input) {
    out.status = RunOutcome::Status::Failed;
    out.bad_input = bad_input;
    out.error = e.what();
  };
  try {
    MemoryTracker::instance().install_cpu_allocator();
    shared.separate_processes = job_mode(cfg.parallel) == JobMode::Torchrun;  // throws on a malformed env
    shared.reports = runs_rank_zero();
    // Everything that can refuse the run is decided before any output is touched.
    check_launchable(cfg);
    make_dataset(cfg.training, cfg.model);  // a missing or malformed data file (DataError), checked once here
    if (!opt.memory_snapshot.empty() && shared.reports) {
      if (!resolve_device(cfg.training.device, 0).is_cuda())
        throw std::invalid_argument("--memory-snapshot " + opt.memory_snapshot +
                                    ": it records the CUDA caching allocator, and this run is on the CPU (training.device = " +
                                    std::string(to_string(cfg.training.device)) + ")");
      const size_t slash = opt.memory_snapshot.find_last_of('/');
      std::string error;
      if (slash != std::string::npos && slash > 0 && !make_dirs(opt.memory_snapshot.substr(0, slash), &error))
        throw FileWriteError("--memory-snapshot: " + error);
    }
    int64_t resume_step = -1;
    if (!opt.resume_dir.empty()) {
      const auto info = read_checkpoint_info(opt.resume_dir);
      if (!info) throw CheckpointError("--resume " + opt.resume_dir + ": no checkpoint there (no checkpoints/latest.json)");
      const std::vector<std::string> notes = check_resume_config(*info, cfg, opt.resume_dir);
      if (shared.reports && opt.log)
        for (const auto& note : notes) opt.log(note);
      resume_step = info->step;
    }
    if (!opt.out_dir.empty()) {
      std::string error;
      if (!make_dirs(opt.out_dir, &error)) throw FileWriteError("--out: " + error);
      if (shared.reports) {
        // One writer per run directory: a second run into it would interleave both files.
        lock = std::make_unique<RunDirLock>(opt.out_dir);
        if (!lock->unguarded().empty() && opt.log) opt.log("--out " + opt.out_dir + ": " + lock->unguarded());
        if (!lock->previous_owner().empty() && opt.log)
          opt.log("--out " + opt.out_dir + ": took over the lock of a run that ended without releasing it (" +
                  lock->previous_owner() + ")");
        // A resumed run in its own directory continues its files from the checkpoint's step: the
        // steps a killed run took after it are run again and must not appear twice.
        const bool continues = resume_step >= 0 && same_path(opt.resume_dir, opt.out_dir);
        shared.metrics = std::make_unique<MetricsJsonlWriter>(opt.out_dir + "/metrics.jsonl", continues ? resume_step : -1);
        if (cfg.output.trace && cfg.output.trace_steps > 0)
          shared.trace = continues ? std::make_unique<TraceWriter>(opt.out_dir + "/trace.json", resume_step)
                                   : std::make_unique<TraceWriter>(opt.out_dir + "/trace.json");
      }
    }
    if (!opt.memory_snapshot.empty() && shared.reports)
      start_memory_history();  // from before the model exists: its weights are in the history too
    run_on_ranks(cfg, [&](RankContext& ctx) { train_rank(cfg, ctx, opt, shared, out); });
  } catch (const StepFailure& e) {
    fail(e, false);
  } catch (const DataError& e) {
    fail(e, true);
  } catch (const CheckpointError& e) {
    fail(e, true);
  } catch (const RunDirBusy& e) {
    fail(e, true);
  } catch (const std::invalid_argument& e) {
    fail(e, true);
  } catch (const std::exception& e) {  // CheckpointWriteError, FileWriteError, CommError, ...: the run's
    fail(e, false);
  }
  if (memory_history_active()) {  // whatever the outcome: a failed run's history is the one to read
    try {
      write_file_atomically(opt.memory_snapshot, take_memory_snapshot());
      if (opt.log) opt.log("memory snapshot (open it at pytorch.org/memory_viz): " + opt.memory_snapshot);
    } catch (const std::exception& e) {
      if (out.status != RunOutcome::Status::Failed) {
        out.status = RunOutcome::Status::Failed;
        out.error = std::string("--memory-snapshot: ") + e.what();
      }
    }
  }
  if (out.status == RunOutcome::Status::Failed && opt.log && shared.reports) opt.log("error: " + out.error);
  if (!out.metrics.empty() && out.next_step == 0) out.next_step = out.metrics.back().step;

  // summary.json only from the run that holds the directory: a refused run (busy directory, bad
  // checkpoint, bad preset) leaves the directory exactly as it found it.
  if (lock) {
    try {
      if (shared.trace) shared.trace->close();
    } catch (const std::exception& e) {
      if (opt.log) opt.log(std::string("trace: ") + e.what());
    }
    RunSummary summary;
    summary.preset = opt.preset;
    summary.status = to_string(out.status);
    summary.error = out.error;
    summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    summary.steps = out.metrics;
    summary.phases = &shared.run_peaks;
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
