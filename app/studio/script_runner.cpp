// ScriptRunner: the screenshot mode's steps in order. Edits go through the same AppState config
// the panels edit, so RunDriver applies them live or restarts exactly as for a user.
// defines: ScriptRunner::step, apply_assignment, scripted_run_problem
#include "app/studio/script_runner.h"

#include "engine/config/preset.h"
#include "engine/config/schema.h"

namespace odyssey::studio {

bool apply_assignment(AppState& state, const std::string& assignment, std::string* error) {
  Override ov;
  if (!parse_assignment(assignment, &ov, error)) return false;
  // Rule violations are not refused: they show at their fields, as for an edit in the panel. What
  // no field shows (a model.hf_path that is no model directory) is refused, as train refuses it.
  const LoadedPreset applied = apply_overrides(state.config, {ov});
  if (const std::vector<ConfigIssue> problems = problems_beyond_rules(applied); !problems.empty()) {
    if (error) *error = problems.front().format();
    return false;
  }
  state.config = applied.config;
  refresh_validation(state);
  return true;
}

std::string scripted_run_problem(const StudioOptions& options, const AppState& state) {
  if (options.run_steps == 0) return "";
  if (!state.edit.file_problems.empty())
    return "--run-steps " + std::to_string(options.run_steps) + ": " + state.preset_path +
           " has problems its fields cannot show, where the config holds defaults (" +
           state.edit.file_problems.front().format() + "): fix the file first";
  if (options.run_steps > state.config.training.steps)
    return "--run-steps " + std::to_string(options.run_steps) + ": the preset trains " +
           std::to_string(state.config.training.steps) + " steps (training.steps): ask for at most that, or --set " +
           "training.steps=" + std::to_string(options.run_steps);
  return "";
}

namespace {

/// "--change-at S:k=v", as the option was given: the start of every message about the edit.
std::string change_label(const ScriptedChange& change) {
  return "--change-at " + std::to_string(change.step) + ":" + change.assignment;
}

}  // namespace

void ScriptRunner::make_change(AppState& state, const ScriptedChange& change) {
  std::string err;
  const RunConfig before = state.config;
  if (!apply_assignment(state, change.assignment, &err))
    error_ = change_label(change) + ": " + err;
  else if (!state.edit.issues.empty())  // shown at its field and held back, as a user's edit is
    error_ = change_label(change) + ": not made: the config breaks a rule (" + state.edit.issues.front().format() + ")";
  else if (!(before == state.config) && classify_change(before, state.config).kind >= ChangeKind::Live)
    markers_wanted_ = state.history.markers().size() + 1;
  ++next_change_;
}

bool ScriptRunner::step(AppState& state, EngineControl& engine, double now_s) {
  switch (stage_) {
    case Stage::Begin:
      t_begin_ = now_s;
      if (options_.run_steps > 0) {
        std::string err;
        std::string problem = scripted_run_problem(options_, state);
        if (problem.empty() && !state.edit.issues.empty())  // shown at its field, as Start is off for a user
          problem = "the config breaks a rule: " + state.edit.issues.front().format();
        if (!problem.empty()) {
          error_ = "the run did not start: " + problem;
          stage_ = Stage::Settling;
          frames_left_ = options_.frames;
          return false;
        }
        if (!state.run.start(engine, state.config, state.history, &err)) {
          error_ = "the run did not start: " + err;
          stage_ = Stage::Settling;
          frames_left_ = options_.frames;
          return false;
        }
        stage_ = Stage::Training;
        // an edit at step 1: the pause holds the boundary after the first step (see Training)
        if (!options_.changes.empty() && options_.changes.front().step <= 1) {
          state.run.pause(engine);
          paused_for_change_ = true;
        }
      } else {
        stage_ = Stage::Settling;
        frames_left_ = options_.frames;
      }
      return false;
    case Stage::Training: {
      const SessionStatus st = engine.status();
      // Each edit is made at a step boundary with the run paused there, and sent before it resumes:
      // the engine starts step S + 1 as step S ends, so an edit made once step S was seen reached
      // an engine already in S + 1 and applied from S + 2. One edit at a time: the next waits until
      // the one before is marked (took effect), so each lands on its own step.
      const bool previous_landed = state.history.markers().size() >= markers_wanted_;
      const ScriptedChange* change = next_change_ < options_.changes.size() ? &options_.changes[next_change_] : nullptr;
      const bool paused = st.state == SessionState::Paused;
      if (resume_next_frame_) {  // this frame's frame_update sent the edit (RunDriver::sync): run on
        resume_next_frame_ = paused_for_change_ = false;
        if (paused) state.run.resume(engine);
        // a next edit due already (given for the same step): hold the boundary after the step the
        // run starts now, so the two land on successive steps
        if (paused && change && change->step <= st.step + 1) {
          state.run.pause(engine);
          paused_for_change_ = true;
        }
      } else if (paused_for_change_ && paused) {
        // a boundary early: before step S, or before a step ran with the last edit: run on
        const bool early = !change || change->step > st.step || (!previous_landed && st.step <= edited_at_step_);
        if (early) {
          state.run.resume(engine);
          paused_for_change_ = false;
        } else if (previous_landed) {
          make_change(state, *change);
          edited_at_step_ = st.step;
          resume_next_frame_ = true;
        }  // else a step ran with the last edit: its marker comes with the next frame's metrics
      } else if (change && !paused_for_change_ && change->step <= st.step + 1 &&
                 (st.state == SessionState::Running || st.state == SessionState::Starting)) {
        // the engine runs step S (or a later one) now: the pause holds the boundary after it
        state.run.pause(engine);
        paused_for_change_ = true;
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
        if (error_.empty() && next_change_ < options_.changes.size())  // the run ended before its step
          error_ = change_label(options_.changes[next_change_]) + ": not made: the run ended at step " +
                   std::to_string(st.step);
        else if (error_.empty() && state.history.markers().size() < markers_wanted_)
          error_ = "a --change-at edit was made but never took effect before the run ended at step " +
                   std::to_string(st.step);
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
