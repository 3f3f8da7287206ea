// The preset schema as data: every TOML key with its table, type, doc line and accessors. One
// table drives loading, --set overrides, saving with comments, docs/presets.md and the studio's fields.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

/// Where a value came from: a preset file position, or "--set" and the override's index.
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
  bool valid() const { return !file.empty(); }
  /// "presets/x.toml:14:1", or the file alone when no position is known.
  std::string str() const;
};

/// A value as written in a preset or on the command line, before it is checked against a key.
struct RawValue {
  enum class Type { Bool, Int, Float, String, Other } type = Type::Other;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::string text;  ///< as echoed in messages: 3, "abc", true, [1, 2]

  static RawValue boolean(bool v);
  static RawValue integer(int64_t v);
  static RawValue floating(double v);
  static RawValue string(std::string v);
  static RawValue other(std::string text);
  /// Interprets command-line text: true/false, integers, floats, quoted or bare strings.
  static RawValue from_text(std::string_view text);
};

enum class KeyKind { Bool, Int, Size, Float, String, Choice };

/// When an edit of a key reaches a running engine. One rule, read by the studio's change
/// classifier, the session's live apply and the technique registry.
enum class ApplyWhen {
  PlanOnly,  ///< [hardware], [output], description: the plan (or the next run's files) change, the run does not
  NextStep,  ///< [memory]: toggles, tile sizes and heads per stage apply at the next step boundary
  Restart,   ///< [model], [training], [parallel]: shapes, shards and rank threads change
};
const char* to_string(ApplyWhen when);

/// The physical range of a numeric key. Every value outside it is refused before any rule that
/// combines keys runs, so no rule, hint loop or planner sum ever sees an absurd value (a
/// 9e9 GiB device, 2^40 heads). Integer keys use closed bounds; `hi` may be +inf (no bound beyond
/// the type's own).
struct ValueRange {
  double lo = 0;
  double hi = 0;
  bool lo_open = false;   ///< (lo, ... instead of [lo, ...
  bool hi_open = false;   ///< ..., hi) instead of ..., hi]
  std::string_view unit;  ///< "seconds", "GiB": named in the rule; may be empty
  std::string_view why;   ///< appended to the rule in parentheses; may be empty

  /// False for NaN and for anything outside the bounds.
  bool contains(double v) const;
  /// "must be between 1 and 1024", "must be in (0, 1]", "must be a number of seconds in
  /// (0, 604800]", "must not be negative", with the reason when there is one.
  std::string rule(KeyKind kind) const;
  /// The bounds alone, as the schema table shows them: "1 to 1024", "(0, 1]", ">= 0".
  std::string interval(KeyKind kind) const;
};

/// One preset key.
struct KeySpec {
  std::string_view section;  ///< TOML table ("" for top-level keys)
  std::string_view name;     ///< key inside the table
  KeyKind kind;
  std::string_view doc;                                  ///< one line, written as the key's comment on save
  std::vector<std::string> choices;                      ///< allowed strings for KeyKind::Choice
  std::function<RawValue(const RunConfig&)> get;         ///< canonical value (for save/messages)
  std::function<void(RunConfig&, const RawValue&)> set;  ///< takes a value already coerced
  std::optional<ValueRange> range;                       ///< every Int, Size and Float key has one
  /// The saved training state depends on this key (a parameter's shape, how state is sharded):
  /// a checkpoint resumes only under the value it was saved with. Every other key may change
  /// on resume, and the change is reported.
  bool resume_must_match = false;
  /// An Int or Size key's one value written as a word, outside its range: heads_per_stage and
  /// mlp_tile_tokens = "auto" (kHeadsPerStageAuto, kMlpTileTokensAuto). Empty when the key has none.
  std::string_view word;
  int64_t word_value = 0;

  /// The key's current value as a number (Int, Size, Float keys).
  double number(const RunConfig& cfg) const;
  /// The key holds its word's value (heads_per_stage = "auto", stored as kHeadsPerStageAuto).
  bool holds_word(const RunConfig& cfg) const;
  /// Within the key's range, or its word; true for keys without a range.
  bool in_range(const RunConfig& cfg) const;

  /// "training.seq_len" (or "description" for top-level keys).
  std::string full_name() const;
  /// When an edit of this key reaches a running engine (decided by its table).
  ApplyWhen applies() const;
  /// Human name of the expected type: "a boolean", "a token count such as 4096, 512K or 3M", ...
  std::string type_rule() const;
};

struct SectionSpec {
  std::string_view name;
  std::string_view doc;
};

/// All tables in file order with their one-line docs.
const std::vector<SectionSpec>& config_sections();
/// All keys, grouped by table in file order.
const std::vector<KeySpec>& config_schema();
const KeySpec* find_key_spec(std::string_view section, std::string_view name);
const KeySpec* find_key_spec(std::string_view full_name);

/// The [model] keys that fix parameter shapes (n_layers ... qk_norm): a checkpoint's tensors
/// depend on them, so a resume and a Hugging Face directory both require their values.
const std::vector<const KeySpec*>& model_shape_keys();
/// The first shape key on which `a` and `b` differ, as "n_layers = 16 against 2", or nullopt.
std::optional<std::string> first_shape_difference(const ModelConfig& a, const ModelConfig& b);

/// Checks a raw value against a key's type; returns the coerced value, or nullopt with the rule.
std::optional<RawValue> coerce_value(const KeySpec& spec, const RawValue& raw, std::string* rule);

/// The key's current value as a user would write it in a message: 3M, true, "cpu", 0.0003.
std::string value_text(const KeySpec& spec, const RunConfig& cfg);
/// The key's current value as a TOML literal for saving.
std::string toml_literal(const KeySpec& spec, const RunConfig& cfg);

/// Closest known name to `name` among `candidates` (edit distance <= 3), or empty.
std::string closest_name(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace odyssey
