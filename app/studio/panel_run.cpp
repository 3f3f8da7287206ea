// Run panel: start, pause and stop the embedded engine on the edited config (CPU ranks here, GPUs
// where present, or rank emulation), the studio's last notice (live change / restart), and the
// live step, loss, tokens/s and per-rank peaks. Also the log panel. defines: draw_run_panel,
// draw_log_panel
#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "app/studio/panels.h"
#include "engine/config/sizes.h"

namespace odyssey::studio {

namespace {

std::string describe_target(const RunConfig& c) {
  std::string where = c.training.device == DeviceKind::Cuda  ? "GPU"
                      : c.training.device == DeviceKind::Cpu ? "CPU"
                                                             : "auto-device";
  std::string out =
      std::to_string(c.parallel.world_size) + " " + where + " rank" + (c.parallel.world_size == 1 ? "" : "s");
  if (c.parallel.emulate) out = "rank 0 of " + std::to_string(c.parallel.world_size) + " emulated on one " + where;
  return out + ", " + c.model.flavor + ", " + format_size(c.training.seq_len) + " tokens, " +
         std::to_string(c.training.steps) + " steps";
}

void draw_controls(AppState& state, EngineControl& engine, const SessionStatus& st) {
  const bool live = state.run.has_run() && is_live_state(st.state);
  const std::string blocker = start_blocker(state);
  ImGui::BeginDisabled(live || !blocker.empty());
  if (ImGui::Button("Start")) {
    std::string err;
    state.run.start(engine, state.config, state.history, &err);
  }
  ImGui::EndDisabled();
  if (!blocker.empty() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("%s", blocker.c_str());
  ImGui::SameLine();
  ImGui::BeginDisabled(!live);
  if (st.state == SessionState::Paused) {
    if (ImGui::Button("Resume")) state.run.resume(engine);
  } else if (ImGui::Button("Pause")) {
    state.run.pause(engine);
  }
  ImGui::SameLine();
  if (ImGui::Button("Stop")) state.run.stop(engine);
  ImGui::EndDisabled();
  if (state.run.unfit()) {
    // The planner's verdict, and the way past it: the run may still fit where the plan is cautious
    // (a CPU machine with swap, a device with less overhead than its profile).
    ImGui::TextColored(to_vec4(kColorBad), "%s", "Does not fit:");
    ImGui::SameLine();
    ImGui::TextWrapped("%s", state.run.unfit_reason().c_str());
    if (ImGui::Button(live ? "Apply anyway" : "Start anyway")) {
      std::string err;
      state.run.force_unfit(engine, state.history, &err);
    }
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("Run it although the planner predicts it does not fit (odyssey train --force)");
  }
  ImGui::SameLine();
  help_marker(
      "Start trains the edited configuration on the embedded engine. While it runs, memory "
      "toggles and heads per stage apply at the next step (no restart); model, sequence, "
      "world-size or Ulysses edits restart the run once the edits settle. Hardware edits "
      "change only the plan.");
}

void draw_live_numbers(AppState& state, const SessionStatus& st) {
  const auto& metrics = state.history.metrics();
  const float frac = st.steps > 0 ? static_cast<float>(st.step) / static_cast<float>(st.steps) : 0.f;
  char progress[64];
  std::snprintf(progress, sizeof progress, "step %lld / %lld", (long long)st.step, (long long)st.steps);
  ImGui::ProgressBar(frac, {-FLT_MIN, 0}, progress);
  if (metrics.empty()) {
    ImGui::TextColored(to_vec4(kColorDim), "waiting for the first step...");
    return;
  }
  const StepMetrics& m = metrics.back();
  if (ImGui::BeginTable("live", 4, ImGuiTableFlags_SizingStretchSame)) {
    auto cell = [](const char* name, const std::string& value, const char* tip) {
      ImGui::TableNextColumn();
      ImGui::TextColored(to_vec4(kColorDim), "%s", name);
      ImGui::TextUnformatted(value.c_str());
      if (tip && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tip);
    };
    char loss[32];
    std::snprintf(loss, sizeof loss, "%.4f", m.loss);
    cell("loss", m.loss_meaningful ? loss : "n/a (emulated)",
         m.loss_meaningful ? "global mean loss of the last step" : "rank emulation: the loss is meaningless");
    cell("tokens/s", plot::format_value(m.tokens_per_s, plot::Format::Number), "global tokens per second, last step");
    cell("step time", plot::format_value(m.step_time_s, plot::Format::Seconds), nullptr);
    cell("peak", plot::format_value(double(m.peak_bytes), plot::Format::Bytes),
         "max over ranks of the device peak, last step");
    ImGui::EndTable();
  }
  // Per-rank peaks of the last step, device and host, against the planned peak of the running config.
  std::vector<std::vector<plot::Segment>> bars;
  std::vector<std::string> labels;
  for (size_t r = 0; r < m.rank_peak_bytes.size(); ++r) {
    const double host = r < m.rank_host_peak_bytes.size() ? double(m.rank_host_peak_bytes[r]) : 0.0;
    bars.push_back({{double(m.rank_peak_bytes[r]), rank_color(int(r), 230)}});
    labels.push_back("rank " + std::to_string(r));
    if (host > 0) {
      bars.push_back({{host, category_color(static_cast<int>(PlanCategory::Offloaded))}});
      labels.push_back("  host");
    }
  }
  const PlanResult& plan = state.run_plan.get(state.run.engine_config());
  const double planned = plan.ok ? double(plan.plan.peak_bytes) : 0.0;
  const std::string label = planned > 0 ? "planned " + plot::format_value(planned, plot::Format::Bytes) : "";
  const float h = ImGui::GetFontSize() * (1.6f * static_cast<float>(bars.size()) + 2.0f);
  const plot::BarHit hit =
      plot::stacked_bars("##rank_peaks", {0, h}, bars, labels, planned, label.c_str(), plot::Format::Bytes, true);
  if (hit.bar >= 0 && hit.segment >= 0)
    ImGui::SetTooltip("%s peak in the last step: %s", labels[hit.bar].c_str(),
                      plot::format_value(bars[hit.bar][0].value, plot::Format::Bytes).c_str());
}

}  // namespace

void draw_run_panel(AppState& state, EngineControl& engine) {
  const SessionStatus& st = state.status;
  draw_controls(state, engine, st);
  if (!state.run.has_run()) {
    const std::string detail = "Start trains: " + describe_target(state.config) +
                               ". Memory, loss and throughput appear here and in the timeline live.";
    empty_state("No run yet: press Start", detail.c_str());
    return;
  }
  const ImVec4 state_color = to_vec4(st.state == SessionState::Failed    ? kColorBad
                                     : st.state == SessionState::Running ? kColorGood
                                                                         : kColorWarn);
  ImGui::TextColored(state_color, "%s", state_label(st.state));
  ImGui::SameLine();
  ImGui::Text("on %s%s, %d rank%s", st.device.empty() ? "?" : st.device.c_str(), st.emulated ? " (emulated)" : "",
              st.world_size, st.world_size == 1 ? "" : "s");
  if (!st.message.empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(to_vec4(st.state == SessionState::Failed ? kColorBad : kColorDim), "%s", st.message.c_str());
    ImGui::PopTextWrapPos();
  }
  if (!state.run.notice().empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(to_vec4(kColorWarn), "%s", state.run.notice().c_str());
    ImGui::PopTextWrapPos();
  }
  draw_live_numbers(state, st);
  if (ImGui::SmallButton("Export trace...")) state.dialog = FileDialog::ExportTrace;
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("The run's phases as a Perfetto trace (open at ui.perfetto.dev)");
  ImGui::SameLine();
  if (ImGui::SmallButton("Export metrics...")) state.dialog = FileDialog::ExportMetrics;
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("One JSON object per step, as `odyssey train --out` writes");
  ImGui::SameLine();
  if (ImGui::SmallButton("Save preset...")) state.dialog = FileDialog::SavePreset;
}

void draw_log_panel(AppState& state, EngineControl& engine) {
  const auto& log = state.history.log();
  if (log.empty()) {
    empty_state("No log lines yet", "The engine's messages and the studio's notices appear here.");
    return;
  }
  // Wrapped lines (at most RunHistory::kMaxLogLines of them, so no clipper is needed).
  ImGui::BeginChild("log_lines", {0, 0}, false);
  const bool at_bottom = ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 1;
  ImGui::PushTextWrapPos(0);
  for (const std::string& line : log) {
    const bool studio = line.rfind("[studio]", 0) == 0;
    const bool error = line.rfind("error", 0) == 0;
    if (studio || error) ImGui::PushStyleColor(ImGuiCol_Text, to_vec4(error ? kColorBad : kColorWarn));
    ImGui::TextUnformatted(line.c_str());
    if (studio || error) ImGui::PopStyleColor();
  }
  ImGui::PopTextWrapPos();
  if (at_bottom) ImGui::SetScrollHereY(1.0f);
  ImGui::EndChild();
}

}  // namespace odyssey::studio
