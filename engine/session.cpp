// Session: the embedded engine for the studio. One worker thread drives run_training (which runs
// the rank threads); the UI thread starts, pauses, stops, applies live toggles and restarts, and
// reads metrics, samples, spans and log lines from the Timeline without blocking training. Never
// throws into the UI. defines: Session
#include "engine/session.h"

#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "engine/config/config_diff.h"
#include "engine/config/schema.h"
#include "engine/config/validate.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/metrics_jsonl.h"
#include "engine/telemetry/phase.h"
#include "engine/telemetry/timeline.h"
#include "engine/telemetry/trace_writer.h"
#include "engine/train/run.h"

namespace odyssey {

namespace {

constexpr size_t kMaxLogLines = 10000;

std::string first_issue(const std::vector<ConfigIssue>& issues) {
  std::string text;
  for (const auto& issue : issues) text += (text.empty() ? "" : "\n") + issue.format();
  return text;
}

// The changed keys that a live apply cannot take, by the schema's rule (KeySpec::applies, the
// studio's classifier reads the same): "" when every change applies at the next step or only
// moves the plan.
std::string restart_reason(const RunConfig& a, const RunConfig& b) {
  std::string keys;
  for (const KeyChange& change : config_changes(a, b)) {
    const KeySpec* spec = find_key_spec(change.key);
    if (spec && spec->applies() != ApplyWhen::Restart) continue;
    keys += (keys.empty() ? "" : ", ") + change.key;
  }
  return keys.empty() ? "" : "changed " + keys;
}

}  // namespace

struct Session::Impl {
  mutable std::mutex mutex;
  RunConfig config;
  SessionStatus status;
  std::thread worker;
  std::unique_ptr<RunControl> control;
  Timeline timeline;  // one for the session's life: cursors stay valid across restarts
  std::deque<std::string> log;
  std::shared_ptr<FullState> last_state;  // weights at the end of the last run (restart)
  double epoch_s = telemetry_now_s();

  void add_log(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    log.push_back(line);
    while (log.size() > kMaxLogLines) log.pop_front();
  }

  void set_state(SessionState state, const std::string& message = {}) {
    std::lock_guard<std::mutex> lock(mutex);
    status.state = state;
    if (!message.empty()) status.message = message;
  }

  void join() {
    if (worker.joinable()) worker.join();
  }

  // Starts the worker for `cfg`; `initial` carries weights over (restart). Caller holds no lock.
  void launch(const RunConfig& cfg, std::shared_ptr<FullState> initial, const std::string& message) {
    control = std::make_unique<RunControl>();
    {
      std::lock_guard<std::mutex> lock(mutex);
      config = cfg;
      status.state = SessionState::Starting;
      status.message = message;
      status.step = initial ? initial->next_step : 0;
      status.steps = cfg.training.steps;
      status.world_size = static_cast<int>(cfg.parallel.world_size);
      // "auto" as the run resolves it: the studio draws a GPU profile's plan only beside a GPU run
      status.device = device_here(cfg.training.device) == DeviceKind::Cuda ? "cuda" : "cpu";
      status.emulated = cfg.parallel.emulate;
    }
    RunControl* ctl = control.get();
    ctl->on_pause_change = [this](bool paused) {
      std::lock_guard<std::mutex> lock(mutex);
      if (status.state == SessionState::Stopping) return;  // a stop ends the pause
      status.state = paused ? SessionState::Paused : SessionState::Running;
    };
    worker = std::thread([this, cfg, initial, ctl] {
      RunOptions opt;
      opt.preset = cfg.description;
      opt.control = ctl;
      opt.timeline = &timeline;
      opt.epoch_s = epoch_s;
      opt.checkpoints = false;
      // The planner's fit verdict is the studio's to give (RunDriver refuses an unfit config and
      // offers "Start anyway"): what reaches the session was fitted or forced there.
      opt.force = true;
      opt.initial_state = initial.get();
      std::shared_ptr<FullState> final_state;
      opt.final_state = &final_state;
      opt.log = [this](const std::string& line) { add_log(line); };
      opt.on_step = [this](const StepMetrics& m, const StepResult& r) {
        std::lock_guard<std::mutex> lock(mutex);
        status.step = m.step;  // steps completed: metrics count steps from 1
        if (status.state == SessionState::Starting) status.state = SessionState::Running;
        if (r.has_answers && m.step % 10 == 0) {
          char line[160];
          std::snprintf(line, sizeof line, "step %lld: loss %.4f, answer loss %.3f, accuracy %.0f%%",
                        static_cast<long long>(m.step), m.loss, r.answer_loss, 100.0 * r.answer_accuracy);
          log.push_back(line);
        }
      };
      RunOutcome outcome;
      try {
        outcome = run_training(cfg, opt);
      } catch (const std::exception& e) {  // run_training does not throw; belt and braces
        outcome.status = RunOutcome::Status::Failed;
        outcome.error = e.what();
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (final_state) last_state = final_state;
      status.step = outcome.next_step;
      if (outcome.status == RunOutcome::Status::Failed) {
        status.state = SessionState::Failed;
        status.message = outcome.error;
      } else {
        status.state = SessionState::Finished;
        status.message = outcome.status == RunOutcome::Status::Stopped
                             ? "stopped at step " + std::to_string(outcome.next_step)
                             : "finished " + std::to_string(outcome.next_step) + " steps";
      }
    });
  }
};

Session::Session() : impl_(std::make_unique<Impl>()) {}

Session::~Session() {
  try {
    stop();
    impl_->join();
  } catch (...) {
  }
}

bool Session::start(const RunConfig& cfg, std::string* error) {
  try {
    const auto issues = validate(cfg);
    if (!issues.empty()) {
      if (error) *error = first_issue(issues);
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      const SessionState s = impl_->status.state;
      if (s == SessionState::Starting || s == SessionState::Running || s == SessionState::Paused ||
          s == SessionState::Stopping) {
        if (error) *error = "a run is already in progress (stop it or use restart)";
        return false;
      }
    }
    impl_->join();
    impl_->launch(cfg, nullptr, "started");
    return true;
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  }
}

void Session::pause() {
  if (impl_->control) impl_->control->pause();
}

void Session::resume() {
  if (impl_->control) impl_->control->resume();
}

void Session::stop() {
  if (!impl_->control) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    const SessionState s = impl_->status.state;
    if (s == SessionState::Starting || s == SessionState::Running || s == SessionState::Paused)
      impl_->status.state = SessionState::Stopping;
  }
  impl_->control->request_stop();
}

void Session::wait() { impl_->join(); }

bool Session::apply_live(const RunConfig& cfg, std::string* reason) {
  try {
    const auto issues = validate(cfg);
    if (!issues.empty()) {
      if (reason) *reason = first_issue(issues);
      return false;
    }
    std::lock_guard<std::mutex> lock(impl_->mutex);
    const std::string why = restart_reason(impl_->config, cfg);
    if (!why.empty()) {
      if (reason) *reason = "needs a restart: " + why;
      return false;
    }
    // Everything but the restart keys: the memory techniques reach the ranks at the next step;
    // the hardware target, output and description only move the plan and the next run's files.
    impl_->config = cfg;
    const int64_t version = ++impl_->status.config_version;
    if (impl_->control) impl_->control->set_memory(cfg.memory, version);
    return true;
  } catch (const std::exception& e) {
    if (reason) *reason = e.what();
    return false;
  }
}

bool Session::restart(const RunConfig& cfg, std::string* error) {
  try {
    const auto issues = validate(cfg);
    if (!issues.empty()) {
      if (error) *error = first_issue(issues);
      return false;
    }
    RunConfig previous;
    {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      previous = impl_->config;
    }
    stop();
    impl_->join();
    std::shared_ptr<FullState> carried;
    std::string message = "restarted";
    {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      const std::string why = restart_reason(previous, cfg);
      if (!why.empty()) message += ": " + why;
      if (impl_->last_state && impl_->last_state->model == cfg.model) {
        carried = impl_->last_state;
        message += " (weights carried over from step " + std::to_string(carried->next_step) + ")";
      } else {
        message += " (fresh weights)";
      }
      impl_->status.config_version += 1;
    }
    impl_->add_log(message);
    impl_->launch(cfg, carried, message);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  }
}

SessionStatus Session::status() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->status;
}

RunConfig Session::config() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->config;
}

size_t Session::metrics_since(size_t cursor, std::vector<StepMetrics>* out) const {
  return impl_->timeline.metrics_since(cursor, out);
}

size_t Session::samples_since(size_t cursor, std::vector<MemorySample>* out) const {
  return impl_->timeline.samples_since(cursor, out);
}

size_t Session::spans_since(size_t cursor, std::vector<PhaseSpan>* out) const {
  return impl_->timeline.spans_since(cursor, out);
}

std::vector<std::string> Session::phase_names() const { return impl_->timeline.phase_names(); }

std::vector<std::string> Session::drain_log() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<std::string> lines(impl_->log.begin(), impl_->log.end());
  impl_->log.clear();
  return lines;
}

bool Session::export_trace(const std::string& path, std::string* error) const {
  try {
    TraceWriter trace(path);
    std::vector<PhaseSpan> spans;
    std::vector<MemorySample> samples;
    impl_->timeline.spans_since(0, &spans);
    impl_->timeline.samples_since(0, &samples);
    for (const auto& s : samples) trace.on_sample(s);
    for (const auto& s : spans) trace.on_span(s, impl_->timeline.phase_name(s.phase_id));
    std::vector<StepMetrics> metrics;
    impl_->timeline.metrics_since(0, &metrics);
    for (const auto& m : metrics) trace.on_step(m);
    trace.close();
    return true;
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  }
}

bool Session::export_metrics(const std::string& path, std::string* error) const {
  try {
    std::vector<StepMetrics> metrics;
    impl_->timeline.metrics_since(0, &metrics);
    return write_metrics_jsonl(path, metrics, error);
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  }
}

}  // namespace odyssey
