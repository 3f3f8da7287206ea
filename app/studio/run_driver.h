// The run panel's logic without rendering: start/pause/stop, and keeping the running engine in step
// with the edited config - memory toggles go out through apply_live (they take effect at the next
// step), model or world-size edits restart the run after the edits settle, with a notice. A config
// the planner says does not fit is neither started nor applied until the user forces it.
// defines: RunDriver
#pragma once

#include <optional>
#include <string>

#include "app/studio/config_edit.h"
#include "app/studio/engine_control.h"
#include "app/studio/run_history.h"

namespace odyssey::studio {

class RunDriver {
 public:
  /// Seconds an edit that needs a restart waits for further edits (a dragged slider restarts once).
  static constexpr double kRestartSettleS = 0.75;

  /// Starts a new run of `cfg`; clears `history`. False with *error when the engine refuses, or
  /// when the planner predicts `cfg` does not fit and `force` is false (nothing starts: an unfit
  /// run would grow until the OOM killer ends the studio); unfit() then holds it.
  bool start(EngineControl& engine, const RunConfig& cfg, RunHistory& history, std::string* error, bool force = false);
  void pause(EngineControl& engine);
  void resume(EngineControl& engine);
  void stop(EngineControl& engine);

  /// Called every frame with the config being edited. While a run is live, sends memory edits
  /// through apply_live at once, schedules a restart for model/parallel/training edits, and holds
  /// back invalid configs (the fields show why). `now_s` is any monotonic clock in seconds.
  void sync(EngineControl& engine, const RunConfig& edited, bool edited_valid, double now_s, RunHistory& history);

  /// The config last refused as not fitting (by start or by a live edit or restart), and why; the
  /// run panel offers to force it. Empty once it is forced, or another config starts.
  const std::optional<RunConfig>& unfit() const { return unfit_; }
  const std::string& unfit_reason() const { return unfit_reason_; }
  /// Runs unfit() anyway: starts it, or applies it to the live run (a live edit or a restart).
  bool force_unfit(EngineControl& engine, RunHistory& history, std::string* error);

  /// The config the engine runs (what was last started, applied or restarted).
  const RunConfig& engine_config() const { return sent_; }
  bool has_run() const { return has_run_; }
  /// True while a restart waits for edits to settle.
  bool restart_pending() const { return restart_pending_; }
  /// The last thing the studio did to the run, in words ("applies at the next step: ...").
  const std::string& notice() const { return notice_; }
  /// Increments whenever notice() changes (the UI flashes new notices).
  int notice_serial() const { return notice_serial_; }

 private:
  void set_notice(std::string text, RunHistory& history);
  /// True when `cfg` may run on `engine`'s device: it fits, or it is the config the user forced.
  /// Otherwise records it as unfit() with the planner's reason and says so once.
  bool may_run(const EngineControl& engine, const RunConfig& cfg, const std::string& what, RunHistory& history);
  /// Restarts the live run with `cfg` ("Restarted the run: summary"), or records the failure.
  bool restart(EngineControl& engine, const RunConfig& cfg, const std::string& summary, RunHistory& history,
               std::string* error);

  RunConfig sent_;
  bool has_run_ = false;
  bool restart_pending_ = false;
  double restart_at_s_ = 0;
  RunConfig last_edited_;
  std::string notice_;
  /// A live change said as "Applies at the next step": its summary and how many change markers
  /// there were then; the notice becomes "Applied from step N" once its marker arrives.
  std::string live_awaited_;
  size_t markers_before_live_ = 0;
  std::string held_back_;                    // the config summary last held back as invalid (said once)
  std::optional<RunConfig> failed_restart_;  // not retried until the user edits again
  int notice_serial_ = 0;
  std::optional<RunConfig> unfit_;  // refused as not fitting, offered to force
  std::string unfit_reason_;
  std::optional<RunConfig> forced_;  // the user forced it: runs without the planner's verdict
};

}  // namespace odyssey::studio
