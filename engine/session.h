// The embedded engine as the studio sees it: start/pause/stop a training run on rank threads,
// change memory toggles live, and copy out metrics, memory samples and phase spans without
// blocking training. No LibTorch in this header (the sample types are telemetry's:
// engine/telemetry/samples.h). defines: Session, SessionState, SessionStatus
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/telemetry/samples.h"

namespace odyssey {

enum class SessionState { Idle, Starting, Running, Paused, Stopping, Finished, Failed };
/// Inline so that the studio's core, which does not link the engine library, names states too.
inline const char* to_string(SessionState state) {
  switch (state) {
    case SessionState::Idle:
      return "idle";
    case SessionState::Starting:
      return "starting";
    case SessionState::Running:
      return "running";
    case SessionState::Paused:
      return "paused";
    case SessionState::Stopping:
      return "stopping";
    case SessionState::Finished:
      return "finished";
    case SessionState::Failed:
      return "failed";
  }
  return "?";
}

struct SessionStatus {
  SessionState state = SessionState::Idle;
  std::string message;  ///< what happened last ("restarted: world size changed", the error, ...)
  int64_t step = 0;     ///< steps completed
  int64_t steps = 0;    ///< steps planned
  int world_size = 0;
  std::string device;  ///< "cpu", "cuda:0..7"
  bool emulated = false;
  int64_t config_version = 0;
};

/// Owns the rank threads of one run. All methods are thread-safe and return quickly; the studio
/// calls them from its UI thread every frame.
class Session {
 public:
  Session();
  ~Session();  // stops the run and joins the threads
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Validates `cfg` and starts training on new rank threads. False with *error if invalid or
  /// already running. The planner's fit verdict is not asked here: the studio's RunDriver refuses
  /// an unfit config before it comes here, and forwards it only when the user forces it.
  bool start(const RunConfig& cfg, std::string* error);
  void pause();
  void resume();
  /// Stops at the next step boundary.
  void stop();
  /// Blocks until the run finishes or fails (tests, headless use).
  void wait();

  /// Changes that need no restart (checkpointing, offload, tiling, tile sizes, Untied Ulysses,
  /// heads per stage) apply at the next step boundary. Returns false with *reason when the
  /// change is invalid or needs a restart (model, world size, Ulysses degree, dtype...).
  bool apply_live(const RunConfig& cfg, std::string* reason);
  /// Restarts the run with `cfg` from the current weights where the model is unchanged.
  bool restart(const RunConfig& cfg, std::string* error);

  SessionStatus status() const;
  RunConfig config() const;

  /// Copies out what arrived after `cursor` (a count) and returns the new cursor.
  size_t metrics_since(size_t cursor, std::vector<StepMetrics>* out) const;
  size_t samples_since(size_t cursor, std::vector<MemorySample>* out) const;
  size_t spans_since(size_t cursor, std::vector<PhaseSpan>* out) const;
  /// Phase path of each phase_id ("fwd/block.3/attn").
  std::vector<std::string> phase_names() const;
  /// Log lines since the last call.
  std::vector<std::string> drain_log();

  /// Writes the run's Perfetto trace / metrics JSONL so far.
  bool export_trace(const std::string& path, std::string* error) const;
  bool export_metrics(const std::string& path, std::string* error) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace odyssey
