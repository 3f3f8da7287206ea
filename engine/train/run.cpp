// run_training: the one training loop, on every rank of every launch mode (rank threads, torchrun
// processes, emulation): what refuses a run before any output, each rank's loop (its boundary in
// step_boundary.cpp, its report in step_report.cpp, checkpoints here) and summary.json.
// defines: run_training, export_full_state, import_full_state, CheckpointCadence
#include "engine/train/run.h"
#include "engine/train/rank_loop.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <vector>

#include "engine/config/sizes.h"
#include "engine/config/techniques.h"
#include "engine/parallel/flash_attention.h"
#include "engine/parallel/job.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/build_info.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/kernel_profile.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/metrics_jsonl.h"
#include "engine/telemetry/phase_peaks.h"
#include "engine/telemetry/summary.h"
#include "engine/telemetry/timeline.h"
#include "engine/telemetry/trace_writer.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/hf_checkpoint.h"
#include "engine/train/job_text.h"
#include "engine/train/step_records.h"
#include "engine/util/files.h"
#include "engine/util/json.h"
#include "engine/util/printf_string.h"

namespace odyssey {

const char* to_string(RunOutcome::Status status) {
  switch (status) {
    case RunOutcome::Status::Finished:
      return "finished";
    case RunOutcome::Status::Stopped:
      return "stopped";
    case RunOutcome::Status::Failed:
      return "failed";
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
    std::vector<std::vector<float>> full;
    for (const at::Tensor& shard : {g->master.detach(), g->exp_avg, g->exp_avg_sq}) {
      at::Tensor all = at::empty({g->padded_numel()}, shard.options());  // [padded] fp32
      if (g->sharded())
        ctx.world->all_gather(all, shard);
      else
        all.copy_(shard);
      const at::Tensor host = all.narrow(0, 0, g->numel()).to(at::kCPU).contiguous();  // [N] fp32
      const float* values = host.data_ptr<float>();
      full.emplace_back(values, values + g->numel());  // out of the tracker's count (FullState)
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
      // a view of the session's vector, not a copy ([N] fp32)
      padded.narrow(0, 0, g->numel())
          .copy_(at::from_blob(const_cast<float*>(full[k].data()), {g->numel()}, at::kFloat));
      targets[k].copy_(padded.narrow(0, g->shard_offset(), g->shard_numel()));
    }
    g->reshard();
  }
  trainer.set_next_step(state.next_step);
  trainer.optimizer().set_steps_taken(state.optimizer_steps);
}

// [section] what a run refuses before it starts ------------------------------------------------------

namespace {

/// Lines of a regular file, read in bounded chunks (0 when it is no regular file).
int64_t count_lines(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  int64_t lines = 0;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char chunk[1 << 16];
    for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) > 0;) lines += std::count(chunk, chunk + n, '\n');
  }
  ::close(fd);
  return lines;
}

// The files a run writes into its --out directory (checkpoints/ is a folder of them).
constexpr const char* kRunFiles[] = {"metrics.jsonl", "summary.json", "trace.json"};

void remove_run_outputs(const std::string& dir) {
  for (const char* name : kRunFiles) ::unlink(join_path(dir, name).c_str());
  remove_tree(join_path(dir, "checkpoints"));
}

/// Every path a run owns in `dir`: its files (kRunFiles), its checkpoints folder and its lock.
std::vector<std::string> run_owned_paths(const std::string& dir) {
  std::vector<std::string> owned;
  for (const char* name : kRunFiles) owned.push_back(join_path(dir, name));
  owned.push_back(join_path(dir, "checkpoints"));
  owned.push_back(RunDirLock::lock_path(dir));
  return owned;
}

/// One of a run directory's files (kRunFiles) as a run found it.
struct FoundFile {
  std::string path;                  ///< where its bytes are: a link's target, so a put-back keeps the link
  std::optional<std::string> bytes;  ///< nullopt: there was none
  bool left_as_is = false;           ///< not a regular file (/dev/null) or too large: not copied, never put back
};
using RunFilesAsFound = std::vector<FoundFile>;

// A trace larger than this is not copied aside: a refused resume leaves it as its writer left it.
constexpr int64_t kMaxFileKeptAside = int64_t{1} << 30;

RunFilesAsFound run_files_as_found(const std::string& dir) {
  RunFilesAsFound files;
  for (const char* name : kRunFiles) {
    FoundFile found;
    found.path = resolve_path(join_path(dir, name));
    if (path_exists(found.path)) {
      try {
        found.bytes = read_file_bounded(found.path, kMaxFileKeptAside, name);
      } catch (const FileReadError&) {  // too large, or not a regular file: its writer says which
        found.left_as_is = true;
      }
    }
    files.push_back(std::move(found));
  }
  return files;
}

/// Writes each file back as it was found (atomically), or removes it where there was none; a file
/// still as found is left alone (on a full disk its rewrite would fail for nothing).
void put_back(const RunFilesAsFound& files) {
  for (const FoundFile& file : files) {
    if (file.left_as_is) continue;
    if (!file.bytes) {
      ::unlink(file.path.c_str());
      continue;
    }
    try {
      if (read_file_bounded(file.path, kMaxFileKeptAside, file.path) == *file.bytes) continue;
    } catch (const FileReadError&) {  // gone or replaced by something unreadable: written back
    }
    write_file_atomically(file.path, *file.bytes);
  }
}

}  // namespace

int64_t ranks_in_process(const RunConfig& cfg) {
  return job_mode(cfg.parallel) == JobMode::Threads ? cfg.parallel.world_size : 1;
}

std::vector<std::string> run_outputs_in(const std::string& dir) {
  std::vector<std::string> found;
  struct stat st {};
  // A run writes metrics.jsonl and summary.json as files, or where a link there leads: a link
  // that leads nowhere yet, or to a device (/dev/null), holds no run's outputs.
  auto holds_file = [&](const std::string& path) { return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode); };
  const std::string metrics = join_path(dir, "metrics.jsonl");
  if (holds_file(metrics)) {
    const int64_t lines = count_lines(metrics);
    found.push_back("metrics.jsonl with " + std::to_string(lines) + (lines == 1 ? " step" : " steps"));
  }
  if (::stat(join_path(dir, "checkpoints/latest.json").c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    try {
      const auto info = read_checkpoint_info(dir);
      found.push_back(info ? "a checkpoint at step " + std::to_string(info->step) : "checkpoints/latest.json");
    } catch (const std::exception&) {
      found.push_back("checkpoints/latest.json (unreadable)");
    }
  }
  if (holds_file(join_path(dir, "summary.json"))) found.push_back("summary.json");
  // So does its trace: a link to a device (/dev/null, /dev/full) is no run's, one to a file is (a
  // run would write through it: the file it leads to is never replaced unasked).
  if (holds_file(join_path(dir, "trace.json"))) found.push_back("trace.json");
  // Step folders without latest.json (a run killed in its first checkpoint, a copy cut short) are
  // a run's too, when they hold a file it wrote (a regular file: not a link planted there).
  auto holds_written_step = [&] {
    const std::string checkpoints = join_path(dir, "checkpoints");
    for (const std::string& step : list_dir(checkpoints))
      for (const std::string& name : list_dir(join_path(checkpoints, step)))
        if (::lstat(join_path(join_path(checkpoints, step), name).c_str(), &st) == 0 && S_ISREG(st.st_mode))
          return true;
    return false;
  };
  if (!path_exists(join_path(dir, "checkpoints/latest.json")) && holds_written_step())
    found.push_back("checkpoints/ without latest.json");
  return found;
}

// [section] the run -------------------------------------------------------------------------------

CheckpointCadence::CheckpointCadence(const RunConfig& cfg, const RunOptions& opt, const RunShared& shared, RunLog log)
    : every_(cfg.output.checkpoint_every),
      enabled_(opt.checkpoints && !opt.out_dir.empty()),
      dir_(opt.out_dir),
      carried_(shared.tokenizer_files),
      trace_(shared.trace.get()),
      metrics_(shared.metrics.get()),
      log_(std::move(log)) {}

void CheckpointCadence::after_step(Trainer& trainer, int64_t total_steps) {
  if (!enabled_ || every_ <= 0 || trainer.next_step() % every_ != 0 || trainer.next_step() >= total_steps) return;
  // The trace's events through this step reach its file before the checkpoint does: a run killed
  // later resumes from it, and its resume keeps them (flushed after, a kill in between lost them).
  if (trace_ != nullptr) trace_->flush();
  if (metrics_ != nullptr) metrics_->sync();
  save_checkpoint(trainer, dir_, carried_);
  saved_step_ = trainer.next_step();
  log_("checkpoint at step " + std::to_string(trainer.next_step()));
}

void CheckpointCadence::at_end(Trainer& trainer) {
  if (!enabled_) return;
  // A stop right after the cadence's checkpoint: that one holds this state. Written again it
  // would double the time to exit (minutes for a large model) within a scheduler's grace period.
  if (saved_step_ != trainer.next_step()) {
    // as after_step: the trace and the metrics hold every step this checkpoint does before it
    // exists (a kill right after it, a closed pipe, a scheduler's second signal, keeps them)
    if (trace_ != nullptr) trace_->flush();
    if (metrics_ != nullptr) metrics_->sync();
    save_checkpoint(trainer, dir_, carried_);
  }
  log_("checkpoint at step " + std::to_string(trainer.next_step()) + " in " + dir_ + "/checkpoints");
}

namespace {

/// The trainer of one rank, its phase clock and feeds set up, from a restart's weights or a
/// checkpoint when the run has them.
void prepare_rank(const RunConfig& cfg, const RankContext& ctx, const RunOptions& opt, const RunShared& shared,
                  Trainer& trainer, const RunLog& log) {
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
  if (opt.initial_state) {
    import_full_state(trainer, *opt.initial_state);
    log("restart: weights and optimizer state carried over at step " + std::to_string(trainer.next_step()));
  }
  if (!cfg.model.hf_path.empty() && !opt.initial_state && opt.resume_dir.empty()) {
    const HfWeights weights(cfg.model.hf_path, cfg.model);  // checked once already, before any output
    weights.load(trainer.model().groups());                 // this rank's shard of every parameter
    log("weights: " + weights.describe());
  }
  if (shared.resume) {
    load_checkpoint(trainer, *shared.resume, opt.resume_dir);
    log("resumed from " + shared.resume->path + " at step " + std::to_string(shared.resume->step));
  }
  for (const auto& note : trainer.take_notes()) log(note);
  if (ctx.world_size > 1 || ctx.emulated)
    log("ranks: " + std::to_string(ctx.world_size) + " (Ulysses " + std::to_string(ctx.sp_size) + " x data " +
        std::to_string(ctx.dp_size) + (cfg.parallel.fsdp ? ", FSDP" : "") + (ctx.emulated ? ", emulated" : "") +
        (shared.separate_processes ? ", one process each" : "") + ")");
  log("memory: " + describe_memory(cfg, cfg.memory));
}

/// A directory that could not be made: a full or failing disk is the run's failure (exit 1); a
/// file in the way, a path too long or not permitted is the argument's (exit 2).
[[noreturn]] void throw_make_dirs_error(const std::string& option, const std::string& error, int error_number) {
  if (error_number == ENOSPC || error_number == EDQUOT || error_number == EIO)
    throw FileWriteError(option + ": " + error);
  throw std::invalid_argument(option + ": " + error);
}

/// A link at the run's file `name` in `dir` must lead where a file can be written: the run writes
/// through it (a shell's `>`), and found after the training (the summary) the run was lost for it.
void check_link_leads_to_a_file(const std::string& dir, const std::string& name) {
  const std::string path = join_path(dir, name);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return;
  auto refuse = [&](const std::string& why) {
    throw std::invalid_argument("--out " + dir + ": " + name + " is a link " + why + ", where the run writes its " +
                                name + ": remove the link or choose another --out");
  };
  if (::stat(path.c_str(), &st) == 0) return;  // a file or device there: written, or refused below as ever
  if (errno == ELOOP) refuse("that reaches no file (" + std::string(std::strerror(ELOOP)) + ")");
  const std::string target = resolve_path(path), folder = folder_of(target);
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    refuse("to " + target + ", and " + folder + " cannot take a file there (" + std::strerror(errno) + ")");
}

/// Refuses (std::invalid_argument, before any output) an existing --out this user cannot write
/// into, or one where a file the run writes (kRunFiles) is a directory, FIFO or socket, a link
/// that reaches no file or leads into a folder that cannot take one, or the temporary it is written
/// through a directory: found at the lock, or when summary.json is written after the last step
/// (exit 1, the steps' time spent).
void check_run_dir_writable(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;  // made later, in a folder checked then
  if (S_ISDIR(st.st_mode) && ::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::invalid_argument("--out " + dir + ": the folder is not writable (" + std::strerror(errno) +
                                "): choose another --out");
  for (const char* file : kRunFiles) {
    for (const std::string& name : {std::string(file), AtomicFile::temporary_path(file)}) {
      const std::string path = join_path(dir, name);
      if (name == file) check_link_leads_to_a_file(dir, file);
      if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) continue;
      if (name != file && !S_ISDIR(st.st_mode)) continue;  // a temporary in the way is replaced (AtomicFile)
      throw std::invalid_argument("--out " + dir + ": " + name + " is " +
                                  (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file (a FIFO or socket)") +
                                  ", where the run writes its " + file + ": remove it or choose another --out");
    }
  }
}

/// Under torchrun each process reads latest.json itself: every rank must have resumed from the
/// same step (another process rewriting the checkpoints meanwhile would split them), checked by
/// one max all-reduce of {step, -step} before the first step. Throws CheckpointError.
void check_same_resumed_step(const RankContext& ctx, int64_t step) {
  CategoryScope category(MemCategory::Other);
  at::Tensor steps = at::tensor({step, -step}, at::TensorOptions().dtype(at::kLong)).to(ctx.device);  // [2]
  ctx.world->all_reduce_max(steps);
  const at::Tensor both = steps.cpu();
  const int64_t highest = both[0].item<int64_t>(), lowest = -both[1].item<int64_t>();
  if (highest != lowest)
    throw CheckpointError("--resume: the ranks resumed from different checkpoints (steps " + std::to_string(lowest) +
                          " to " + std::to_string(highest) + "): another run wrote them meanwhile; resume again");
}

/// The name of the run's own file in `dir` (run_owned_paths) that the resolved path `file` is or
/// lies in: "metrics.jsonl", "checkpoints", ...; "" when none.
std::string run_file_holding(const std::string& file, const std::string& dir) {
  for (const std::string& owned : run_owned_paths(resolve_path(dir)))
    // as named, and where a link there leads (the run writes its files through links)
    for (const std::string& where : {owned, resolve_path(owned)})
      if (file == where || file.rfind(where + "/", 0) == 0) return owned.substr(owned.find_last_of('/') + 1);
  return "";
}

/// Refuses, before any output, a file that `option` (--memory-snapshot, --kernel-profile) names
/// when writing it would lose something: a directory, one of a run directory's own files
/// (metrics.jsonl, summary.json, trace.json, checkpoints/, the lock) of --out or --resume, the
/// preset, the file the other option names, or an existing file without --overwrite.
void check_output_file(const std::string& option, const std::string& path, const RunOptions& opt,
                       const std::string& other_option, const std::string& other_path) {
  if (is_directory(path)) throw std::invalid_argument(option + " " + path + " is a directory; name the file to write");
  const std::string file = resolve_path(path);
  for (const std::string& dir : {opt.out_dir, opt.resume_dir})
    if (const std::string owned = dir.empty() ? "" : run_file_holding(file, dir); !owned.empty())
      throw std::invalid_argument(option + " " + path + " is the run's own " + owned + " in " + dir +
                                  ": name a file beside the run's outputs");
  if (!opt.preset.empty() && resolve_path(opt.preset) == file)
    throw std::invalid_argument(option + " " + path + " is the preset " + opt.preset + ": name another file");
  if (!other_path.empty() && resolve_path(other_path) == file)
    throw std::invalid_argument(option + " " + path + " is also " + other_option + "'s file: name two files");
  if (path_exists(path) && !opt.overwrite)
    throw std::invalid_argument(option + " " + path +
                                " exists: pass --overwrite to replace it (and the run in --out, if any), or name "
                                "another file");
}

/// Refuses, before any output, an input of the run (`key` = `path`: the data file, the model
/// directory) that is or lies in one of the run's own files in --out (metrics.jsonl, summary.json,
/// trace.json, checkpoints/, the lock): the run writes those, and --overwrite removes them first,
/// so the input was lost and the run then refused for it.
void check_input_outside_run_files(const std::string& key, const std::string& path, const RunOptions& opt) {
  if (path.empty() || opt.out_dir.empty()) return;
  const std::string input = resolve_path(path);
  const std::string owned = run_file_holding(input, opt.out_dir);
  if (owned.empty()) return;
  const bool is =
      input == join_path(resolve_path(opt.out_dir), owned) || input == resolve_path(join_path(opt.out_dir, owned));
  throw std::invalid_argument(key + " = \"" + path + "\" " + (is ? "is" : "lies in") + " the run's own " + owned +
                              " in --out " + opt.out_dir +
                              ", which this run writes (and --overwrite removes first): move it out of the run "
                              "directory, or choose another --out (nothing was written)");
}

/// Makes the folder of a file that `option` names (--memory-snapshot, --kernel-profile) now, so a
/// run that could not write the file is refused before any output (FileWriteError).
void make_parent_dirs(const std::string& option, const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string error;
  int error_number = 0;
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (folder != "." && folder != "/" && !make_dirs(folder, &error, &error_number))
    throw_make_dirs_error(option, error, error_number);
  // The file is written after the last step: a folder it cannot be written into is found now.
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw std::invalid_argument(option + " " + path + ": the folder " + folder + " is not writable (" +
                                std::strerror(errno) + ")");
}

/// A setup this long is said in the run's log (the 8B's: about a minute); a shorter one is left to
/// summary.json, so a quick run's output stays as it was.
constexpr double kSetupWorthSayingS = 10.0;

// The step loop of one rank (the one loop of every launch mode): the boundary every rank decides
// together, the step, its report to rank 0's outputs, the checkpoint cadence.
void train_rank(const RunConfig& cfg, RankContext& ctx, const RunOptions& opt, RunShared& shared, RunOutcome& out) {
  const bool lead = ctx.rank == 0;
  const bool owns_outcome = lead || shared.separate_processes;  // who fills this process's RunOutcome
  const RunLog log = [&](const std::string& line) {
    if (lead && opt.log) opt.log(line);
  };
  if (lead) shared.collective_backend = ctx.world->backend();  // read after the ranks joined
  Trainer trainer(cfg, ctx);
  StepReporter reporter(cfg, ctx, opt, shared, trainer.recorder());  // attaches its edge buffer first
  prepare_rank(cfg, ctx, opt, shared, trainer, log);
  trainer.pin_offload_slab();  // at setup, not inside step 1 (setup_s holds it)
  if (shared.resume && shared.separate_processes && ctx.world_size > 1)
    check_same_resumed_step(ctx, trainer.next_step());
  StepBoundary boundary(ctx, opt.control, log);
  CheckpointCadence checkpoints(cfg, opt, shared, log);

  const int64_t total = opt.steps >= 0 ? opt.steps : cfg.training.steps;
  std::string profile_error;
  RankPeak run_peak;  // summary.json's "ranks": this rank's highest step peak, its categories then
  run_peak.rank = ctx.rank;
  const auto take_step_window = [&] {  // the step's tracker window into run_peak
    const MemorySnapshot window = MemoryTracker::instance().snapshot(ctx.slot);
    const int64_t host_peak = std::max(run_peak.host_peak, window.host_peak);
    const int64_t reserved = std::max(run_peak.device_reserved, window.device_reserved);
    if (window.device_peak >= run_peak.device_peak) run_peak = RankPeak::from(ctx.rank, window);
    run_peak.host_peak = host_peak;
    run_peak.device_reserved = reserved;
    run_peak.ooms = window.ooms;
  };
  const auto keep_run_peak = [&] {
    std::lock_guard<std::mutex> lock(shared.rank_peaks_mutex);
    shared.rank_peaks.push_back(run_peak);
  };
  while (trainer.next_step() < total) {
    if (!boundary.next(trainer, cfg)) {
      if (owns_outcome) {
        out.status = RunOutcome::Status::Stopped;
        out.stop_signal = boundary.stop_signal();
      }
      break;
    }
    reporter.begin_step();
    if (lead && !shared.stale_summary.empty()) {  // the earlier process's, stale from this step on
      ::unlink(shared.stale_summary.c_str());
      shared.stale_summary.clear();
    }
    if (lead && shared.setup_s < 0) {
      // Setup: the checks, the groups joined, the model built and initialised (or loaded), the
      // data opened. A long one (the 8B's init drawn on the CPU) is said, a short one is not.
      shared.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - shared.started).count();
      if (shared.setup_s >= kSetupWorthSayingS)
        log(printf_string("setup: %.1f s before step %lld (summary.json's setup_s)", shared.setup_s,
                          static_cast<long long>(trainer.next_step() + 1)));
    }
    // --kernel-profile: rank 0 records the run's last step (warm: its caches and plans are made).
    const bool profiled = lead && !opt.kernel_profile.empty() && trainer.next_step() == total - 1;
    if (profiled) start_kernel_profile(ctx.device.is_cuda() ? ctx.device.index() : -1);
    StepResult r;
    try {
      r = trainer.step();  // throws StepFailure, CommError
    } catch (...) {
      if (profiled) {
        try {
          save_kernel_profile(opt.kernel_profile);  // a failed step's profile is the one to read
        } catch (const std::exception& e) {
          log(e.what());  // the step's own failure is the run's error
        }
      }
      // summary.json's "ranks" of a failed run (an OOM is where they are read): this rank's peak,
      // the failing step's included; its phases in the trace and the phase table
      take_step_window();
      keep_run_peak();
      reporter.report_failed_step();
      throw;
    }
    if (profiled) {
      try {
        save_kernel_profile(opt.kernel_profile);
        log("kernel profile of step " + std::to_string(trainer.next_step()) + " (open it in Perfetto; " +
            "bench/gpu/kernel_profile.py sums it): " + opt.kernel_profile);
      } catch (const std::exception& e) {
        profile_error = e.what();  // the run's failure, after its checkpoint: the steps are not lost
      }
    }
    take_step_window();  // as r.device_peak read it (nothing was allocated since)
    try {
      reporter.report(r, boundary.config_version(), out);  // its phases go out as a failed step's if it throws
    } catch (...) {
      keep_run_peak();  // another rank failed this step: this rank's peak in summary.json all the same
      throw;
    }
    checkpoints.after_step(trainer, total);
  }
  if (trainer.next_step() > (shared.resume ? shared.resume->step : 0)) keep_run_peak();
  if (owns_outcome) out.next_step = trainer.next_step();
  // A run resumed in its own directory and stopped before its first step holds that checkpoint's
  // state: writing it again would only replace the checkpoint's config.toml with this run's.
  const bool nothing_new = shared.resume && trainer.next_step() == shared.resume->step && !opt.resume_dir.empty() &&
                           same_path(opt.resume_dir, opt.out_dir);
  if (!nothing_new) checkpoints.at_end(trainer);
  if (opt.final_state) {
    auto state = std::make_shared<FullState>(export_full_state(trainer));  // collective
    if (lead) *opt.final_state = std::move(state);
  }
  if (!profile_error.empty()) throw FileWriteError(profile_error + " (the steps and their checkpoint are kept)");
}

}  // namespace

bool is_bad_input(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const StepFailure&) {
    return false;
  } catch (const DataError&) {
    return true;
  } catch (const CheckpointError&) {
    return true;
  } catch (const RunDirBusy&) {
    return true;
  } catch (const RunDirHoldsRun&) {
    return true;
  } catch (const PlannedOutOfMemory&) {
    return true;
  } catch (const FileReadError&) {  // an input that is not a readable regular file
    return true;
  } catch (const RankRefused& e) {  // another torchrun process refused: as it classed it
    return e.bad_input;
  } catch (const RankFailedOnInput&) {  // another torchrun process failed on bad input mid-run
    return true;
  } catch (const std::invalid_argument&) {
    return true;
  } catch (...) {  // CheckpointWriteError, FileWriteError, CommError, ...: the run's
    return false;
  }
}

namespace {

/// What a torchrun process runs, for JobStart::expect_same: its config and the options that shape
/// the job, and the files each process reads from its own node (a copy of other contents trained
/// its ranks on other sequences, or from other weights, in silence).
std::string train_job_text(const RunConfig& cfg, const RunOptions& opt) {
  auto none = [](const std::string& v) { return v.empty() ? std::string("(none)") : clean_path(v); };
  std::vector<JobOption> options = {
      {"--out", none(opt.out_dir)},
      {"--resume", none(opt.resume_dir)},
      {"the last step (--steps)", std::to_string(opt.steps)},
      {"checkpoints", opt.checkpoints ? "on" : "off (--no-checkpoint)"},
      {"--force", opt.force ? "on" : "off"},
      {"the data file at training.dataset_path",
       cfg.training.dataset_path.empty() ? "(none)" : file_identity(cfg.training.dataset_path)}};
  if (!cfg.model.hf_path.empty() && opt.resume_dir.empty())  // a resumed run reads its checkpoint's weights
    options.emplace_back("the weights at model.hf_path", files_identity(cfg.model.hf_path, hf_weights_file));
  return job_text(cfg, options);
}

/// How rank `other`'s train job text differs from rank 0's `lead`.
std::string train_job_difference(const std::string& lead, const std::string& other) {
  return job_difference(lead, other,
                        "every process of a torchrun job runs one preset with the same --set, --out, --steps and "
                        "--resume, over the same data and weights");
}

/// Runs `step` (checks, or the set-up of the outputs) in this process, then agrees its outcome with
/// the job's other processes (JobStart::agree): throws this process's refusal or the first
/// other process's, so that every process of a torchrun job refuses together.
void agreed(JobStart& start, const std::function<void()>& step) {
  std::exception_ptr refusal;
  try {
    step();
  } catch (...) {
    refusal = std::current_exception();
  }
  start.agree(refusal, refusal && is_bad_input(refusal));
}

}  // namespace

RunOutcome run_training(const RunConfig& cfg, const RunOptions& opt) {
  RunOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  RunShared shared;
  std::string write_error;
  std::unique_ptr<RunDirLock> lock;
  std::optional<RunFilesAsFound> as_found;  // the run directory's files before this run wrote any
  std::optional<JobStart> start;
  // A resumed run in its own directory continues its files from the checkpoint's step: the
  // steps a killed run took after it are run again and must not appear twice.
  const bool continues = !opt.resume_dir.empty() && !opt.out_dir.empty() && same_path(opt.resume_dir, opt.out_dir);
  int64_t resume_step = -1;
  try {
    MemoryTracker::instance().install_cpu_allocator();
    shared.separate_processes = job_mode(cfg.parallel) == JobMode::Torchrun;  // throws on a malformed env
    shared.reports = runs_rank_zero();
    // Under torchrun the processes agree three times before the first step: once every check is
    // done, once --out is made, once the outputs are set up. Rank 0's process alone checks and
    // locks --out: a refusal there ends every process at once with its reason (the others waited
    // for it until parallel.timeout_s, twice over, and ended with the store's stack trace).
    start.emplace(cfg);
    start->expect_same(train_job_text(cfg, opt), train_job_difference);
    // Another run's outputs are never replaced unasked: refused before the directory is touched,
    // and again under the lock (a run that finished in between).
    auto refuse_earlier_run = [&] {
      if (continues || opt.overwrite || !shared.reports) return;
      const std::vector<std::string> found = run_outputs_in(opt.out_dir);
      if (found.empty()) return;
      std::string what;
      for (size_t i = 0; i < found.size(); ++i) what += (i ? ", " : "") + found[i];
      // --resume is offered only where it can start: a run that ended before its first
      // checkpoint (refused, failed or killed early) has none to continue from.
      bool resumable = false;
      try {
        resumable = read_checkpoint_info(opt.out_dir).has_value();
      } catch (const std::exception&) {  // unreadable: named in `what`, and --resume would refuse it
      }
      throw RunDirHoldsRun("--out " + opt.out_dir + " holds a run (" + what + "): " +
                           (resumable ? "continue it with --resume " + opt.out_dir + ", choose another --out,"
                                      : "it has no checkpoint to continue from: choose another --out,") +
                           " or pass --overwrite to replace it");
    };
    // Everything that can refuse the run is decided before any output is touched.
    agreed(*start, [&] {
      check_launchable(cfg, "odyssey train PRESET");
      if (job_mode(cfg.parallel) == JobMode::Torchrun && cfg.parallel.world_size > 1) check_gloo_interface();
      check_input_outside_run_files("training.dataset_path", cfg.training.dataset_path, opt);
      check_input_outside_run_files("model.hf_path", cfg.model.hf_path, opt);
      make_dataset(cfg.training, cfg.model);  // a missing or malformed data file (DataError), checked once here
      if (!opt.memory_snapshot.empty() && shared.reports) {
        if (!resolve_device(cfg.training.device, 0).is_cuda())
          throw std::invalid_argument(
              "--memory-snapshot " + opt.memory_snapshot +
              ": it records the CUDA caching allocator, and this run is on the CPU (training.device = " +
              std::string(to_string(cfg.training.device)) + ")");
        check_output_file("--memory-snapshot", opt.memory_snapshot, opt, "--kernel-profile", opt.kernel_profile);
      }
      if (!opt.kernel_profile.empty() && shared.reports)
        check_output_file("--kernel-profile", opt.kernel_profile, opt, "--memory-snapshot", opt.memory_snapshot);
      if (!cfg.model.hf_path.empty() && opt.resume_dir.empty())
        HfWeights(cfg.model.hf_path, cfg.model);  // every tensor found and checked before the model is allocated
      if (!cfg.output.export_hf.empty() && !(opt.checkpoints && !opt.out_dir.empty()))
        throw std::invalid_argument("output.export_hf = \"" + cfg.output.export_hf +
                                    "\" exports the final checkpoint, and this run writes none (" +
                                    (opt.out_dir.empty() ? "no --out directory" : "--no-checkpoint") + ")");
      // the folder the export will write, checked as the export checks it: refused after the
      // training, the run had been spent for a model it could not write
      if (!cfg.output.export_hf.empty() && shared.reports) {
        check_export_target(cfg.output.export_hf);
        // the run's own folder, or one it lies in, is not empty once the run has written into it
        const std::string target = resolve_path(cfg.output.export_hf), run = resolve_path(opt.out_dir);
        if (run == target || run.starts_with(target == "/" ? target : target + "/"))
          throw std::invalid_argument(
              "output.export_hf = \"" + cfg.output.export_hf + "\" is " +
              (run == target ? "the run's own --out directory" : "a folder --out " + opt.out_dir + " lies in") +
              ": the export needs an empty directory of its own (e.g. \"" + join_path(opt.out_dir, "hf") + "\")");
      }
      // Nothing is started that the planner says cannot fit: the OOM killer or LibTorch's raw
      // allocation failure mid-step would be the user's only answer otherwise.
      if (!opt.force)
        if (const std::string why = planned_out_of_memory(as_run_here(cfg), ranks_in_process(cfg)); !why.empty())
          throw PlannedOutOfMemory(why);
      if (!opt.resume_dir.empty()) {
        // A run still writing checkpoints there would move latest.json under this one's feet. Asked
        // by rank 0's process only, before it locks its own --out: under torchrun the other
        // processes would see rank 0's lock when they resume into the same directory.
        if (const std::string owner = shared.reports ? RunDirLock::live_owner(opt.resume_dir) : std::string();
            !owner.empty())
          throw RunDirBusy("--resume " + opt.resume_dir + " is in use by a live run (" + owner +
                           "): resume it after that run ends (its last checkpoint is then final)");
        shared.resume = opt.resume_info ? opt.resume_info : read_checkpoint_info(opt.resume_dir);
        if (!shared.resume)
          throw CheckpointError("--resume " + opt.resume_dir + ": no checkpoint there (no checkpoints/latest.json)");
        const std::vector<std::string> notes = check_resume_config(*shared.resume, cfg, opt.resume_dir);
        if (shared.reports && opt.log)
          for (const auto& note : notes) opt.log(note);
        resume_step = shared.resume->step;
        const int64_t last = opt.steps >= 0 ? opt.steps : cfg.training.steps;
        if (resume_step >= last)
          throw std::invalid_argument("--resume " + opt.resume_dir + ": its checkpoint is at step " +
                                      std::to_string(resume_step) + ", and this run ends at step " +
                                      std::to_string(last) +
                                      " (training.steps): nothing to train; --steps N trains N more steps");
      }
      // The model directory's tokenizer goes into every checkpoint (rank 0 writes it), so that eval
      // and export of this run find it without the directory (a checkpoint stands alone); a resume
      // without model.hf_path carries on the resumed checkpoint's.
      if (opt.checkpoints && !opt.out_dir.empty()) {
        if (!cfg.model.hf_path.empty())
          shared.tokenizer_files = read_carried_files(cfg.model.hf_path);
        else if (shared.resume)
          shared.tokenizer_files = read_carried_files(shared.resume->path);
      }
      if (!opt.out_dir.empty() && shared.reports) {
        if (const std::string owner = RunDirLock::live_owner(opt.out_dir); !owner.empty())
          throw RunDirBusy("--out " + opt.out_dir + " is in use by another run (" + owner +
                           "); wait for it to end, or write to another directory");
        refuse_earlier_run();
        check_run_dir_writable(opt.out_dir);
      }
    });
    // The folders: every process makes --out (another node's ranks write their checkpoint shards
    // there), rank 0's the folders of its --memory-snapshot and --kernel-profile files.
    agreed(*start, [&] {
      if (!opt.memory_snapshot.empty() && shared.reports) make_parent_dirs("--memory-snapshot", opt.memory_snapshot);
      if (!opt.kernel_profile.empty() && shared.reports) make_parent_dirs("--kernel-profile", opt.kernel_profile);
      if (opt.out_dir.empty()) return;
      std::string error;
      int error_number = 0;
      if (!make_dirs(opt.out_dir, &error, &error_number)) throw_make_dirs_error("--out", error, error_number);
    });
    // The outputs, set up by rank 0's process once every process can write: an earlier run is
    // replaced (--overwrite) only when none refused.
    agreed(*start, [&] {
      if (opt.out_dir.empty() || !shared.reports) return;
      // One writer per run directory: a second run into it would interleave both files.
      lock = std::make_unique<RunDirLock>(opt.out_dir);
      if (!lock->unguarded().empty() && opt.log) opt.log("--out " + opt.out_dir + ": " + lock->unguarded());
      if (!lock->previous_owner().empty() && opt.log)
        opt.log("--out " + opt.out_dir + ": took over the lock of a run that ended without releasing it (" +
                lock->previous_owner() + ")");
      refuse_earlier_run();
      // latest.json was read before the lock: a run that held the directory meanwhile (another
      // resume) may have saved a newer checkpoint and removed the one read. Resumed, its steps
      // would be taken again and its files found gone.
      if (continues) {
        const std::optional<CheckpointInfo> now = read_checkpoint_info(opt.out_dir);
        if (!now || now->step != shared.resume->step || now->config_toml != shared.resume->config_toml)
          throw RunDirBusy("--resume " + opt.resume_dir + ": its checkpoint moved on from step " +
                           std::to_string(shared.resume->step) + " to " +
                           (now ? "step " + std::to_string(now->step) : std::string("none")) +
                           " while this run started (another run held the directory meanwhile): resume again");
      }
      if (opt.overwrite && !continues) {
        const std::vector<std::string> replaced = run_outputs_in(opt.out_dir);
        remove_run_outputs(opt.out_dir);
        if (!replaced.empty() && opt.log) {
          std::string what;
          for (size_t i = 0; i < replaced.size(); ++i) what += (i ? ", " : "") + replaced[i];
          opt.log("--overwrite: replaced the run in " + opt.out_dir + " (" + what + ")");
        }
      }
      as_found = run_files_as_found(opt.out_dir);
      shared.metrics =
          std::make_unique<MetricsJsonlWriter>(opt.out_dir + "/metrics.jsonl", continues ? resume_step : -1);
      if (shared.metrics->dropped() > 0 && opt.log)
        opt.log("metrics.jsonl: kept " + std::to_string(shared.metrics->lines()) + " lines through step " +
                std::to_string(resume_step) + ", dropped " + std::to_string(shared.metrics->dropped()) +
                " (steps after the checkpoint, which run again, or lines cut or unreadable)");
      const std::string trace_path = opt.out_dir + "/trace.json";
      auto say_dropped = [&](const TraceWriter& trace) {
        if (trace.dropped() > 0 && opt.log)
          opt.log("trace.json: kept " + std::to_string(trace.events()) + " events through step " +
                  std::to_string(resume_step) + ", dropped " + std::to_string(trace.dropped()) +
                  " (events of steps after the checkpoint, which run again, or lines cut or unreadable)");
      };
      struct stat trace_stat {};
      if (cfg.output.trace && cfg.output.trace_steps > 0) {
        shared.trace = continues ? std::make_unique<TraceWriter>(trace_path, resume_step)
                                 : std::make_unique<TraceWriter>(trace_path);
        say_dropped(*shared.trace);
      } else if (continues && ::stat(trace_path.c_str(), &trace_stat) == 0 && S_ISREG(trace_stat.st_mode)) {
        // Untraced now, the earlier trace still ends where its process was killed: the steps after
        // the checkpoint run again, so its events of them go (a later traced resume kept them).
        TraceWriter cut(trace_path, resume_step);
        say_dropped(cut);
        cut.close();
      }
      // The earlier process's summary.json describes the run as it ended then: a resume killed
      // later would leave it saying "finished" at an earlier step. It goes at the first step (a
      // stop while loading, which ends the process at once, leaves it), and a resume refused after
      // that puts it back.
      const std::string summary_path = join_path(opt.out_dir, "summary.json");
      if (continues && as_found)
        for (const FoundFile& file : *as_found)
          if (file.bytes && file.path == resolve_path(summary_path)) shared.stale_summary = file.path;
    });
    if (!opt.memory_snapshot.empty() && shared.reports)
      start_memory_history();       // from before the model exists: its weights are in the history too
    reset_attention_kernels_run();  // the trace and summary name the kernels this run's attention ran
    run_on_ranks(
        cfg, "odyssey train PRESET", [&](RankContext& ctx) { train_rank(cfg, ctx, opt, shared, out); }, &*start,
        is_bad_input);
    if (!cfg.output.export_hf.empty() && shared.reports && out.status == RunOutcome::Status::Finished) {
      const HfExport done = export_hf(opt.out_dir, cfg.output.export_hf);  // with the checkpoint's tokenizer
      if (opt.log) {
        opt.log("exported step " + std::to_string(done.step) + " as a Hugging Face model (" + done.dtype + ", " +
                std::to_string(done.files.size()) + " files) to " + cfg.output.export_hf);
        if (const std::string note = done.no_tokenizer_note(); !note.empty()) opt.log(note);
      }
    } else if (!cfg.output.export_hf.empty() && shared.reports && out.status == RunOutcome::Status::Stopped &&
               opt.log) {
      const std::string& to = cfg.output.export_hf;
      opt.log("not exported to " + to + " (output.export_hf): the run stopped before its last step; --resume " +
              opt.out_dir + " finishes it and exports, or `odyssey export " + opt.out_dir + " --hf " + to +
              "` exports its last checkpoint now");
    }
  } catch (const std::exception& e) {
    out.status = RunOutcome::Status::Failed;
    out.bad_input = is_bad_input(std::current_exception());
    out.error = e.what();
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
  if (out.status == RunOutcome::Status::Failed && opt.log && opt.log_failure && shared.reports)
    opt.log("error: " + out.error);
  if (!out.metrics.empty() && out.next_step == 0) out.next_step = out.metrics.back().step;

  // summary.json only from the run that holds the directory: a refused run (busy directory, bad
  // checkpoint, bad preset) leaves the directory exactly as it found it. A checkpoint found bad
  // only while the ranks load it is refused after the files were opened: they are put back.
  // A resumed run that trained no step in its own directory (a runtime failure or a stop while it
  // loaded) leaves it as it found it too: its summary.json would replace the whole run's.
  const bool refused = out.metrics.empty() && ((out.status == RunOutcome::Status::Failed && out.bad_input) ||
                                               (continues && out.status != RunOutcome::Status::Finished));
  // Refused under the lock before the files were opened (a run that ended in --out meanwhile):
  // nothing to put back, and no summary.json over that run's.
  if (lock && refused && !as_found) return out;
  if (lock && refused) {
    try {
      if (shared.trace) shared.trace->close();
    } catch (const std::exception&) {  // its file is put back below
    }
    try {
      if (shared.metrics) shared.metrics->close();
    } catch (const std::exception&) {
    }
    try {
      put_back(*as_found);
    } catch (const std::exception& e) {
      out.error += std::string("; and the run directory's files could not be put back: ") + e.what();
    }
    return out;
  }
  if (lock) {
    // The outputs a finished run leaves must be whole: a trace or summary the disk refused is the
    // run's failure (exit 1), never a success with a truncated file.
    auto output_failed = [&](const std::string& why) {
      if (out.status == RunOutcome::Status::Failed) {  // the run's own error stays its error; this is said
        if (opt.log) opt.log(why);
        return;
      }
      out.status = RunOutcome::Status::Failed;  // said once, as the run's error
      out.bad_input = false;
      out.error = why;
      if (opt.log && opt.log_failure) opt.log("error: " + why);  // as the run's other errors are said
    };
    const std::vector<std::string> attention_kernels = attention_kernels_run();
    try {
      if (shared.trace) shared.trace->set_other_data("attention_kernels", attention_kernels);
      if (shared.trace) shared.trace->close();
    } catch (const std::exception& e) {
      output_failed(e.what());  // "trace: cannot write ..."
    }
    try {
      if (shared.metrics) shared.metrics->close();
    } catch (const std::exception& e) {
      output_failed(std::string("metrics: ") + e.what());
    }
    RunSummary summary;
    summary.preset = opt.preset;
    summary.status = to_string(out.status);
    summary.error = out.error;
    summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    summary.setup_s = shared.setup_s;
    // A continued run's summary is the whole run's: the steps its file kept, then this process's.
    // (wall_s and the phase table are this process's.)
    if (continues && shared.metrics) {
      summary.steps = shared.metrics->kept_steps();
      summary.process_starts = shared.metrics->kept_process_starts();
    }
    if (!out.metrics.empty()) summary.process_starts.push_back(out.metrics.front().step);
    summary.steps.insert(summary.steps.end(), out.metrics.begin(), out.metrics.end());
    summary.phases = &shared.run_peaks;
    summary.ranks = shared.rank_peaks;
    std::sort(summary.ranks.begin(), summary.ranks.end(),
              [](const RankPeak& a, const RankPeak& b) { return a.rank < b.rank; });
    std::string extra;
    JsonWriter w(extra);
    w.begin_object().key("next_step").value(out.next_step).key("memory").value(describe_memory(cfg, cfg.memory));
    if (resume_step >= 0) w.key("resumed_at_step").value(resume_step);
    w.key("attention_kernels").begin_array();
    for (const std::string& kernel : attention_kernels) w.value(kernel);
    w.end_array();
    if (!shared.collective_backend.empty()) w.key("collective_backend").value(shared.collective_backend);
    w.key("build");  // the binaries that ran: LibTorch, its CUDA, Odyssey's kernels linked or not
    write_engine_build_json(w, engine_build());
    if (!summary.steps.empty() && summary.steps.front().has_answers) {  // the whole run's, as the steps
      w.key("answer_loss_first").value(summary.steps.front().answer_loss);
      w.key("answer_loss_final").value(summary.steps.back().answer_loss);
      w.key("answer_accuracy_final").value(summary.steps.back().answer_accuracy);
    }
    w.end_object();
    summary.extra_json = extra;
    // where a link there leads, as the trace and metrics.jsonl are written (a shell's `>`)
    if (!write_summary_json(resolve_path(opt.out_dir + "/summary.json"), summary, &write_error))
      output_failed("summary: " + write_error);
  }
  return out;
}

}  // namespace odyssey
