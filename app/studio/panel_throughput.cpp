// Throughput panel: tokens/s, step time and MFU over steps, with a vertical mark at the step where
// each live change (or restart) took effect, so a technique's cost shows where it was switched, and
// the planner's figures for each config dashed beside them when the run is on the profile's device.
// defines: draw_throughput_panel
#include <imgui.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "app/studio/panels.h"

namespace odyssey::studio {

namespace {

/// "memory.tiled_mlp: true -> false; memory.x: 2 -> 4" -> "tiled_mlp off, x 2 -> 4" (labels on the plot).
std::string short_label(const std::string& what) {
  std::string out;
  size_t start = 0;
  while (start < what.size()) {
    size_t end = what.find("; ", start);
    if (end == std::string::npos) end = what.size();
    std::string part = what.substr(start, end - start);
    if (const size_t dot = part.find('.'); dot != std::string::npos && dot < part.find(':'))
      part = part.substr(dot + 1);
    for (const auto& [from, to] :
         {std::pair<std::string, std::string>{": true -> false", " off"}, {": false -> true", " on"}, {": ", " "}})
      if (const size_t at = part.find(from); at != std::string::npos) {
        part.replace(at, from.size(), to);
        break;
      }
    out += (out.empty() ? "" : ", ") + part;
    start = end + 2;
  }
  return out;
}

/// The planned value of one figure over a span (step time, tokens/s or MFU).
using PlannedFigure = double PlannedThroughputSpan::*;
/// Planned values above this multiple of the measured curve's top are named, not drawn.
constexpr double kPlannedOffScale = 3.0;

void draw_series(AppState& state, const char* id, const char* name, const std::vector<double>& steps,
                 const std::vector<double>& values, plot::Format format, float height, plot::Range data_x,
                 bool label_markers, const std::vector<PlannedThroughputSpan>& planned, PlannedFigure figure) {
  plot::Plot plt(id, {0, height}, &state.throughput.view, data_x, plot::Format::Step, format);
  std::vector<plot::Point> pts;
  plot::downsample_minmax(steps.data(), values.data(), steps.size(), plt.x(), plt.columns(), &pts);
  plot::Range y{0, 0};
  for (const auto& p : pts) y.include(p.y);
  // A planned value over 3x the measured curve's top would squash the curve: it is named in the
  // title instead of drawn (the plan panel's "off scale" capacity, likewise).
  const double measured_top = y.max;
  std::string off_scale;
  for (const auto& span : planned) {
    if (span.*figure <= kPlannedOffScale * measured_top)
      y.include(span.*figure);
    else
      off_scale = " (planned " + plot::format_value(span.*figure, format) + ": off scale)";
  }
  plt.set_y(y);
  for (const auto& span : planned)
    if (span.*figure <= kPlannedOffScale * measured_top)
      plt.hsegment(span.x0, span.x1, span.*figure, IM_COL32(255, 255, 255, 200), 1.5f, true);
  const std::string title = name + off_scale;
  for (const auto& m : state.history.markers())
    plt.vline(double(m.step), m.restart ? kColorBad : kColorWarn,
              label_markers ? ((m.restart ? "restart: " : "") + short_label(m.what)).c_str() : nullptr);
  plt.polyline(pts, IM_COL32(120, 200, 255, 255), 2.f);
  if (pts.size() < 60)
    for (const auto& p : pts)
      plt.draw_list()->AddCircleFilled(plt.to_screen(p.x, p.y), 2.5f, IM_COL32(120, 200, 255, 255));
  const ImVec2 ts = ImGui::CalcTextSize(title.c_str());
  plt.draw_list()->AddRectFilled({plt.min().x + 3, plt.min().y + 3}, {plt.min().x + ts.x + 9, plt.min().y + ts.y + 5},
                                 IM_COL32(0, 0, 0, 160), 2.f);
  plt.draw_list()->AddText({plt.min().x + 6, plt.min().y + 4}, IM_COL32(220, 220, 230, 230), title.c_str());
  plt.end();
  if (plt.hovered() && !steps.empty()) {
    const auto it = std::lower_bound(steps.begin(), steps.end(), plt.mouse_x() - 0.5);
    const size_t i = std::min(static_cast<size_t>(it - steps.begin()), steps.size() - 1);
    ImGui::BeginTooltip();
    ImGui::Text("step %.0f: %s %s", steps[i], plot::format_value(values[i], format).c_str(), name);
    for (const auto& span : planned)
      if (steps[i] > span.x0 && steps[i] < span.x1)
        ImGui::TextColored(to_vec4(kColorDim), "planned (%s profile): %s", span.profile.c_str(),
                           plot::format_value(span.*figure, format).c_str());
    for (const auto& m : state.history.markers())
      if (std::abs(double(m.step) - steps[i]) < 0.5)
        ImGui::TextColored(to_vec4(m.restart ? kColorBad : kColorWarn), "%s here: %s",
                           m.restart ? "restart" : "live change", m.what.c_str());
    ImGui::EndTooltip();
  }
}

}  // namespace

void draw_throughput_panel(AppState& state, EngineControl& engine) {
  const auto& metrics = state.history.metrics();
  if (metrics.empty()) {
    empty_state(no_data_title(state, "Waiting for the first step..."),
                "Tokens per second, step time, MFU and (for the long-range task) answer accuracy per step appear here; "
                "every toggle you flip "
                "during the run is marked at the step where it took effect.");
    return;
  }
  std::vector<double> steps, tps, step_s, mfu, accuracy;
  bool answers = false;  // the task marks answers: their accuracy shows that learning goes on
  for (const auto& m : metrics) {
    steps.push_back(double(m.step));
    tps.push_back(m.tokens_per_s);
    step_s.push_back(m.step_time_s);
    mfu.push_back(m.mfu);
    accuracy.push_back(m.answer_accuracy);
    answers = answers || m.has_answers;
  }
  ImGui::Text("last: %s tokens/s, %s/step, MFU %.2f%%", plot::format_value(tps.back(), plot::Format::Number).c_str(),
              plot::format_value(step_s.back(), plot::Format::Seconds).c_str(), mfu.back() * 100);
  help_marker(
      "One point per step. Orange lines: a live change (toggle, tile size, heads per stage) took "
      "effect at that step; red lines: the run restarted. Dashed white: the planner's figures for "
      "the config of those steps (its hardware profile, compute_efficiency and the attention efficiency of "
      "its path: attention_efficiency or untied_attention_efficiency, the backward at "
      "attention_backward_ratio times it), "
      "drawn when the run is on the kind of device the profile describes. Wheel zooms, drag pans, "
      "double-click fits. MFU is measured against the hardware profile the run was started with.");

  // The planner's step for each config of the run, planned once per config (not per frame).
  ThroughputState& ts = state.throughput;
  const RunHistory& h = state.history;
  if (ts.planned_run != h.run_id() || ts.planned_markers != h.markers().size()) {
    ts.planned = planned_stretches(h, [&state](const RunConfig& cfg) {
      const PlanResult& r = state.run_plan.get(cfg);
      if (!r.ok) throw std::runtime_error(r.error);
      return r.plan.time.step_s;
    });
    ts.planned_run = h.run_id();
    ts.planned_markers = h.markers().size();
  }
  std::vector<PlannedThroughputSpan> planned = planned_throughput_spans(metrics, ts.planned);
  const std::string device = state.status.device;
  if (!planned.empty() && !profile_describes_device(planned.back().profile, device)) {
    // the planner speaks of another machine: said, not drawn over this one's curve
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(to_vec4(kColorDim), "planned on the %s profile: %s/step (the run is on %s: not drawn)",
                       planned.back().profile.c_str(),
                       plot::format_value(planned.back().step_s, plot::Format::Seconds).c_str(),
                       device.empty() ? "?" : device.c_str());
    ImGui::PopTextWrapPos();
    planned.clear();
  }
  const plot::Range data_x{steps.front() - 0.5, steps.back() + 0.5};
  const float avail = ImGui::GetContentRegionAvail().y;
  const int plots = answers ? 4 : 3;
  const float each =
      std::max(ImGui::GetFontSize() * 6, (avail - (plots - 1) * ImGui::GetStyle().ItemSpacing.y) / plots);
  draw_series(state, "##tps", "tokens/s", steps, tps, plot::Format::Number, each, data_x, true, planned,
              &PlannedThroughputSpan::tokens_per_s);
  draw_series(state, "##step_s", "step time", steps, step_s, plot::Format::Seconds, each, data_x, false, planned,
              &PlannedThroughputSpan::step_s);
  draw_series(state, "##mfu", "MFU", steps, mfu, plot::Format::Percent, each, data_x, false, planned,
              &PlannedThroughputSpan::mfu);
  if (answers)
    draw_series(state, "##answer_accuracy", "answer accuracy", steps, accuracy, plot::Format::Percent, each, data_x,
                false, {}, &PlannedThroughputSpan::mfu);
}

}  // namespace odyssey::studio
