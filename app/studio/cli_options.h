// odyssey-studio's command line: preset, screenshot mode (--screenshot FILE --frames N), a short
// run before it (--run-steps N), UI scale, the focused panel, overrides and scripted live changes.
// defines: StudioOptions, ScriptedChange, kMaxBenchSamples, parse_assignment, parse_studio_args,
// studio_usage, panel_from_name
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/studio/app_state.h"
#include "engine/config/preset.h"

namespace odyssey::studio {

/// `--change-at STEP:section.key=value`: an edit made through the UI path when the run reaches STEP.
struct ScriptedChange {
  int64_t step = 0;
  std::string assignment;  ///< "memory.tiled_mlp=false"
};

struct StudioOptions {
  std::string preset = "presets/tiny-cpu.toml";
  std::string screenshot;        ///< write a PNG and exit when set
  int frames = 5;                ///< frames rendered before the screenshot (after the run steps)
  int64_t run_steps = 0;         ///< train this many steps first (0: no run)
  float scale = 1.0f;            ///< UI scale (fonts and spacing), 0.5 to 4
  std::optional<PanelId> panel;  ///< focus one panel (it fills the content area)
  int width = 1600, height = 1000;
  std::vector<std::string> sets;  ///< --set section.key=value, applied at load
  std::vector<ScriptedChange> changes;
  double timeout_s = 600;     ///< screenshot mode: give up waiting for the run after this
  int64_t bench_samples = 0;  ///< fill the timeline with this many synthetic samples (benchmark)
  bool help = false;
};

/// The most synthetic samples --bench-samples builds (each about 190 bytes before the history's
/// caps apply: 1.9 GB at this bound).
constexpr int64_t kMaxBenchSamples = 10'000'000;

/// One `section.key=value` as `--set` reads it, its key known and its value of the key's type.
/// False with *error naming the key, value and rule (a rule that combines keys is the validator's).
bool parse_assignment(const std::string& assignment, Override* out, std::string* error);

/// Parses argv. False with *error naming the bad argument and the rule.
bool parse_studio_args(int argc, const char* const* argv, StudioOptions* out, std::string* error);
std::string studio_usage();
/// "plan" -> PanelId::Plan (case-insensitive); nullopt when unknown.
std::optional<PanelId> panel_from_name(const std::string& name);

}  // namespace odyssey::studio
