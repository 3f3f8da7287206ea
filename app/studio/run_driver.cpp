// RunDriver: the only place the studio starts, steers and stops the engine. Live edits carry only
// the [memory] table (the engine rejects anything else without a restart); restarts wait for the
// edits to settle so a dragged slider does not restart the run every frame. defines: RunDriver
#include "app/studio/run_driver.h"

#include "engine/planner/planner.h"

namespace odyssey::studio {

void RunDriver::set_notice(std::string text, RunHistory& history) {
  if (text == notice_) return;
  notice_ = std::move(text);
  ++notice_serial_;
  history.add_log("[studio] " + notice_);
}

bool RunDriver::may_run(const EngineControl& engine, const RunConfig& cfg, const std::string& what,
                        RunHistory& history) {
  if (forced_ && *forced_ == cfg) return true;
  if (unfit_ && *unfit_ == cfg) return false;  // refused already (sync asks every frame; the advisor is not free)
  // The studio's engine runs every rank as a thread of this process (one under emulation), on the
  // device the engine resolves "auto" to: on the CPU the planner checks this machine's RAM (a GPU
  // preset at "auto" trained on the CPU until the OOM killer ended the studio). A config that breaks
  // a rule cannot be planned (the planner throws): refused with the planner's reason.
  RunConfig here = cfg;
  here.training.device = engine.runs_on(cfg.training.device);
  std::string why;
  try {
    why = planned_out_of_memory(here, cfg.parallel.emulate ? 1 : cfg.parallel.world_size);
  } catch (const std::exception& e) {
    why = std::string("the planner cannot plan this config: ") + e.what();
  }
  if (why.empty()) return true;
  unfit_ = cfg;
  unfit_reason_ = why;
  set_notice(what + ": " + why, history);
  return false;
}

bool RunDriver::force_unfit(EngineControl& engine, RunHistory& history, std::string* error) {
  if (!unfit_) return false;
  const RunConfig cfg = *unfit_;
  forced_ = cfg;
  unfit_.reset();
  unfit_reason_.clear();
  if (!has_run_ || !is_live_state(engine.status().state)) return start(engine, cfg, history, error, /*force=*/true);
  // A live run: the refused edit goes out as sync would have sent it (now, without the settling wait).
  const ConfigChange change = classify_change(sent_, cfg);
  std::string err;
  if (change.kind == ChangeKind::Live && engine.apply_live(cfg, &err)) {
    sent_ = cfg;
    history.note_live_change(change.summary, cfg);
    set_notice("Applies at the next step (forced past the planner's verdict): " + change.summary, history);
    live_awaited_ = change.summary;
    markers_before_live_ = history.markers().size();
    return true;
  }
  last_edited_ = cfg;
  restart_pending_ = false;
  return restart(engine, cfg, change.summary + " (forced past the planner's verdict)", history, error);
}

bool RunDriver::restart(EngineControl& engine, const RunConfig& cfg, const std::string& summary, RunHistory& history,
                        std::string* error) {
  std::string err;
  if (!engine.restart(cfg, &err)) {
    failed_restart_ = cfg;
    set_notice("Restart failed: " + err, history);
    if (error) *error = err;
    return false;
  }
  failed_restart_.reset();
  sent_ = cfg;
  live_awaited_.clear();
  history.note_restart(summary, cfg);
  set_notice("Restarted the run: " + summary, history);
  return true;
}

bool RunDriver::start(EngineControl& engine, const RunConfig& cfg, RunHistory& history, std::string* error,
                      bool force) {
  if (force) forced_ = cfg;
  if (!may_run(engine, cfg, "Not started", history)) {
    if (error) *error = unfit_reason_;
    return false;
  }
  unfit_.reset();
  unfit_reason_.clear();
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
  live_awaited_.clear();
  set_notice("Started: " + std::to_string(cfg.parallel.world_size) + " rank(s), " + std::to_string(cfg.training.steps) +
                 " steps",
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
  // "Applies at the next step" stayed after the step it applied at: once the change's marker has
  // come, the notice says where it took effect.
  if (!live_awaited_.empty() && notice_.ends_with(live_awaited_))
    for (size_t i = markers_before_live_; i < history.markers().size(); ++i)
      // (changes that landed on one step share its marker: "A; B")
      if (const ChangeMarker& m = history.markers()[i];
          !m.restart && (m.what == live_awaited_ || m.what.ends_with("; " + live_awaited_))) {
        set_notice("Applied from step " + std::to_string(m.step) + ": " + live_awaited_, history);
        live_awaited_.clear();
        break;
      }
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
    if (!may_run(engine, live, "Not applied to the run", history)) return;
    std::string reason;
    if (engine.apply_live(live, &reason)) {
      sent_ = live;
      restart_pending_ = false;
      history.note_live_change(change.summary, live);
      set_notice("Applies at the next step: " + change.summary, history);
      live_awaited_ = change.summary;
      markers_before_live_ = history.markers().size();
      return;
    }
    // The engine wants a restart for it (its reason is the authority): fall through.
    if (!reason.empty()) history.add_log("[studio] live change refused: " + reason);
  }

  if (failed_restart_ && *failed_restart_ == edited) return;  // said once; wait for a new edit
  if (!may_run(engine, edited, "Not restarted", history)) {
    restart_pending_ = false;
    return;
  }
  if (!restart_pending_ || !(edited == last_edited_)) {
    restart_pending_ = true;
    restart_at_s_ = now_s + kRestartSettleS;
    last_edited_ = edited;
    set_notice("Restarting the run when edits settle (needs a restart): " + change.summary, history);
    return;
  }
  if (now_s < restart_at_s_) return;
  restart_pending_ = false;
  restart(engine, edited, change.summary, history, nullptr);
}

}  // namespace odyssey::studio
