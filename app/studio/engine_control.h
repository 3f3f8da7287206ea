// The studio's seam to the embedded engine: the Session calls the panels make, as an interface, so
// panel logic is unit-tested against a fake while the executable forwards to the real Session.
// defines: EngineControl, state_label, is_live_state
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/session.h"  // plain data types only (StepMetrics, MemorySample, ...); no LibTorch

namespace odyssey::studio {

/// What the studio asks of the engine. Mirrors odyssey::Session one to one; every call must return
/// quickly because the UI thread makes them every frame.
class EngineControl {
 public:
  virtual ~EngineControl() = default;

  virtual bool start(const RunConfig& cfg, std::string* error) = 0;
  virtual void pause() = 0;
  virtual void resume() = 0;
  virtual void stop() = 0;
  /// Checkpointing, offload, tiling, Untied Ulysses and heads per stage: next step, no restart.
  virtual bool apply_live(const RunConfig& cfg, std::string* reason) = 0;
  /// Model or world-size changes: restart from the current weights where the model is unchanged.
  virtual bool restart(const RunConfig& cfg, std::string* error) = 0;

  virtual SessionStatus status() const = 0;
  virtual size_t metrics_since(size_t cursor, std::vector<StepMetrics>* out) const = 0;
  virtual size_t samples_since(size_t cursor, std::vector<MemorySample>* out) const = 0;
  virtual size_t spans_since(size_t cursor, std::vector<PhaseSpan>* out) const = 0;
  virtual std::vector<std::string> phase_names() const = 0;
  virtual std::vector<std::string> drain_log() = 0;

  virtual bool export_trace(const std::string& path, std::string* error) const = 0;
  virtual bool export_metrics(const std::string& path, std::string* error) const = 0;

  /// training.device as this engine runs it: "auto" is CUDA where the engine finds a device, else
  /// the CPU, whose memory is this machine's RAM (what the planner's refusal must check).
  virtual DeviceKind runs_on(DeviceKind asked) const = 0;
};

/// "running", "paused", ... (the studio's own names; the engine library is not linked into the
/// unit-tested core).
const char* state_label(SessionState state);
/// True while a run exists that can take live changes (starting, running or paused).
bool is_live_state(SessionState state);

}  // namespace odyssey::studio
