// Screenshot mode's schedule, without rendering: start the run, make the scripted edits
// (--change-at) at their step's boundary (the run paused there), wait for --run-steps steps, pause
// the run, let the UI settle for --frames frames, then say "capture now". Testable against a fake
// engine.
// defines: ScriptRunner, apply_assignment, scripted_run_problem
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "app/studio/app_state.h"
#include "app/studio/cli_options.h"
#include "app/studio/engine_control.h"

namespace odyssey::studio {

/// Edits the studio's config with one `section.key=value` as `--set` would (validation issues
/// then show at their fields). False with *error when the text, the key or its value is wrong, or
/// the edit has a problem no field shows (problems_beyond_rules: a model.hf_path that is no model
/// directory), as `odyssey train --set` refuses it.
bool apply_assignment(AppState& state, const std::string& assignment, std::string* error);

/// Why screenshot mode must not start --run-steps' run on `state` ("" when it may): the preset's
/// file problems (the config holds defaults where they are), or more steps than training.steps.
std::string scripted_run_problem(const StudioOptions& options, const AppState& state);

class ScriptRunner {
 public:
  explicit ScriptRunner(const StudioOptions& options) : options_(options) {}

  /// Call once per frame after frame_update(). True on the frame whose pixels are the screenshot.
  bool step(AppState& state, EngineControl& engine, double now_s);
  /// Something went wrong (start refused, run failed, timeout); the screenshot is still taken.
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  /// True while the run trains toward --run-steps (the frame loop slows down to leave the CPU to it).
  bool waiting_for_run() const { return stage_ == Stage::Training; }
  /// Seconds from the first frame to the moment the run steps were done (0 without a run).
  double run_seconds() const { return run_seconds_; }

 private:
  enum class Stage { Begin, Training, Settling, Done };
  /// Makes the scripted edit through the UI's path; its error, or the marker it should produce.
  void make_change(AppState& state, const ScriptedChange& change);
  const StudioOptions options_;
  Stage stage_ = Stage::Begin;
  double t_begin_ = 0;
  double run_seconds_ = 0;
  size_t next_change_ = 0;
  size_t markers_wanted_ = 0;       // markers the applied scripted edits should have produced
  bool paused_for_change_ = false;  // paused so that the next edit is made at its step's boundary
  bool resume_next_frame_ = false;  // the edit is made: resume once frame_update has sent it
  int64_t edited_at_step_ = -1;     // the boundary (steps done) the last edit was made at
  int frames_left_ = 0;
  std::string error_;
};

}  // namespace odyssey::studio
