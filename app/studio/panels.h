// The panels, one file each (panel_<name>.cpp), as free functions over the UI state and the engine.
// Each draws inside a window the dispatcher has begun. Their non-rendering logic lives in
// config_edit.h, run_driver.h, plan_cache.h, timeline_model.h, eval_results.h and here (export).
// defines: draw_*_panel, draw_file_dialogs, output_refusal, export_preset, run_file_dialog_action,
// StudioPalette helpers
#pragma once

#include <imgui.h>

#include <set>
#include <string>

#include "app/studio/app_state.h"
#include "app/studio/engine_control.h"
#include "app/studio/timeline_model.h"

namespace odyssey::studio {

void draw_config_panel(AppState& state, EngineControl& engine);
/// Keys the configuration panel has a field for (their issues show beside the field).
const std::set<std::string>& config_panel_keys();
void draw_plan_panel(AppState& state, EngineControl& engine);
void draw_run_panel(AppState& state, EngineControl& engine);
void draw_timeline_panel(AppState& state, EngineControl& engine);
void draw_throughput_panel(AppState& state, EngineControl& engine);
void draw_log_panel(AppState& state, EngineControl& engine);
/// The evaluations odyssey eval wrote into the run directory (eval_results.h).
void draw_eval_panel(AppState& state, EngineControl& engine);
/// The File menu's modal dialogs (open, save preset, export trace/metrics).
void draw_file_dialogs(AppState& state, EngineControl& engine);

/// Why the File dialogs may not write `path` ("" when they may): no name; a directory, link, FIFO
/// or device; an existing regular file unless `replace` (the dialog's Replace button).
std::string output_refusal(const std::string& path, bool replace);
/// Saves `cfg` as a commented preset and loads it back to prove `odyssey train` reads the same
/// config. Nothing is written when its text does not load back identical (a config the validator
/// refuses) or output_refusal refuses the path. False with *message then, or when writing fails.
bool export_preset(const RunConfig& cfg, const std::string& path, std::string* message, bool replace = false);
/// The open dialog's action on `path` (OK, or Replace with `replace`): opens, saves or exports. A
/// refusal because a regular file is there sets state.dialog_replace_path (the dialog then offers
/// Replace). True when the dialog can close; its message in state.dialog_message.
bool run_file_dialog_action(AppState& state, EngineControl& engine, const std::string& path, bool replace);

// --- shared widgets (widgets.cpp) -------------------------------------------------------------------

/// A "(?)" that shows `text` on hover.
void help_marker(const char* text);
/// The validator's messages for `key` in red under the field, if any. True when there were some.
bool field_messages(const AppState& state, const char* key);
/// A centred, dimmed message for an empty panel ("No run yet: press Start").
void empty_state(const char* title, const char* detail);
/// The title of a live panel with no data yet: no run, a run that failed first, or `waiting`.
const char* no_data_title(const AppState& state, const char* waiting);
/// Colour of a memory category (plan bars) and of a phase class (timeline bands).
ImU32 category_color(int category, int alpha = 255);
ImU32 phase_color(PhaseClass c, int alpha = 255);
/// Distinct colours for ranks.
ImU32 rank_color(int rank, int alpha = 255);
constexpr ImU32 kColorGood = IM_COL32(110, 210, 120, 255);
constexpr ImU32 kColorBad = IM_COL32(240, 90, 90, 255);
constexpr ImU32 kColorWarn = IM_COL32(240, 190, 80, 255);
constexpr ImU32 kColorDim = IM_COL32(150, 155, 165, 255);
inline ImVec4 to_vec4(ImU32 c) { return ImGui::ColorConvertU32ToFloat4(c); }

}  // namespace odyssey::studio
