// Small widgets every panel uses: help markers, validator messages under a field, designed empty
// states, and the palette (categories, phases, ranks). defines: see panels.h [shared widgets]
#include <imgui.h>

#include <algorithm>

#include "app/studio/panels.h"

namespace odyssey::studio {

void help_marker(const char* text) {
  ImGui::SameLine();
  ImGui::TextDisabled("(?)");
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 32.0f);
    ImGui::TextUnformatted(text);
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
}

bool field_messages(const AppState& state, const char* key) {
  const auto* list = state.edit.messages.find(key);
  if (!list || list->empty()) return false;
  ImGui::PushStyleColor(ImGuiCol_Text, to_vec4(kColorBad));
  ImGui::PushTextWrapPos(0.0f);
  for (const auto& m : *list) ImGui::Text("! %s", m.c_str());
  ImGui::PopTextWrapPos();
  ImGui::PopStyleColor();
  return true;
}

const char* no_data_title(const AppState& state, const char* waiting) {
  if (!state.run.has_run()) return "No run yet: press Start";
  if (state.status.state == SessionState::Failed) return "The run failed before its first step (see Run)";
  return waiting;
}

void empty_state(const char* title, const char* detail) {
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float wrap = std::max(ImGui::GetFontSize() * 10, avail.x * 0.8f);
  const ImVec2 t = ImGui::CalcTextSize(title);
  const ImVec2 d = ImGui::CalcTextSize(detail, nullptr, false, wrap);
  const float top = std::max(0.0f, (avail.y - t.y - d.y - ImGui::GetStyle().ItemSpacing.y) * 0.4f);
  ImGui::Dummy({1, top});
  ImGui::SetCursorPosX(ImGui::GetCursorPosX() + std::max(0.0f, (avail.x - t.x) * 0.5f));
  ImGui::TextUnformatted(title);
  ImGui::SetCursorPosX(ImGui::GetCursorPosX() + std::max(0.0f, (avail.x - std::min(d.x, wrap)) * 0.5f));
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + wrap);
  ImGui::TextColored(to_vec4(kColorDim), "%s", detail);
  ImGui::PopTextWrapPos();
}

ImU32 category_color(int category, int alpha) {
  // params, grads, optimizer, gathered_params, saved_activations, offloaded, attention_workspace,
  // mlp_workspace, loss_workspace, comm_buffers, other
  static const ImU32 colors[] = {IM_COL32(86, 140, 230, 0),  IM_COL32(120, 170, 250, 0), IM_COL32(60, 95, 170, 0),
                                 IM_COL32(150, 120, 230, 0), IM_COL32(240, 160, 60, 0),  IM_COL32(160, 160, 160, 0),
                                 IM_COL32(230, 90, 110, 0),  IM_COL32(90, 200, 140, 0),  IM_COL32(230, 210, 90, 0),
                                 IM_COL32(80, 200, 220, 0),  IM_COL32(120, 120, 130, 0)};
  const ImU32 c = colors[(category % 11 + 11) % 11];
  return c | (static_cast<ImU32>(alpha) << IM_COL32_A_SHIFT);
}

ImU32 phase_color(PhaseClass c, int alpha) {
  ImU32 rgb = IM_COL32(120, 120, 130, 0);
  switch (c) {
    case PhaseClass::Forward:
      rgb = IM_COL32(80, 130, 220, 0);
      break;
    case PhaseClass::Attention:
      rgb = IM_COL32(230, 90, 110, 0);
      break;
    case PhaseClass::Mlp:
      rgb = IM_COL32(90, 200, 140, 0);
      break;
    case PhaseClass::Loss:
      rgb = IM_COL32(230, 210, 90, 0);
      break;
    case PhaseClass::Backward:
      rgb = IM_COL32(170, 110, 220, 0);
      break;
    case PhaseClass::Optimizer:
      rgb = IM_COL32(240, 150, 60, 0);
      break;
    case PhaseClass::Other:
      break;
  }
  return rgb | (static_cast<ImU32>(alpha) << IM_COL32_A_SHIFT);
}

ImU32 rank_color(int rank, int alpha) {
  // Rank 0 is sky blue, not white: white (dashed) is the planner's curve.
  static const ImU32 colors[] = {IM_COL32(90, 190, 255, 0),  IM_COL32(255, 160, 70, 0),  IM_COL32(150, 230, 110, 0),
                                 IM_COL32(240, 110, 200, 0), IM_COL32(250, 230, 100, 0), IM_COL32(160, 150, 255, 0),
                                 IM_COL32(110, 230, 210, 0), IM_COL32(230, 90, 90, 0)};
  return colors[(rank % 8 + 8) % 8] | (static_cast<ImU32>(alpha) << IM_COL32_A_SHIFT);
}

}  // namespace odyssey::studio
