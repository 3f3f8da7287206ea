// The configuration panel's logic without rendering: the context-length parser and log slider,
// validator messages filed under the field they belong to, flavors and profiles, what each
// technique trades, and how an edit relates to a running config (live, restart or plan only).
// defines: parse_context_length, context_slider_*, FieldMessages, file_issues, apply_model_flavor,
// apply_hardware_profile, applies, live_toggles, heads_per_stage_choices, heads_per_stage_text,
// ChangeKind, ConfigChange, classify_change
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/preset.h"
#include "engine/config/run_config.h"
#include "engine/config/schema.h"
#include "engine/config/techniques.h"

namespace odyssey::studio {

// --- Context length ------------------------------------------------------------------------------

/// Range of the log slider; typed entries may go beyond it (the validator has the last word).
constexpr int64_t kContextSliderMin = int64_t{1} << 7;   // 128 tokens
constexpr int64_t kContextSliderMax = int64_t{1} << 24;  // 16M tokens

/// Parses a typed context length: "131072", "512K", "3M", "1.5M", "131_072" (K/M/G = 1024^1..3).
/// Returns nullopt with *error explaining the accepted forms.
std::optional<int64_t> parse_context_length(std::string_view text, std::string* error);
/// Slider position (log2 of tokens) for a context length.
float context_to_slider(int64_t tokens);
/// Context length for a slider position, snapped to 2^k or 1.5 x 2^k (512K, 768K, 1M, 1.5M, ...).
int64_t slider_to_context(float log2_tokens);

// --- Messages next to their fields -----------------------------------------------------------------

/// Validator issues grouped by the key they name; issues for keys no field shows go to `unplaced`.
struct FieldMessages {
  std::map<std::string, std::vector<std::string>> by_key;
  std::vector<std::string> unplaced;
  /// The messages for one field ("" keys never match).
  const std::vector<std::string>* find(const std::string& key) const;
  size_t count() const;
};
/// Files each issue under its key when `shown_keys` has it (message: "rule (hint)").
FieldMessages file_issues(const std::vector<ConfigIssue>& issues, const std::set<std::string>& shown_keys);
/// "must divide model.n_heads = 32 ... (valid degrees here: 1, 2, 4, 8)".
std::string issue_message(const ConfigIssue& issue);

// --- Flavors, profiles, techniques ---------------------------------------------------------------

/// Replaces the model shape with a named flavor (false if unknown; "custom" keeps the shape).
bool apply_model_flavor(RunConfig& cfg, const std::string& name);
/// Replaces the hardware spec with a named profile (false if unknown). There is no "custom": a
/// profile whose numbers are edited stays the base they override ("h200 (modified)"), which is
/// what a preset can hold (hardware.profile is one of the named ones).
bool apply_hardware_profile(RunConfig& cfg, const std::string& name);
/// True when the model keys differ from the named flavor's shape (shown as "modified").
bool model_differs_from_flavor(const RunConfig& cfg);
/// Same for the hardware profile.
bool hardware_differs_from_profile(const RunConfig& cfg);

/// When an edit of technique `t` reaches a running engine: its key's schema rule.
ApplyWhen applies(const Technique& t);
/// The technique toggles a running engine takes at the next step (the config panel's memory
/// section), in registry order: checkpointing, offload, tiled MLP, tiled loss, Untied Ulysses.
std::vector<Technique> live_toggles();
/// Heads-per-stage values the slider offers (validator's valid list; empty when none apply).
std::vector<int64_t> heads_per_stage_choices(const RunConfig& cfg);
/// The heads-per-stage slider's text with its handle at `shown` (one of the choices):
/// "4 heads (2 stages)", "(one a rank)" for 0, standard attention where "auto" runs none, and for
/// a fixed value the choices do not hold that value, "3 heads (invalid here)" (the field's message
/// says why): the slider showed the nearest valid value as if it were the config's.
std::string heads_per_stage_text(const RunConfig& cfg, int64_t shown, bool standard_attention);

// --- Edits against a running config ----------------------------------------------------------------

enum class ChangeKind {
  None,      ///< nothing that matters to the engine changed
  PlanOnly,  ///< hardware target, output, description: the plan changes, the run does not
  Live,      ///< memory toggles and tile sizes: Session::apply_live at the next step
  Restart,   ///< model, sequence, world size, Ulysses degree, dtype, ...: Session::restart
};
const char* to_string(ChangeKind kind);

struct ConfigChange {
  ChangeKind kind = ChangeKind::None;
  std::vector<std::string> keys;  ///< every changed key (all kinds)
  std::string summary;            ///< "memory.tiled_mlp: true -> false; ..." (engine-relevant keys)
};
/// Compares key by key through the schema, so every field of every table is covered.
ConfigChange classify_change(const RunConfig& running, const RunConfig& edited);

}  // namespace odyssey::studio
