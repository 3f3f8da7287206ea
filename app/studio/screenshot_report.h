// What a screenshot run reports after its picture, without rendering or OpenGL: the UI time per
// frame while the engine trains (or over the synthetic samples) and the lines printed on stdout.
// defines: TrainingFrameTimes, FrameTimeSummary, summarize_frame_times, screenshot_report
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "app/studio/app_state.h"
#include "app/studio/cli_options.h"

namespace odyssey::studio {

/// UI time per frame while the engine trains (or over the synthetic samples): wall time and the
/// UI thread's CPU time, in ms. The start-up frames, which build the font atlas and the first
/// plan, are left out: the budget that matters is the one while training.
struct TrainingFrameTimes {
  static constexpr long kStartupFrames = 10;
  std::vector<double> wall_ms, cpu_ms;
  /// Records frame number `frame` (1 for the first) when it is past the start-up frames and
  /// `measured` (the run trains, or the timeline holds synthetic samples).
  void add(long frame, bool measured, double wall, double cpu);
};

struct FrameTimeSummary {
  double mean_ms = 0, p95_ms = 0, max_ms = 0;
  size_t frames = 0;
};
/// Mean, 95th percentile (the sorted times' element at index frames x 95 / 100) and max; nullopt
/// for no frames.
std::optional<FrameTimeSummary> summarize_frame_times(std::vector<double> ms);

/// What a screenshot run prints on stdout at its end: when `written`, the PNG, its size, the font,
/// frames drawn and the status bar's UI time; then the wall and CPU time summaries while training
/// and the change markers; with the Eval panel shown, the evaluations it read. One line each,
/// '\n'-terminated.
std::string screenshot_report(const StudioOptions& opts, const AppState& state, const TrainingFrameTimes& times,
                              bool written, int width, int height, const std::string& font, long frames,
                              double run_seconds);

}  // namespace odyssey::studio
