// A fake EngineControl for the studio's logic tests: it keeps Session's contract (each accepted
// apply_live bumps config_version; the latest takes effect at the next step boundary and the step
// reports its version; restart swaps the config) and records every call, so tests can see what
// reached the "engine" and when. defines: FakeEngine
#pragma once

#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/studio/engine_control.h"
#include "engine/config/validate.h"

namespace odyssey::studio::testing {

class FakeEngine : public EngineControl {
 public:
  // --- what the studio called -------------------------------------------------------------------
  std::vector<RunConfig> starts, live_calls, restarts;
  int pauses = 0, resumes = 0, stops = 0;
  bool refuse_live = false;   ///< answer apply_live with "needs a restart"
  bool refuse_start = false;  ///< answer start with "cannot start here" (a valid config the engine cannot run)

  // --- what the engine runs --------------------------------------------------------------------
  RunConfig active;
  std::optional<RunConfig> pending;  ///< applied at the next step
  int64_t pending_version = 0, applied_version = 0;
  SessionStatus st;
  std::vector<StepMetrics> metrics;
  std::vector<MemorySample> samples;
  std::vector<PhaseSpan> spans;
  std::vector<std::string> names = {"step", "fwd/block.0/attn", "bwd/block.0/attn", "optimizer"};
  std::vector<std::string> log_lines;

  /// Models the real engine between frames: a step is always running (the next one starts as the
  /// last ends), so a live change or a pause asked for now takes effect at the boundary after the
  /// step in flight, the end of the next advance_step. Off: nothing runs between advance_step calls.
  bool step_in_flight = false;
  bool pause_requested = false;  ///< (step_in_flight) paused at the end of the next advance_step

  /// Runs one step: a pending live change takes effect first (as Session does at the boundary).
  void advance_step() {
    if (pending && !step_in_flight) apply_pending();
    ++st.step;
    StepMetrics m;
    m.step = st.step;
    m.config_version = applied_version;
    m.tokens_per_s = 1000;
    m.step_time_s = 0.5;
    m.rank_peak_bytes.assign(static_cast<size_t>(active.parallel.world_size), 1000 + st.step);
    metrics.push_back(m);
    for (int r = 0; r < active.parallel.world_size; ++r) {
      samples.push_back({double(st.step), st.step, r, 1, 100 * st.step, 0});
      spans.push_back({st.step, r, 1, 2, double(st.step), double(st.step) + 0.5, 0, 0, 2000, 0});
    }
    if (step_in_flight) {  // the boundary after this step: what was asked while it ran
      if (pending) apply_pending();
      if (pause_requested) st.state = SessionState::Paused;
      pause_requested = false;
    }
    if (st.step >= st.steps) st.state = SessionState::Finished;
  }
  void apply_pending() {
    active = *pending;
    pending.reset();
    applied_version = pending_version;
  }

  bool start(const RunConfig& cfg, std::string* error) override {
    starts.push_back(cfg);
    if (refuse_start || !validate(cfg).empty()) {
      if (error) *error = refuse_start ? "cannot start here" : "invalid config";
      return false;
    }
    active = cfg;
    st = SessionStatus{};
    st.state = SessionState::Running;
    st.steps = cfg.training.steps;
    st.world_size = static_cast<int>(cfg.parallel.world_size);
    st.device = "cpu";
    return true;
  }
  void pause() override {
    ++pauses;
    if (step_in_flight && st.state == SessionState::Running)
      pause_requested = true;
    else
      st.state = SessionState::Paused;
  }
  void resume() override {
    ++resumes;
    pause_requested = false;
    // a paused engine waits at a boundary, which it decides again on resuming (Session's
    // StepBoundary): a change sent during the pause runs from the next step
    if (step_in_flight && st.state == SessionState::Paused && pending) apply_pending();
    st.state = SessionState::Running;
  }
  void stop() override {
    ++stops;
    st.state = SessionState::Finished;
  }
  bool apply_live(const RunConfig& cfg, std::string* reason) override {
    live_calls.push_back(cfg);
    RunConfig same = active;
    same.memory = cfg.memory;
    if (refuse_live || !(same == cfg)) {
      if (reason) *reason = "needs a restart";
      return false;
    }
    pending = cfg;
    pending_version = ++st.config_version;
    return true;
  }
  bool restart(const RunConfig& cfg, std::string* error) override {
    restarts.push_back(cfg);
    active = cfg;
    pending.reset();
    applied_version = ++st.config_version;
    st.world_size = static_cast<int>(cfg.parallel.world_size);
    return true;
  }
  SessionStatus status() const override { return st; }
  size_t metrics_since(size_t cursor, std::vector<StepMetrics>* out) const override {
    return copy(metrics, cursor, out);
  }
  size_t samples_since(size_t cursor, std::vector<MemorySample>* out) const override {
    return copy(samples, cursor, out);
  }
  size_t spans_since(size_t cursor, std::vector<PhaseSpan>* out) const override { return copy(spans, cursor, out); }
  std::vector<std::string> phase_names() const override { return names; }
  std::vector<std::string> drain_log() override { return std::exchange(log_lines, {}); }
  /// Each export writes its kind ("trace", "metrics") to the path and records the path.
  bool export_trace(const std::string& path, std::string* error) const override { return write(path, "trace"); }
  bool export_metrics(const std::string& path, std::string* error) const override { return write(path, "metrics"); }
  /// "auto" runs where the fake says: on the CPU unless a test gives it a GPU.
  bool has_cuda = false;
  DeviceKind runs_on(DeviceKind asked) const override {
    if (asked != DeviceKind::Auto) return asked;
    return has_cuda ? DeviceKind::Cuda : DeviceKind::Cpu;
  }
  mutable std::vector<std::string> exports;

 private:
  bool write(const std::string& path, const char* kind) const {
    exports.push_back(path);
    std::ofstream(path) << kind;
    return true;
  }
  template <typename T>
  static size_t copy(const std::vector<T>& from, size_t cursor, std::vector<T>* out) {
    for (size_t i = cursor; i < from.size(); ++i) out->push_back(from[i]);
    return from.size();
  }
};

}  // namespace odyssey::studio::testing
