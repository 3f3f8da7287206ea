// ScriptRunner: the screenshot mode's steps in order. Edits go through the same AppState config
// the panels edit, so RunDriver applies them live or restarts exactly as for a user.
// defines: ScriptRunner::step, apply_assignment
#include "app/studio/script_runner.h"

#include "engine/config/preset.h"
#include "engine/config/schema.h"

namespace odyssey::studio {

bool apply_assignment(AppState& state, const std::string& assignment, std::string* error) {
  Override ov;
  ConfigIssue issue;
  if (!parse_override(assignment, 0, &ov, &issue)) {
    if (error) *error = issue.format();
    return false;
  }
  const std::string key = ov.section + "." + ov.key;
  const KeySpec* spec = find_key_spec(ov.section, ov.key);
  if (!spec) {
    if (error) *error = "unknown key " + key;
    return false;
  }
  std::string rule;
  if (!coerce_value(*spec, ov.value, &rule)) {
    if (error) *error = key + " = " + ov.value.text + ": " + rule;
    return false;
  }
  // Rule violations are not refused: they show at their fields, as for an edit in the panel.
  const LoadedPreset applied = apply_overrides(state.config, {ov});
  state.config = applied.config;
  refresh_validation(state);
  return true;
}

bool ScriptRunner::step(AppState& state, EngineControl& engine, double now_s) {
  switch (stage_) {
    case Stage::Begin:
      t_begin_ = now_s;
      if (options_.run_steps > 0) {
        std::string err;
        if (!state.run.start(engine, state.config, state.history, &err)) {
          error_ = "the run did not start: " + err;
          stage_ = Stage::Settling;
          frames_left_ = options_.frames;
          return false;
        }
        stage_ = Stage::Training;
      } else {
        stage_ = Stage::Settling;
        frames_left_ = options_.frames;
      }
      return false;
    case Stage::Training: {
      const SessionStatus st = engine.status();
      // One scripted edit at a time: the next waits until the previous one is marked (took effect),
      // so each lands on its own step however the frame rate compares with the step rate.
      const bool previous_landed = state.history.markers().size() >= markers_wanted_;
      if (previous_landed && next_change_ < options_.changes.size() && options_.changes[next_change_].step <= st.step) {
        std::string err;
        const RunConfig before = state.config;
        if (!apply_assignment(state, options_.changes[next_change_].assignment, &err))
          state.history.add_log("[studio] --change-at ignored: " + err);
        else if (!(before == state.config) && state.edit.issues.empty() &&
                 classify_change(before, state.config).kind >= ChangeKind::Live)
          markers_wanted_ = state.history.markers().size() + 1;
        ++next_change_;
      }
      const bool done = static_cast<int64_t>(state.history.metrics().size()) >= options_.run_steps &&
                        state.history.markers().size() >= markers_wanted_;
      const bool over = st.state == SessionState::Finished || st.state == SessionState::Failed;
      if (st.state == SessionState::Failed) error_ = "the run failed: " + st.message;
      if (!done && !over && now_s - t_begin_ > options_.timeout_s)
        error_ = "the run did not reach " + std::to_string(options_.run_steps) + " steps in " +
                 std::to_string(static_cast<int>(options_.timeout_s)) + " s (state " + state_label(st.state) +
                 ", step " + std::to_string(st.step) + ")";
      if ((done && !state.run.restart_pending()) || over || failed()) {
        run_seconds_ = now_s - t_begin_;
        if (is_live_state(st.state)) state.run.pause(engine);  // a still picture, and the CPU for rendering
        stage_ = Stage::Settling;
        frames_left_ = options_.frames;
      }
      return false;
    }
    case Stage::Settling:
      // The ladder and advice arrive from the planner's worker; the picture waits for them.
      if (state.plan.get(state.config).ok && state.plan.extras_pending()) return false;
      if (--frames_left_ > 0) return false;
      stage_ = Stage::Done;
      return true;
    case Stage::Done:
      return false;
  }
  return false;
}

}  // namespace odyssey::studio
