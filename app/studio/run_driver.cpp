// RunDriver: the only place the studio starts, steers and stops the engine. Live edits carry only
// the [memory] table (the engine rejects anything else without a restart); restarts wait for the
// edits to settle so a dragged slider does not restart the run every frame. defines: RunDriver
#include "app/studio/run_driver.h"

namespace odyssey::studio {

void RunDriver::set_notice(std::string text, RunHistory& history) {
  if (text == notice_) return;
  notice_ = std::move(text);
  ++notice_serial_;
  history.add_log("[studio] " + notice_);
}

bool RunDriver::start(EngineControl& engine, const RunConfig& cfg, RunHistory& history, std::string* error) {
  std::string err;
  history.reset(cfg);
  if (!engine.start(cfg, &err)) {
    set_notice("Could not start: " + err, history);
    if (error) *error = err;
    return false;
  }
  sent_ = cfg;
  last_edited_ = cfg;
  has_run_ = true;
  restart_pending_ = false;
  failed_restart_.reset();
  held_back_.clear();
  set_notice("Started: " + std::to_string(cfg.parallel.world_size) + " rank(s), " +
                 std::to_string(cfg.training.steps) + " steps",
             history);
  return true;
}

void RunDriver::pause(EngineControl& engine) { engine.pause(); }
void RunDriver::resume(EngineControl& engine) { engine.resume(); }

void RunDriver::stop(EngineControl& engine) {
  engine.stop();
  restart_pending_ = false;
}

void RunDriver::sync(EngineControl& engine, const RunConfig& edited, bool edited_valid, double now_s,
                      RunHistory& history) {
  if (!has_run_) return;
  if (!is_live_state(engine.status().state)) {
    restart_pending_ = false;
    return;
  }
  const ConfigChange change = classify_change(sent_, edited);
  if (change.kind == ChangeKind::None || change.kind == ChangeKind::PlanOnly) {
    restart_pending_ = false;  // edits were undone before the restart fired
    return;
  }
  if (!edited_valid) {
    restart_pending_ = false;
    if (held_back_ != change.summary) {
      held_back_ = change.summary;
      set_notice("Not applied to the run: the configuration has problems (see the fields)", history);
    }
    return;
  }
  held_back_.clear();

  if (change.kind == ChangeKind::Live) {
    RunConfig live = sent_;
    live.memory = edited.memory;  // only the table the engine can change between steps
    std::string reason;
    if (engine.apply_live(live, &reason)) {
      sent_ = live;
      restart_pending_ = false;
      history.note_live_change(change.summary, live);
      set_notice("Applies at the next step: " + change.summary, history);
      return;
    }
    // The engine wants a restart for it (its reason is the authority): fall through.
    if (!reason.empty()) history.add_log("[studio] live change refused: " + reason);
  }

  if (failed_restart_ && *failed_restart_ == edited) return;  // said once; wait for a new edit
  if (!restart_pending_ || !(edited == last_edited_)) {
    restart_pending_ = true;
    restart_at_s_ = now_s + kRestartSettleS;
    last_edited_ = edited;
    set_notice("Restarting the run when edits settle (needs a restart): " + change.summary, history);
    return;
  }
  if (now_s < restart_at_s_) return;
  restart_pending_ = false;
  std::string err;
  if (!engine.restart(edited, &err)) {
    failed_restart_ = edited;
    set_notice("Restart failed: " + err, history);
    return;
  }
  failed_restart_.reset();
  sent_ = edited;
  history.note_restart(change.summary, edited);
  set_notice("Restarted the run: " + change.summary, history);
}

}  // namespace odyssey::studio
