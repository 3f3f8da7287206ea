// odyssey train PRESET [--set k=v]... [--steps N] [--out DIR] [--resume DIR] [--overwrite] [--force]
// [--no-checkpoint] [--memory-snapshot FILE] [--kernel-profile FILE] [--quiet]: trains the preset's
// model on this machine; a progress bar on a terminal, plain lines otherwise; writes
// DIR/metrics.jsonl, DIR/trace.json, DIR/summary.json and checkpoints; Ctrl-C stops at the next step
// boundary with a checkpoint, as does SIGTERM (at once while the run is still loading). Under torchrun (RANK, WORLD_SIZE, ... set) each process runs one
// rank; rank 0 prints and writes the outputs, the others print errors only.
// Exit 0 (finished), 1 (runtime failure), 2 (bad input), 130/143 (stopped by SIGINT/SIGTERM, after
// its checkpoint).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "app/cli/cli.h"
#include "app/cli/stop_signal_scope.h"
#include "engine/config/sizes.h"
#include "engine/parallel/job.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/run.h"
#include "engine/util/files.h"

namespace odyssey::cli {
namespace {

// the run's control once it exists; null while the command reads its input (a stop then ends it)
std::atomic<RunControl*> g_control{nullptr};
volatile std::sig_atomic_t g_stop_signal = 0;        // the signal that asked the run to stop (0: none)
volatile std::sig_atomic_t g_writes_checkpoint = 1;  // 0 under --no-checkpoint: the stop message says so

// SIGINT (Ctrl-C) and SIGTERM (what cluster schedulers send before a kill) stop at the next step
// boundary, where the run writes its checkpoint; the same signal again kills at once.
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  RunControl* control = g_control.load();
  if (control == nullptr || !control->stepping()) {
    // Still loading (weights, data, a checkpoint): no step to finish and nothing to save, and a
    // large model can take minutes to load. End now, as the signal's default would, but say so.
    static const char kLoading[] =
        "\nodyssey train: stopped while loading, before the first step: nothing was trained\n";
    ssize_t ignored = ::write(STDERR_FILENO, kLoading, sizeof(kLoading) - 1);
    (void)ignored;
    ::_exit(128 + sig);
  }
  control->request_stop_from_signal(sig);
  static const char kInt[] = "\nodyssey train: Ctrl-C: stopping at the next step boundary";
  static const char kTerm[] = "\nodyssey train: SIGTERM: stopping at the next step boundary";
  static const char kCheckpoint[] = " with a checkpoint";
  static const char kNoCheckpoint[] = " (--no-checkpoint: no checkpoint)";
  static const char kAgainInt[] = " (Ctrl-C again to abort)\n";
  static const char kAgainTerm[] = " (SIGTERM again to abort)\n";
  auto say = [](const char* text, size_t len) {
    ssize_t ignored = ::write(STDERR_FILENO, text, len);
    (void)ignored;
  };
  if (sig == SIGINT)
    say(kInt, sizeof(kInt) - 1);
  else
    say(kTerm, sizeof(kTerm) - 1);
  if (g_writes_checkpoint)
    say(kCheckpoint, sizeof(kCheckpoint) - 1);
  else
    say(kNoCheckpoint, sizeof(kNoCheckpoint) - 1);
  if (sig == SIGINT)
    say(kAgainInt, sizeof(kAgainInt) - 1);
  else
    say(kAgainTerm, sizeof(kAgainTerm) - 1);
  std::signal(sig, SIG_DFL);  // a second one kills
}

/// Installs on_stop_signal for SIGINT and SIGTERM from the command's start (a stop while it reads
/// its input or loads ends it with "stopped while loading", never a silent signal death), bound
/// to the run's control once that exists; restores both after.
class StopSignals {
 public:
  StopSignals() { scope_.emplace(unbound_handler(), /*restart=*/true); }
  ~StopSignals() {
    scope_.reset();  // the earlier handlers first: a signal now never reads a finished run as loading
    g_control = nullptr;
  }
  /// From here a stop waits for the step boundary once the run steps.
  void bind(RunControl* control) { g_control = control; }

 private:
  static void (*unbound_handler())(int) {
    g_control = nullptr;
    g_stop_signal = 0;
    return on_stop_signal;
  }
  std::optional<StopSignalScope> scope_;
};

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

std::string step_line(const StepMetrics& m, const StepResult& r, int64_t total) {
  char text[256];
  std::snprintf(text, sizeof(text), "step %lld/%lld  loss %.4f", static_cast<long long>(m.step),
                static_cast<long long>(total), m.loss);
  std::string line = text;
  if (r.has_answers) {
    std::snprintf(text, sizeof(text), "  answer loss %.3f acc %3.0f%%", r.answer_loss, 100.0 * r.answer_accuracy);
    line += text;
  }
  std::snprintf(text, sizeof(text), "  %s tok/s  %.0f ms  peak %s",
                format_size(static_cast<int64_t>(m.tokens_per_s)).c_str(), 1000.0 * m.step_time_s,
                mib(m.peak_bytes).c_str());
  line += text;
  if (!m.loss_meaningful) line += "  (rank emulation: loss meaningless)";
  return line;
}

std::string progress_bar(int64_t done, int64_t total) {
  const int width = 24;
  const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
}

int run_train(int argc, char** argv, int first) {
  std::optional<StopSignals> signals(std::in_place);
  ArgSpec spec;
  spec.set = spec.steps = spec.out = spec.resume = spec.quiet = spec.no_checkpoint = spec.memory_snapshot =
      spec.kernel_profile = spec.overwrite = spec.force = true;
  // Refused here, under torchrun, the other processes learn why at once (they waited for this one
  // until parallel.timeout_s, then blamed the store).
  std::ostringstream refused;
  auto refuse = [&] {
    std::cerr << refused.str() << std::flush;
    std::string reason = refused.str();
    while (!reason.empty() && reason.back() == '\n') reason.pop_back();
    refuse_torchrun_start(reason, true);
    return kExitBadInput;
  };
  auto args = parse_args("train", spec, argc, argv, first, refused);
  if (!args) return refuse();
  auto loaded = load_or_report(args->positional[0], args->overrides, refused);
  if (!loaded) return refuse();
  const RunConfig& cfg = loaded->config;
  bool lead = true;  // this process runs rank 0 (not a torchrun process with RANK != 0)
  try {
    lead = runs_rank_zero();
  } catch (const std::invalid_argument& e) {
    std::cerr << "odyssey train: " << e.what() << "\n";
    return kExitBadInput;
  }
  const bool quiet = args->quiet || !lead;
  const std::string who =
      lead ? std::string("odyssey train: ") : std::string("odyssey train (rank ") + std::getenv("RANK") + "): ";

  RunOptions opt;
  opt.preset = args->positional[0];
  opt.resume_dir = args->resume;
  opt.overwrite = args->overwrite;
  opt.force = args->force;
  // A benchmark's run: no checkpoint at all (the 1B model's is 15 GB, and a device disk is 64 GiB).
  opt.checkpoints = !args->no_checkpoint;
  g_writes_checkpoint = opt.checkpoints ? 1 : 0;
  opt.memory_snapshot = args->memory_snapshot;
  opt.kernel_profile = args->kernel_profile;
  opt.out_dir = !args->out.empty() ? args->out : !args->resume.empty() ? args->resume : clean_path(cfg.output.dir);
  int64_t start = 0;
  if (!opt.resume_dir.empty()) {
    std::string refusal;
    try {
      auto info = read_checkpoint_info(opt.resume_dir);
      if (info) {
        start = info->step;
        opt.resume_info = info;  // the one read every rank of this process resumes from
      } else {
        refusal = "--resume " + opt.resume_dir + ": no checkpoint there (no checkpoints/latest.json)";
      }
    } catch (const std::exception& e) {
      refusal = e.what();
    }
    if (!refusal.empty()) {
      std::cerr << who << refusal << "\n";
      // Another node may hold the checkpoint (rank 0 writes latest.json): its processes learn this
      // refusal at their first agreement point instead of waiting for this one.
      refuse_torchrun_start(refusal, true);
      return kExitBadInput;
    }
  }
  opt.steps = args->steps ? start + *args->steps : cfg.training.steps;
  if (opt.steps > cfg.training.steps && lead)
    std::cout << "odyssey train: note: --steps runs to step " << opt.steps
              << ", past training.steps = " << cfg.training.steps << ": the learning-rate schedule ends at step "
              << cfg.training.steps << ", and the steps after it run at its floor (training.min_lr_ratio x lr)\n";

  const bool tty = ::isatty(STDOUT_FILENO) && !quiet;
  const int64_t log_every = std::max<int64_t>(1, cfg.output.log_every);
  opt.log_failure = false;  // the outcome's error is printed below, on stderr, once
  opt.log = [&](const std::string& line) {
    if (!lead) return;
    if (tty) std::cout << "\r\033[K";
    std::cout << line << "\n" << std::flush;
  };
  bool first_step = true;
  opt.on_step = [&](const StepMetrics& m, const StepResult& r) {  // m.step counts from 1
    if (quiet) return;
    const bool last = m.step == opt.steps;
    if (tty) {
      std::cout << "\r\033[K" << progress_bar(m.step, opt.steps) << step_line(m, r, opt.steps) << std::flush;
      if (last || m.step % log_every == 0) std::cout << "\n";
    } else if (last || first_step || m.step % log_every == 0) {
      std::cout << step_line(m, r, opt.steps) << "\n" << std::flush;
    }
    first_step = false;
  };
  RunControl control;
  opt.control = &control;
  signals->bind(&control);
  if (lead)
    std::cout << "odyssey train " << opt.preset << ": " << cfg.model.flavor << ", " << format_size(cfg.training.seq_len)
              << " tokens x " << cfg.training.batch_size << ", " << cfg.parallel.world_size << " rank"
              << (cfg.parallel.world_size == 1 ? "" : "s") << ", steps " << start << ".." << opt.steps << " -> "
              << opt.out_dir << "\n"
              << std::flush;  // a scheduler's log shows it before loading starts
  const RunOutcome outcome = run_training(cfg, opt);
  const int stop_signal = g_stop_signal;
  signals.reset();
  if (tty) std::cout << "\r\033[K";
  // A run stopped by a signal exits 128 + its number (130 Ctrl-C, 143 SIGTERM), as shells report
  // a process the signal ended, so a scheduler sees it did not finish; its checkpoint is written.
  // Under torchrun the signal may have come to another process: the job stopped all the same.
  const int job_signal = outcome.stop_signal ? outcome.stop_signal : stop_signal;
  const int stopped_code = outcome.status == RunOutcome::Status::Stopped && job_signal ? 128 + job_signal : kExitOk;

  if (outcome.status == RunOutcome::Status::Failed) {
    std::cerr << who << outcome.error << "\n";
    return outcome.bad_input ? kExitBadInput : kExitRuntime;
  }
  if (!lead) return stopped_code;
  if (!outcome.metrics.empty()) {
    const auto& first_m = outcome.metrics.front();
    const auto& last_m = outcome.metrics.back();
    std::cout << to_string(outcome.status) << " at step " << outcome.next_step << ": loss " << first_m.loss << " -> "
              << last_m.loss;
    const auto& last_r = outcome.results.back();
    if (last_r.has_answers) {
      // One step's accuracy is one sequence's (the passkey task asks one passkey many times):
      // the mean over a window of steps at each end says whether the run learned.
      const size_t n = outcome.results.size(), window = std::max<size_t>(1, std::min<size_t>(30, n / 4));
      auto mean_accuracy = [&](size_t from) {
        double sum = 0;
        for (size_t i = from; i < from + window; ++i) sum += outcome.results[i].answer_accuracy;
        return static_cast<int>(100 * sum / static_cast<double>(window));
      };
      std::cout << ", answer loss " << outcome.results.front().answer_loss << " -> " << last_r.answer_loss
                << " (accuracy over " << window << (window == 1 ? " step " : " steps ") << mean_accuracy(0) << "% -> "
                << mean_accuracy(n - window) << "%)";
    }
    std::cout << "; outputs in " << opt.out_dir << "\n";
  } else {
    std::cout << to_string(outcome.status) << " at step " << outcome.next_step << " (no steps run)\n";
  }
  return stopped_code;
}

const CommandRegistration registration{Command{
    50, "train",
    "train PRESET [--set k=v]... [--steps N] [--out DIR] [--resume DIR] [--overwrite] [--force] [--no-checkpoint] "
    "[--memory-snapshot FILE] [--kernel-profile FILE] [--quiet]",
    "train on this machine: metrics.jsonl, trace.json, summary.json, checkpoints; Ctrl-C stops cleanly", run_train}};

}  // namespace
}  // namespace odyssey::cli
