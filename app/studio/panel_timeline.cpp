// Timeline panel: measured memory per rank over time with the phases as coloured bands, the
// planned per-phase bytes overlaid (where the profile describes the run's kind of device), the step's peak marked with its phase, a step selector, zoom
// and pan, the device pool above and the host (offload) pool below. Lines are min/max-downsampled
// per pixel column, so a million samples cost one pass over what is in view.
// defines: draw_timeline_panel
#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "app/studio/panels.h"
#include "app/studio/planned_throughput.h"

namespace odyssey::studio {

namespace {

struct Selection {
  int64_t step = -1;  // -1: all steps
  int rank = -1;      // -1: all ranks
  int band_rank = 0;  // rank whose phases are drawn as bands
};

/// [lo, hi) samples of a rank for the selection.
std::pair<size_t, size_t> sample_range(const RankSeries& r, int64_t step) {
  return step < 0 ? std::pair<size_t, size_t>{0, r.size()} : r.step_range(step);
}

void draw_controls(AppState& state, int64_t first, int64_t latest, int ranks) {
  TimelineState& t = state.timeline;
  ImGui::Checkbox("all steps", &t.all_steps);
  ImGui::SameLine();
  ImGui::BeginDisabled(t.all_steps);
  bool latest_on = t.step < 0;
  if (ImGui::Checkbox("latest", &latest_on)) t.step = latest_on ? -1 : latest;
  ImGui::SameLine();
  int step = static_cast<int>(t.step < 0 ? latest : t.step);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 9);
  if (ImGui::SliderInt("step", &step, static_cast<int>(first), static_cast<int>(std::max(first, latest))))
    t.step = step;
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
  const std::string preview = t.rank < 0 ? "all ranks" : "rank " + std::to_string(t.rank);
  if (ImGui::BeginCombo("##rank", preview.c_str())) {
    if (ImGui::Selectable("all ranks", t.rank < 0)) t.rank = -1;
    for (int r = 0; r < ranks; ++r)
      if (ImGui::Selectable(("rank " + std::to_string(r)).c_str(), t.rank == r)) t.rank = r;
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  ImGui::Checkbox("planned", &t.show_planned);
  ImGui::SameLine();
  ImGui::Checkbox("phase peaks", &t.show_phase_peaks);
  help_marker(
      "Bytes held by each rank at every phase edge (lines), the phases as bands, the planner's "
      "bytes for each phase of the running config (dashed white) and the step's peak. Wheel: "
      "zoom; drag: pan; double-click: fit. 'phase peaks' draws the peak inside each phase, "
      "which edge samples can miss.");
}

void draw_group_bands(plot::Plot& plt, const RunHistory& h, const StepSpans& g, int rank) {
  for (int depth = 0; depth <= g.max_depth; ++depth) {  // deeper phases paint over their parents
    float last_px = -1e9f;
    for (const auto& s : g.spans) {
      if (s.depth != depth || s.rank != rank) continue;
      if (s.t_end_s < plt.x().min || s.t_begin_s > plt.x().max) continue;
      const float px = plt.to_screen(s.t_begin_s, 0).x;
      if (plt.to_screen(s.t_end_s, 0).x - px < 1.f && px - last_px < 1.f) continue;  // sub-pixel: merged
      last_px = px;
      plt.band(s.t_begin_s, s.t_end_s, phase_color(classify_phase(h.phase_name(s.phase_id)), depth == 0 ? 20 : 42));
    }
  }
}

/// Phase bands of the selected step; over the whole run, per-phase bands only once zoomed in far
/// enough that steps are wider than a few pixels (otherwise alternate shading marks the steps).
void draw_bands(plot::Plot& plt, const RunHistory& h, const Selection& sel) {
  if (sel.step >= 0) {
    if (const StepSpans* g = h.spans_of(sel.step)) draw_group_bands(plt, h, *g, sel.band_rank);
    return;
  }
  const auto& groups = h.span_steps();
  auto first = std::lower_bound(groups.begin(), groups.end(), plt.x().min,
                                [](const StepSpans& g, double t) { return g.t_max < t; });
  size_t visible = 0;
  for (auto it = first; it != groups.end() && it->t_min <= plt.x().max; ++it) ++visible;
  const bool detailed = visible * 6 <= static_cast<size_t>(plt.columns());
  float last_px = -1e9f;
  for (auto it = first; it != groups.end() && it->t_min <= plt.x().max; ++it) {
    if (detailed) {
      draw_group_bands(plt, h, *it, sel.band_rank);
    } else if (it->step % 2 == 0) {
      const float px = plt.to_screen(it->t_min, 0).x;
      if (px - last_px < 2.f) continue;
      last_px = px;
      plt.band(it->t_min, it->t_max, IM_COL32(255, 255, 255, 14));
    }
  }
}

/// Tooltip: the phase under the mouse and each rank's bytes at the nearest earlier sample.
void hover_readout(const plot::Plot& plt, const RunHistory& h, const Selection& sel, bool host, double x_origin) {
  if (!plt.hovered()) return;
  const double t = plt.mouse_x();
  ImGui::BeginTooltip();
  const PhaseSpan* under = nullptr;
  const auto& groups = h.span_steps();
  const auto g =
      std::lower_bound(groups.begin(), groups.end(), t, [](const StepSpans& s, double x) { return s.t_max < x; });
  if (g != groups.end())
    for (const auto& s : g->spans)
      if (s.rank == sel.band_rank && s.t_begin_s <= t && t <= s.t_end_s && (!under || s.depth > under->depth))
        under = &s;
  ImGui::Text("t = %s%s", plot::format_value(t - x_origin, plot::Format::Seconds).c_str(),
              sel.step >= 0 ? " into the step" : " since the run started");
  if (under)
    ImGui::Text("%s (step %lld): peak %s inside", h.phase_name(under->phase_id).c_str(), (long long)under->step,
                plot::format_value(double(under->device_peak), plot::Format::Bytes).c_str());
  for (size_t r = 0; r < h.ranks().size(); ++r) {
    if (sel.rank >= 0 && static_cast<int>(r) != sel.rank) continue;
    const RankSeries& s = h.ranks()[r];
    const auto it = std::upper_bound(s.t_s.begin(), s.t_s.end(), t);
    if (it == s.t_s.begin()) continue;
    const size_t i = static_cast<size_t>(it - s.t_s.begin()) - 1;
    ImGui::TextColored(to_vec4(rank_color(int(r))), "rank %zu: %s %s", r,
                       plot::format_value(host ? s.host_bytes[i] : s.device_bytes[i], plot::Format::Bytes).c_str(),
                       host ? "host" : "device");
  }
  ImGui::EndTooltip();
}

size_t draw_pool(AppState& state, const Selection& sel, bool host, float height, plot::Range data_x,
                 const std::vector<PlannedSegment>& planned, const PeakMark& peak) {
  const RunHistory& h = state.history;
  plot::Plot plt(host ? "##host" : "##device", {0, height}, &state.timeline.view, data_x, plot::Format::Seconds,
                 plot::Format::Bytes);
  const double x_origin = sel.step >= 0 ? data_x.min : 0.0;
  plt.set_x_origin(x_origin);
  // Downsample first (cached per rank): the y range comes from what is in view.
  auto& caches = host ? state.timeline.host_lines : state.timeline.device_lines;
  caches.resize(h.ranks().size());
  std::vector<const std::vector<plot::Point>*> lines(h.ranks().size(), nullptr);
  plot::Range y{0, 1};
  size_t drawn = 0;
  for (size_t r = 0; r < h.ranks().size(); ++r) {
    if (sel.rank >= 0 && static_cast<int>(r) != sel.rank) continue;
    const RankSeries& s = h.ranks()[r];
    const auto [lo, hi] = sample_range(s, sel.step);
    const auto& ys = host ? s.host_bytes : s.device_bytes;
    lines[r] = &caches[r].get(s.t_s.data() + lo, ys.data() + lo, hi - lo, plt.x(), plt.columns(), h.generation());
    for (const auto& p : *lines[r]) y.include(p.y);
    drawn += lines[r]->size();
  }
  if (state.timeline.show_planned)
    for (const auto& seg : planned) y.include(double(host ? seg.host_bytes : seg.device_bytes));
  if (!host && peak.found) y.include(double(peak.bytes));
  plt.set_y(y);
  if (!host) draw_bands(plt, h, sel);
  const StepSpans* group = sel.step >= 0 ? h.spans_of(sel.step) : nullptr;
  if (!host && state.timeline.show_phase_peaks && group)
    for (const auto& s : group->spans)
      if ((sel.rank < 0 || s.rank == sel.rank) && s.depth >= 1)
        plt.hsegment(s.t_begin_s, s.t_end_s, double(s.device_peak), rank_color(s.rank, 110), 1.f);
  for (size_t r = 0; r < lines.size(); ++r)
    if (lines[r]) plt.polyline(*lines[r], rank_color(int(r)), 2.f);
  if (state.timeline.show_planned)
    for (const auto& seg : planned)
      plt.hsegment(seg.t0, seg.t1, double(host ? seg.host_bytes : seg.device_bytes), IM_COL32(255, 255, 255, 200), 1.5f,
                   true);
  if (!host && peak.found) {
    const std::string label = "peak " + plot::format_value(double(peak.bytes), plot::Format::Bytes) + " in " +
                              peak.phase + " (rank " + std::to_string(peak.rank) + ")";
    plt.marker(peak.t_s, double(peak.bytes), kColorWarn, label.c_str());
  }
  const char* title = host ? "host pool (offloaded)" : "device pool";
  const ImVec2 ts = ImGui::CalcTextSize(title);
  plt.draw_list()->AddRectFilled({plt.min().x + 3, plt.min().y + 3}, {plt.min().x + ts.x + 9, plt.min().y + ts.y + 5},
                                 IM_COL32(0, 0, 0, 160), 2.f);
  plt.draw_list()->AddText({plt.min().x + 6, plt.min().y + 4}, IM_COL32(220, 220, 230, 230), title);
  plt.end();
  hover_readout(plt, h, sel, host, x_origin);
  return drawn;
}

}  // namespace

void draw_timeline_panel(AppState& state, EngineControl& engine) {
  const RunHistory& h = state.history;
  if (h.sample_count() == 0) {
    empty_state(no_data_title(state, "Waiting for the first samples..."),
                "Each rank's device and host bytes at every phase edge appear here, with the phases as "
                "coloured bands and the planner's prediction overlaid.");
    return;
  }
  TimelineState& t = state.timeline;
  int64_t first = INT64_MAX;
  for (const auto& r : h.ranks())
    if (r.size()) first = std::min(first, r.step.front());
  const int64_t latest = h.metrics().empty() ? h.last_step() : h.metrics().back().step;
  draw_controls(state, first, latest, static_cast<int>(h.ranks().size()));

  Selection sel;
  sel.step = t.all_steps ? -1 : std::clamp(t.step < 0 ? latest : t.step, first, std::max(first, h.last_step()));
  sel.rank = t.rank < static_cast<int>(h.ranks().size()) ? t.rank : -1;
  sel.band_rank = std::max(0, sel.rank);
  if (sel.step != t.shown_step) {  // a new selection: fit it
    t.view.follow = true;
    t.shown_step = sel.step;
  }
  plot::Range data_x = plot::Range::empty();
  for (const auto& r : h.ranks()) {
    const auto [lo, hi] = sample_range(r, sel.step);
    if (hi > lo) {
      data_x.include(r.t_s[lo]);
      data_x.include(r.t_s[hi - 1]);
    }
  }
  const StepSpans* group = sel.step >= 0 ? h.spans_of(sel.step) : nullptr;
  if (group) {
    const plot::Range spans_x = step_extent(group->spans, sel.step, sel.rank);
    if (spans_x.valid()) {
      data_x.include(spans_x.min);
      data_x.include(spans_x.max);
    }
  }
  if (!(data_x.min <= data_x.max)) data_x = {0, 1};

  std::vector<PlannedSegment> planned;
  // The plan of the config the selected step ran with (a live toggle since changes it; none
  // without a run, e.g. the --bench-samples benchmark). A profile of another kind of device than
  // the run's is said, not drawn: an H100 plan's 2 GiB flattened a CPU run's 9 MiB to a line at 0.
  std::string planned_elsewhere;
  if (t.show_planned && state.run.has_run() && group) {
    const RunConfig& ran = h.config_at(sel.step);
    if (!profile_describes_device(ran.hardware.profile, state.status.device)) {
      planned_elsewhere = ran.hardware.profile;
    } else {
      const PlanResult& step_plan = state.run_plan.get(ran);
      if (step_plan.ok)
        planned = planned_overlay(step_plan.plan, group->spans, h.phase_names(), sel.step, sel.band_rank);
    }
  }
  const PeakMark peak = group          ? find_peak(group->spans, h.phase_names(), sel.step, sel.rank)
                        : sel.step < 0 ? find_run_peak(h, sel.rank)
                                       : PeakMark{};

  std::vector<std::pair<ImU32, std::string>> items;
  for (int c = 0; c < kPhaseClassCount - 1; ++c)
    items.emplace_back(phase_color(static_cast<PhaseClass>(c)), to_string(static_cast<PhaseClass>(c)));
  items.emplace_back(IM_COL32(255, 255, 255, 200), "planned (dashed)");
  for (size_t r = 0; r < h.ranks().size() && r < 8; ++r)
    items.emplace_back(rank_color(int(r)), "rank " + std::to_string(r));
  plot::legend(items);
  if (!planned_elsewhere.empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(to_vec4(kColorDim), "planned on the %s profile (the run is on %s): not drawn",
                       planned_elsewhere.c_str(), state.status.device.empty() ? "?" : state.status.device.c_str());
    ImGui::PopTextWrapPos();
  }
  const float avail = ImGui::GetContentRegionAvail().y - ImGui::GetTextLineHeightWithSpacing();
  const size_t drawn =
      draw_pool(state, sel, false, std::max(avail * 0.64f, ImGui::GetFontSize() * 8), data_x, planned, peak);
  draw_pool(state, sel, true, std::max(avail * 0.36f - ImGui::GetStyle().ItemSpacing.y, ImGui::GetFontSize() * 5),
            data_x, planned, peak);
  ImGui::TextColored(to_vec4(kColorDim), "%zu samples on %zu ranks; %zu points drawn for the device pool%s",
                     h.sample_count(), h.ranks().size(), drawn,
                     state.run.has_run() ? "" : "; no planned overlay (no run)");
}

}  // namespace odyssey::studio
