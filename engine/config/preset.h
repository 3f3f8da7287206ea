// Presets: TOML file <-> RunConfig, --set overrides, and the issues a preset can have, each with
// file:line:col. defines: load_preset, parse_override, preset_to_toml, save_preset, ConfigIssue.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/config/schema.h"

namespace odyssey {

/// One problem with a preset, formatted `FILE:LINE:COL: key = value: the rule (hint)`.
struct ConfigIssue {
  SourceLoc loc;
  std::string key;    ///< "parallel.ulysses_degree"; empty for syntax errors
  std::string value;  ///< the offending value as written, e.g. 3 or "abc"
  std::string rule;   ///< what must hold
  std::string hint;   ///< how to fix it (may be empty)
  std::string format() const;
};

/// Where each key of a loaded preset came from ("training.seq_len" -> file:line:col). Tables map
/// by their own name ("training") to their header line.
using SourceMap = std::map<std::string, SourceLoc>;

/// A `--set section.key=value` override.
struct Override {
  std::string section;
  std::string key;
  RawValue value;
  SourceLoc loc;  ///< {"--set", index} so messages point at the override
};

/// Parses "training.seq_len=3M". Returns false and fills *issue when malformed.
bool parse_override(std::string_view text, int index, Override* out, ConfigIssue* issue);

/// The result of loading: the config, where each key came from, and every problem found.
struct LoadedPreset {
  std::string path;
  RunConfig config;
  SourceMap sources;
  std::vector<ConfigIssue> issues;
  /// load_checkpoint_config only: the hardware profile's issues, kept as saved (see there).
  std::vector<ConfigIssue> hardware_kept_as_saved;
  bool ok() const { return issues.empty(); }
};

/// Loads a preset file, applies overrides and validates. Never throws for bad input: every
/// problem (syntax, unknown keys, types, ranges, impossible combinations) lands in `issues`.
LoadedPreset load_preset(const std::string& path, const std::vector<Override>& overrides = {});
/// Same, from text in memory; `name` stands in for the file name in messages.
LoadedPreset load_preset_text(std::string_view text, const std::string& name,
                              const std::vector<Override>& overrides = {});
/// The config.toml a checkpoint saved, as load_preset_text reads it, except the [hardware]
/// profile: it feeds only the planner's estimates, a checkpoint's state never depends on it, and a
/// rule on it that came after the checkpoint (attention_backward_ratio times the efficiency at most
/// 1) must not make the checkpoint unreadable. Its issues move to hardware_kept_as_saved, the
/// values as written (a key this version does not read holds its default), and every other rule
/// still runs. Unless an override sets a hardware key: the profile is then the user's, checked.
LoadedPreset load_checkpoint_config(std::string_view text, const std::string& name,
                                    const std::vector<Override>& overrides = {});
/// Applies overrides to an already-loaded config (as the studio and CLI do) and revalidates.
LoadedPreset apply_overrides(const RunConfig& base, const std::vector<Override>& overrides,
                             const std::string& name = "--set");

/// Serialises a config as a commented preset that loads back to the same config.
std::string preset_to_toml(const RunConfig& cfg);
/// Writes preset_to_toml atomically (temporary file, then rename). Without `replace` only where
/// no file is at `path` when the name moves: one that appeared since the caller checked is left
/// as it is. Returns false with *error set.
bool save_preset(const std::string& path, const RunConfig& cfg, std::string* error, bool replace = true);

/// Lists *.toml files in a directory, sorted.
std::vector<std::string> list_presets(const std::string& dir);

}  // namespace odyssey
