// The studio's frame: the menu bar, the tiled layout, a flat `if (show) draw()` dispatch over the
// panels and the status bar (the non-drawing update is frame_update in app_state.h).
// defines: draw_studio, panel_rects, PanelRect
#pragma once

#include <array>
#include <string>

#include "app/studio/app_state.h"
#include "app/studio/engine_control.h"

namespace odyssey::studio {

struct PanelRect {
  float x = 0, y = 0, w = 0, h = 0;
};
/// The tiled layout of the content area (below the menu bar, above the status bar): configuration
/// on the left; plan and run on top; timeline and throughput below; the log under the run panel.
/// With a focused panel, the configuration keeps its column and the focused panel takes the rest.
std::array<PanelRect, kPanelCount> panel_rects(float x, float y, float w, float h, const AppState& state);

/// Draws one frame of the whole studio (ImGui must be inside NewFrame/Render).
void draw_studio(AppState& state, EngineControl& engine);

}  // namespace odyssey::studio
