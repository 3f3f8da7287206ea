// The studio frame: the tiled layout, the menu bar, the flat panel dispatch and the status bar
// with the frame time.
// [SECTION] layout  [SECTION] drawing
// defines: see studio_app.h
#include "app/studio/studio_app.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app/studio/panels.h"
#include "engine/config/sizes.h"

namespace odyssey::studio {

// [SECTION] layout --------------------------------------------------------------------------------

std::array<PanelRect, kPanelCount> panel_rects(float x, float y, float w, float h, const AppState& state) {
  std::array<PanelRect, kPanelCount> r{};
  const float font = ImGui::GetFontSize();
  const float cw = std::clamp(w * 0.27f, std::min(font * 22, w * 0.5f), font * 32);
  r[static_cast<int>(PanelId::Config)] = {x, y, cw, h};
  const float rx = x + cw, rw = w - cw;
  if (state.focus && *state.focus != PanelId::Config) {
    r[static_cast<int>(*state.focus)] = {rx, y, rw, h};
    return r;
  }
  const float top = std::round(h * 0.52f), lw = std::round(rw * 0.58f);
  r[static_cast<int>(PanelId::Plan)] = {rx, y, lw, top};
  const bool log = state.shown(PanelId::Log);
  const float run_h = log ? std::round(top * 0.62f) : top;
  r[static_cast<int>(PanelId::Run)] = {rx + lw, y, rw - lw, run_h};
  r[static_cast<int>(PanelId::Log)] = {rx + lw, y + run_h, rw - lw, top - run_h};
  r[static_cast<int>(PanelId::Timeline)] = {rx, y + top, lw, h - top};
  // The Eval panel (hidden until View shows it) shares the throughput's corner, below it.
  const bool throughput = state.shown(PanelId::Throughput), eval = state.shown(PanelId::Eval);
  const float throughput_h = !eval ? h - top : !throughput ? 0.f : std::round((h - top) * 0.45f);
  r[static_cast<int>(PanelId::Throughput)] = {rx + lw, y + top, rw - lw, throughput_h};
  r[static_cast<int>(PanelId::Eval)] = {rx + lw, y + top + throughput_h, rw - lw, h - top - throughput_h};
  return r;
}

// [SECTION] drawing -------------------------------------------------------------------------------

namespace {

void draw_menu_bar(AppState& state, EngineControl& engine) {
  if (!ImGui::BeginMainMenuBar()) return;
  if (ImGui::BeginMenu("File")) {
    if (ImGui::MenuItem("Open preset...")) state.dialog = FileDialog::Open;
    if (ImGui::MenuItem("Save preset as...")) state.dialog = FileDialog::SavePreset;
    ImGui::Separator();
    if (ImGui::MenuItem("Export trace (Perfetto)...", nullptr, false, state.run.has_run()))
      state.dialog = FileDialog::ExportTrace;
    if (ImGui::MenuItem("Export metrics (JSONL)...", nullptr, false, state.run.has_run()))
      state.dialog = FileDialog::ExportMetrics;
    ImGui::Separator();
    if (ImGui::MenuItem("Quit")) state.quit_requested = true;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    for (int i = 0; i < kPanelCount; ++i)
      ImGui::MenuItem(panel_title(static_cast<PanelId>(i)), nullptr, &state.show[i]);
    ImGui::Separator();
    ImGui::MenuItem("Tiled layout", nullptr, &state.tiled);
    if (ImGui::BeginMenu("Focus")) {
      if (ImGui::MenuItem("All panels", nullptr, !state.focus)) state.focus.reset();
      for (PanelId id :
           {PanelId::Plan, PanelId::Run, PanelId::Timeline, PanelId::Throughput, PanelId::Log, PanelId::Eval})
        if (ImGui::MenuItem(panel_title(id), nullptr, state.focus == id)) {
          state.focus = id;
          state.show[static_cast<int>(id)] = true;
        }
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("Scale")) {
      for (float s : {1.0f, 1.25f, 1.5f, 2.0f}) {
        char label[16];
        std::snprintf(label, sizeof label, "%gx", s);
        if (ImGui::MenuItem(label, nullptr, state.scale == s)) state.requested_scale = s;
      }
      ImGui::EndMenu();
    }
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Run")) {
    const SessionState st = state.status.state;
    const bool live = state.run.has_run() && is_live_state(st);
    if (ImGui::MenuItem("Start", nullptr, false, !live && start_blocker(state).empty())) {
      std::string err;
      state.run.start(engine, state.config, state.history, &err);
    }
    if (ImGui::MenuItem(st == SessionState::Paused ? "Resume" : "Pause", nullptr, false, live)) {
      if (st == SessionState::Paused)
        state.run.resume(engine);
      else
        state.run.pause(engine);
    }
    if (ImGui::MenuItem("Stop", nullptr, false, live)) state.run.stop(engine);
    ImGui::EndMenu();
  }
  ImGui::EndMainMenuBar();
}

void draw_status_bar(AppState& state, EngineControl& engine, float x, float y, float w, float h) {
  ImGui::SetNextWindowPos({x, y});
  ImGui::SetNextWindowSize({w, h});
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                 ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus |
                                 ImGuiWindowFlags_NoFocusOnAppearing;
  ImGui::PushStyleVar(ImGuiStyleVar_WindowPadding, {ImGui::GetFontSize() * 0.5f, ImGui::GetFontSize() * 0.2f});
  if (ImGui::Begin("##status", nullptr, flags)) {
    const SessionStatus& st = state.status;
    if (state.run.has_run())
      ImGui::Text("Run: %s, step %lld/%lld", state_label(st.state), (long long)st.step, (long long)st.steps);
    else
      ImGui::TextColored(to_vec4(kColorDim), "Run: none");
    ImGui::SameLine(0, ImGui::GetFontSize() * 1.5f);
    const PlanResult& plan = state.plan.get(state.config);
    if (plan.ok)
      ImGui::TextColored(to_vec4(plan.plan.fits() ? kColorGood : kColorBad), "Plan: %s %s of %s",
                         plan.plan.fits() ? "fits," : "OOM,",
                         plot::format_value(double(plan.plan.peak_bytes), plot::Format::Bytes).c_str(),
                         plot::format_value(double(plan.plan.device_capacity), plot::Format::Bytes).c_str());
    else
      ImGui::TextColored(to_vec4(kColorBad), "Plan: -");
    // The frame timing sits at the right end; the notice gets the room left between (cut there, the
    // whole of it on hover and in the run panel): at larger UI scales the three ran over each other.
    const float font = ImGui::GetFontSize();
    float used = ImGui::GetItemRectMax().x - ImGui::GetWindowPos().x;  // window x where the plan ends
    char timing[96];
    std::snprintf(timing, sizeof timing, "UI %.1f ms/frame (max %.1f)  |  %.0f fps", state.frame.mean(),
                  state.frame.max(), state.frame.frame_interval_ms > 0 ? 1000.0 / state.frame.frame_interval_ms : 0.0);
    const float tw = ImGui::CalcTextSize(timing).x;
    const float timing_x = w - tw - font;
    if (!state.run.notice().empty() && timing_x - used > font * 6) {
      ImGui::SameLine(0, font * 1.5f);
      const ImVec2 at = ImGui::GetCursorScreenPos();
      const float room = ImGui::GetWindowPos().x + timing_x - font - at.x;
      ImGui::PushClipRect(at, {at.x + room, at.y + ImGui::GetTextLineHeight()}, true);
      ImGui::TextColored(to_vec4(kColorWarn), "%s", state.run.notice().c_str());
      ImGui::PopClipRect();
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", state.run.notice().c_str());
      used = std::min(ImGui::GetItemRectMax().x, at.x + room) - ImGui::GetWindowPos().x;
    }
    if (used + font <= timing_x) {  // else no room: the timing is the first thing to go
      ImGui::SameLine(timing_x);
      ImGui::TextColored(to_vec4(state.frame.max() < 16.0 ? kColorDim : kColorWarn), "%s", timing);
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            "CPU time the UI thread spends per frame (engine work runs on its own threads).\n"
            "The budget is 16 ms; the max covers the last %d frames.",
            FrameStats::kWindow);
    }
  }
  ImGui::End();
  ImGui::PopStyleVar();
}

using DrawPanel = void (*)(AppState&, EngineControl&);

void panel_window(AppState& state, EngineControl& engine, PanelId id, const PanelRect& rect, DrawPanel draw) {
  const int i = static_cast<int>(id);
  ImGuiWindowFlags flags = ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings;
  if (state.tiled) {
    ImGui::SetNextWindowPos({rect.x, rect.y});
    ImGui::SetNextWindowSize({rect.w, rect.h});
    flags |= ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize;
  } else {
    ImGui::SetNextWindowPos({rect.x, rect.y}, ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowSize({rect.w, rect.h}, ImGuiCond_FirstUseEver);
  }
  if (state.focus_request == id) {
    ImGui::SetNextWindowFocus();
    state.focus_request.reset();
  }
  if (ImGui::Begin(panel_title(id), &state.show[i], flags)) draw(state, engine);
  ImGui::End();
}

}  // namespace

void draw_studio(AppState& state, EngineControl& engine) {
  draw_menu_bar(state, engine);
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  const float status_h = ImGui::GetFrameHeight() + ImGui::GetFontSize() * 0.4f;
  const float x = vp->WorkPos.x, y = vp->WorkPos.y, w = vp->WorkSize.x, h = vp->WorkSize.y - status_h;
  const auto rects = panel_rects(x, y, w, h, state);
  auto visible = [&](PanelId id) {
    return state.shown(id) && (!state.focus || *state.focus == id || id == PanelId::Config);
  };

  // The flat dispatch: one line per panel.
  if (visible(PanelId::Config)) panel_window(state, engine, PanelId::Config, rects[0], draw_config_panel);
  if (visible(PanelId::Plan)) panel_window(state, engine, PanelId::Plan, rects[1], draw_plan_panel);
  if (visible(PanelId::Run)) panel_window(state, engine, PanelId::Run, rects[2], draw_run_panel);
  if (visible(PanelId::Timeline)) panel_window(state, engine, PanelId::Timeline, rects[3], draw_timeline_panel);
  if (visible(PanelId::Throughput)) panel_window(state, engine, PanelId::Throughput, rects[4], draw_throughput_panel);
  if (visible(PanelId::Log)) panel_window(state, engine, PanelId::Log, rects[5], draw_log_panel);
  if (visible(PanelId::Eval)) panel_window(state, engine, PanelId::Eval, rects[6], draw_eval_panel);

  draw_file_dialogs(state, engine);
  draw_status_bar(state, engine, x, y + h, w, status_h);
}

}  // namespace odyssey::studio
