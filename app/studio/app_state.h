// All persistent UI state of the studio in one struct (Tracy's ViewData): the config being edited
// and its validation, the plan caches, the run controller and history, which panels show, plot
// views, the evaluations shown, scale and frame timing. Panels are free functions over
// (AppState&, EngineControl&).
// defines: PanelId, panel_name, panel_title, AppState and its parts, eval_run_dir,
// load_preset_into, refresh_validation, frame_update, last_step_with
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/studio/config_edit.h"
#include "app/studio/engine_control.h"
#include "app/studio/eval_results.h"
#include "app/studio/plan_cache.h"
#include "app/studio/planned_throughput.h"
#include "app/studio/plot.h"
#include "app/studio/run_driver.h"
#include "app/studio/run_history.h"

namespace odyssey::studio {

enum class PanelId { Config, Plan, Run, Timeline, Throughput, Log, Eval };
constexpr int kPanelCount = 7;
/// "config", "plan", "run", "timeline", "throughput", "log", "eval" (the --panel names).
const char* panel_name(PanelId id);
/// Window titles: "Configuration", "Plan", ...
const char* panel_title(PanelId id);

/// The configuration panel's text buffers and the validation of the edited config.
struct ConfigEditState {
  char context_text[32] = {};
  int64_t context_text_for = -1;  ///< seq_len the text was last filled from
  std::string context_error;      ///< the parser's message for the typed text
  bool context_editing = false;   ///< the text field has focus (not refilled from the config)
  char open_path[512] = {};
  std::string preset_message;  ///< result of the last load/save
  bool preset_message_error = false;
  std::vector<ConfigIssue> issues;  ///< validate(config)
  /// config_notes(config) of a valid config: what it does that its author may not expect (a device
  /// that takes the other path than the profile describes, an idle size or RoPE key), as `odyssey
  /// check` prints them.
  std::vector<std::string> notes;
  /// The loaded file's problems that are no rule of the config (missing, unknown or mistyped
  /// keys): the fields hold defaults in their place. Cleared by the next load or a save.
  std::vector<ConfigIssue> file_problems;
  FieldMessages messages;   ///< issues filed under their fields
  RunConfig validated_for;  ///< config the issues belong to
  bool validated = false;
};

struct TimelineState {
  plot::View view;
  int64_t step = -1;       ///< -1: the latest complete step
  bool all_steps = false;  ///< show the whole run instead of one step
  int rank = -1;           ///< -1: all ranks
  bool show_planned = true;
  bool show_phase_peaks = true;
  int64_t shown_step = -2;                                      ///< selection the view last fitted (a new one refits)
  std::vector<plot::DownsampleCache> device_lines, host_lines;  ///< per rank
};

struct ThroughputState {
  plot::View view;
  /// The planner's step for each config of the run (planned_stretches), kept until the run or
  /// its markers change: a plan per config, not per frame.
  std::vector<PlannedStretch> planned;
  uint64_t planned_run = UINT64_MAX;
  size_t planned_markers = SIZE_MAX;
};

/// The Eval panel: the evaluations of a run directory and which are shown.
struct EvalPanelState {
  EvalLibrary library;
  /// A run directory typed in the panel; empty: the edited config's output.dir.
  char other_dir[512] = {};
  /// Another eval.json whose losses are drawn beside the selected one's, once chosen ("" for
  /// none); until then, the one before the selected (EvalLibrary::older_alike).
  std::string compare_path;
  bool compare_chosen = false;
};

/// UI thread time per frame (what the UI costs, independent of vsync) and the frame interval.
struct FrameStats {
  static constexpr int kWindow = 240;
  std::array<float, kWindow> ui_ms{};
  int cursor = 0, count = 0;
  double frame_interval_ms = 0;
  void add(double ms);
  double mean() const;
  double max() const;
};

/// The dialogs of the File menu (open, save preset, export trace and metrics).
enum class FileDialog { None, Open, SavePreset, ExportTrace, ExportMetrics };

struct AppState {
  // Configuration being edited.
  RunConfig config;
  std::string preset_path;
  ConfigEditState edit;

  // Planner (for the edited config and for the config the engine runs).
  PlanCache plan;
  PlanCache run_plan{false};  ///< the running config's plan (timeline overlay, run panel)
  std::string tune_message;   ///< what the plan panel's tune button last did (apply_tuned_memory)

  // Engine.
  RunDriver run;
  RunHistory history;

  // Layout and view.
  std::array<bool, kPanelCount> show{true, true, true, true, true, true, false};  ///< Eval: View menu or --panel eval
  std::optional<PanelId> focus;                                                   ///< that panel fills the content area
  std::optional<PanelId> focus_request;  ///< bring this window to the front next frame
  bool tiled = true;                     ///< windows follow the tiled layout each frame
  float scale = 1.0f;                    ///< applied UI scale
  float requested_scale = 1.0f;          ///< the frame loop rebuilds fonts when it differs
  TimelineState timeline;
  ThroughputState throughput;
  EvalPanelState eval;
  FrameStats frame;
  double now_s = 0;      ///< monotonic clock at this frame
  SessionStatus status;  ///< the engine's status, read once per frame

  // File dialogs.
  FileDialog dialog = FileDialog::None;
  bool dialog_opened = false;
  char dialog_path[512] = {};
  std::string dialog_message;
  bool dialog_message_error = false;
  std::string dialog_replace_path;  ///< the existing file the last action refused: Replace writes over it

  bool quit_requested = false;
  bool shown(PanelId id) const { return show[static_cast<int>(id)]; }
};

/// The run directory whose evaluations the Eval panel shows: the one typed there, else the edited
/// config's output.dir (where `odyssey train PRESET` writes, and `odyssey eval` its eval/ folder).
std::string eval_run_dir(const AppState& state);

/// Loads a preset file into the edited config. A file that cannot be parsed leaves the config as
/// it was and says why; a file that parses but breaks rules loads and shows each rule at its field.
bool load_preset_into(AppState& state, const std::string& path);
/// A loaded preset's issues that are no rule of its config (validate() would not repeat them at a
/// field): unknown or mistyped keys, a model.hf_path that is no model directory. Where these are,
/// the config holds defaults in their place.
std::vector<ConfigIssue> problems_beyond_rules(const LoadedPreset& loaded);
/// Why Start is not offered for the edited config ("" when it is): fields the validator marks, or
/// the loaded file's problems (the fields hold defaults there) until the file is fixed and opened
/// again or the config is saved as shown.
std::string start_blocker(const AppState& state);
/// The configuration panel's one-line verdict: "Valid configuration" only when neither the edited
/// config breaks a rule nor the file it came from had problems; else how many, and where.
std::string validity_headline(const ConfigEditState& edit, bool* valid);
/// Revalidates the edited config when it changed since the last call.
void refresh_validation(AppState& state);
/// Everything a frame does besides drawing: poll the engine, revalidate, sync live edits.
void frame_update(AppState& state, EngineControl& engine, double now_s);
/// The run's last step when it ran with `cfg` on the kind of device cfg's profile describes (the
/// plan panel's measured bars stand beside the plan of `cfg` only then), else nullptr: no run, no
/// step yet, the last step ran another config (a restart or a live change that has not reached a
/// step yet), or the plan is of another machine (a GPU profile over a CPU run).
const StepMetrics* last_step_with(const AppState& state, const RunConfig& cfg);

}  // namespace odyssey::studio
