// The screenshot run's report (see screenshot_report.h).
// defines: TrainingFrameTimes::add, summarize_frame_times, screenshot_report
#include "app/studio/screenshot_report.h"

#include <algorithm>
#include <cstdio>

namespace odyssey::studio {

void TrainingFrameTimes::add(long frame, bool measured, double wall, double cpu) {
  if (frame <= kStartupFrames || !measured) return;
  wall_ms.push_back(wall);
  cpu_ms.push_back(cpu);
}

std::optional<FrameTimeSummary> summarize_frame_times(std::vector<double> ms) {
  if (ms.empty()) return std::nullopt;
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double x : ms) sum += x;
  FrameTimeSummary s;
  s.frames = ms.size();
  s.mean_ms = sum / static_cast<double>(ms.size());
  s.p95_ms = ms[ms.size() * 95 / 100];
  s.max_ms = ms.back();
  return s;
}

std::string screenshot_report(const StudioOptions& opts, const AppState& state, const TrainingFrameTimes& times,
                              bool written, int width, int height, const std::string& font, long frames,
                              double run_seconds) {
  std::string out;
  char line[256];
  if (written) {
    // The path and the font go in whole (any length); the figures around them are short.
    std::snprintf(line, sizeof line,
                  ", %ld frames; UI %.2f ms/frame mean, %.2f ms max over the last %ld; run %.1f s)\n", frames,
                  state.frame.mean(), state.frame.max(), std::min<long>(frames, FrameStats::kWindow), run_seconds);
    out += "odyssey-studio: wrote " + opts.screenshot + " (" + std::to_string(width) + "x" + std::to_string(height) +
           ", " + font + line;
  }
  const char* when = opts.bench_samples > 0 ? "with the synthetic samples" : "while training";
  auto summary = [&](const std::vector<double>& ms, const char* what) {
    const auto s = summarize_frame_times(ms);
    if (!s) return;
    std::snprintf(line, sizeof line,
                  "odyssey-studio: UI %s per frame %s: mean %.2f ms, p95 %.2f ms, max %.2f ms over %zu frames\n", what,
                  when, s->mean_ms, s->p95_ms, s->max_ms, s->frames);
    out += line;
  };
  summary(times.wall_ms, "wall time");
  summary(times.cpu_ms, "thread CPU time");
  if (state.shown(PanelId::Eval)) {
    // What the Eval panel read, so a screenshot run shows it found (and could parse) the evals.
    const EvalLibrary& lib = state.eval.library;
    size_t unreadable = 0;
    for (const EvalFile& f : lib.files()) unreadable += f.result ? 0 : 1;
    out += "odyssey-studio: Eval panel: " + std::to_string(lib.files().size()) + " evaluation(s) in " + lib.run_dir() +
           ", " + std::to_string(unreadable) + " unreadable" +
           (lib.selected_file() ? ", showing " + lib.selected_file()->name : std::string()) + "\n";
  }
  if (!state.history.markers().empty()) {
    out += "odyssey-studio: changes marked:";
    for (const auto& m : state.history.markers())
      out += " [step " + std::to_string(m.step) + (m.restart ? " restart: " : ": ") + m.what + "]";
    out += "\n";
  }
  return out;
}

}  // namespace odyssey::studio
