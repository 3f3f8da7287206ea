// AppState's non-drawing operations: panel names, frame statistics, loading a preset into the
// edited config, revalidation, and the per-frame update (poll the engine, sync live edits).
// [SECTION] names and frame stats  [SECTION] updates
// defines: panel_name, panel_title, FrameStats, eval_run_dir, load_preset_into, refresh_validation,
// frame_update, last_step_with
#include "app/studio/app_state.h"

#include <algorithm>

#include "app/studio/panels.h"
#include "app/studio/planned_throughput.h"
#include "engine/config/validate.h"

namespace odyssey::studio {

// [SECTION] names and frame stats -----------------------------------------------------------------

const char* panel_name(PanelId id) {
  static const char* names[] = {"config", "plan", "run", "timeline", "throughput", "log", "eval"};
  return names[static_cast<int>(id)];
}

const char* panel_title(PanelId id) {
  static const char* titles[] = {"Configuration", "Plan", "Run", "Memory timeline", "Throughput", "Log", "Evaluation"};
  return titles[static_cast<int>(id)];
}

void FrameStats::add(double ms) {
  ui_ms[cursor] = static_cast<float>(ms);
  cursor = (cursor + 1) % kWindow;
  count = std::min(count + 1, kWindow);
}

double FrameStats::mean() const {
  double s = 0;
  for (int i = 0; i < count; ++i) s += ui_ms[i];
  return count ? s / count : 0;
}

double FrameStats::max() const {
  float m = 0;
  for (int i = 0; i < count; ++i) m = std::max(m, ui_ms[i]);
  return m;
}

std::string eval_run_dir(const AppState& state) {
  return state.eval.other_dir[0] != '\0' ? std::string(state.eval.other_dir) : state.config.output.dir;
}

// [SECTION] updates ------------------------------------------------------------------------------

std::vector<ConfigIssue> problems_beyond_rules(const LoadedPreset& loaded) {
  const auto rule_issues = validate(loaded.config);
  std::vector<ConfigIssue> out;
  for (const auto& i : loaded.issues) {
    const bool again = std::any_of(rule_issues.begin(), rule_issues.end(),
                                   [&](const ConfigIssue& r) { return r.key == i.key && r.rule == i.rule; });
    if (!again) out.push_back(i);
  }
  return out;
}

std::string start_blocker(const AppState& state) {
  if (!state.edit.issues.empty()) return "Fix the configuration first (fields marked in red)";
  if (!state.edit.file_problems.empty())
    return "The preset file has problems (listed under its name) and the fields hold defaults there: fix the file "
           "and open it again, or save the configuration as shown";
  return "";
}

bool load_preset_into(AppState& state, const std::string& path) {
  LoadedPreset loaded = load_preset(path);
  auto& e = state.edit;
  const bool unreadable =
      std::any_of(loaded.issues.begin(), loaded.issues.end(), [](const ConfigIssue& i) { return i.key.empty(); });
  if (unreadable) {
    e.preset_message = "Could not load " + path + ":";
    for (const auto& i : loaded.issues) e.preset_message += "\n" + i.format();
    e.preset_message_error = true;
    return false;
  }
  // Rules the validator will show at their fields are not repeated here; the rest (unknown keys,
  // wrong types) are listed under the preset.
  std::string extra;
  e.file_problems = problems_beyond_rules(loaded);
  for (const auto& i : e.file_problems) extra += "\n" + i.format();
  state.config = loaded.config;
  state.preset_path = path;
  e.preset_message = "Loaded " + path + (extra.empty() ? "" : " with problems:" + extra);
  e.preset_message_error = !extra.empty();
  e.validated = false;
  e.context_text_for = -1;
  refresh_validation(state);
  return true;
}

std::string validity_headline(const ConfigEditState& edit, bool* valid) {
  const size_t rules = edit.messages.count(), file = edit.file_problems.size();
  *valid = rules == 0 && file == 0;
  if (*valid) return "Valid configuration";
  auto problems = [](size_t n) { return std::to_string(n) + " problem" + (n == 1 ? "" : "s"); };
  std::string s;
  if (rules > 0) s = problems(rules) + ": see the fields marked in red";
  if (file > 0)
    s += (s.empty() ? "" : "; ") + problems(file) + " in the loaded file (listed above): the fields show defaults in " +
         (file == 1 ? "its" : "their") + " place until you fix and save";
  return s;
}

void refresh_validation(AppState& state) {
  auto& e = state.edit;
  if (e.validated && e.validated_for == state.config) return;
  e.issues = validate(state.config);
  e.notes = e.issues.empty() ? config_notes(state.config) : std::vector<std::string>{};
  e.messages = file_issues(e.issues, config_panel_keys());
  e.validated_for = state.config;
  e.validated = true;
}

const StepMetrics* last_step_with(const AppState& state, const RunConfig& cfg) {
  const auto& metrics = state.history.metrics();
  if (!state.run.has_run() || metrics.empty() || !(state.run.engine_config() == cfg)) return nullptr;
  // a plan of another kind of device than the run's (an H100 profile over a CPU run) is no
  // prediction of these bytes: 2 GiB planned beside 9 MiB measured
  if (!profile_describes_device(cfg.hardware.profile, state.status.device)) return nullptr;
  return state.history.config_at(metrics.back().step) == cfg ? &metrics.back() : nullptr;
}

void frame_update(AppState& state, EngineControl& engine, double now_s) {
  state.now_s = now_s;
  state.status = engine.status();
  if (state.run.has_run()) state.history.poll(engine);
  refresh_validation(state);
  state.run.sync(engine, state.config, state.edit.issues.empty(), now_s, state.history);
}

}  // namespace odyssey::studio
