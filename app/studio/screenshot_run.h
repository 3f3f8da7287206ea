// odyssey-studio's screenshot mode as the frame loop sees it (--screenshot FILE): the script that
// trains and edits before the picture, the UI time measured per frame, and the end - the back
// buffer read into a PNG, then the report. Part of the executable (it reads OpenGL's back buffer);
// the GL-free schedule and report are script_runner.h and screenshot_report.h.
// defines: ScreenshotRun
#pragma once

#include <string>

#include "app/studio/app_state.h"
#include "app/studio/cli_options.h"
#include "app/studio/engine_control.h"
#include "app/studio/screenshot_report.h"
#include "app/studio/script_runner.h"

namespace odyssey::studio {

class ScreenshotRun {
 public:
  explicit ScreenshotRun(const StudioOptions& opts) : opts_(opts), script_(opts) {}

  /// True when --screenshot was given; every other call is then meaningful.
  bool active() const { return !opts_.screenshot.empty(); }
  /// True while the scripted run trains toward --run-steps (the frame loop draws fewer frames).
  bool waiting_for_run() const { return active() && script_.waiting_for_run(); }

  /// Call first in each frame, where its UI time starts (reads the UI thread's CPU clock).
  void start_frame();
  /// Call once per frame after frame_update, before drawing: advances the script. True on the
  /// frame whose pixels are the screenshot.
  bool step(AppState& state, EngineControl& engine, double now_s);
  /// Call after the frame's draw data is rendered, with the frame's UI wall time.
  void end_frame(const AppState& state, double ui_ms);
  /// Writes the back buffer (`width` x `height`) as the PNG, prints the report and returns the exit
  /// code: 1 when the picture or the script failed.
  int finish(const AppState& state, int width, int height, const std::string& font) const;

 private:
  const StudioOptions opts_;
  ScriptRunner script_;
  TrainingFrameTimes times_;
  long frames_ = 0;
  double cpu_at_start_s_ = 0;
};

}  // namespace odyssey::studio
