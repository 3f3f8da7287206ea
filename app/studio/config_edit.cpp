// Configuration-panel logic: context-length parsing and the log slider's snapping, filing
// validator issues under fields, flavors/profiles, technique trade-offs, and change classification
// against a running config. defines: see config_edit.h
#include "app/studio/config_edit.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "engine/config/hf_config.h"
#include "engine/config/schema.h"
#include "engine/config/sizes.h"
#include "engine/config/validate.h"

namespace odyssey::studio {

// --- Context length ------------------------------------------------------------------------------

std::optional<int64_t> parse_context_length(std::string_view text, std::string* error) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  auto fail = [&](std::string msg) -> std::optional<int64_t> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  if (text.empty()) return fail("type a token count such as 131072, 512K or 3M");
  const auto tokens = parse_size(text);
  if (!tokens)
    return fail("\"" + std::string(text) + "\" is not a token count: write 131072, 512K, 1.5M or 3M (K = 1024)");
  if (*tokens < 2) return fail("needs at least 2 tokens (one input and one label)");
  if (error) error->clear();
  return tokens;
}

float context_to_slider(int64_t tokens) {
  const int64_t clamped = std::clamp(tokens, kContextSliderMin, kContextSliderMax);
  return static_cast<float>(std::log2(static_cast<double>(clamped)));
}

int64_t slider_to_context(float log2_tokens) {
  const double lo = std::log2(static_cast<double>(kContextSliderMin));
  const double hi = std::log2(static_cast<double>(kContextSliderMax));
  const double v = std::clamp(static_cast<double>(log2_tokens), lo, hi);
  const int k = static_cast<int>(std::floor(v));
  const double frac = v - k;
  const double one_and_half = std::log2(1.5);  // 0.585: where 1.5 x 2^k sits between 2^k and 2^(k+1)
  int64_t out;
  if (frac < one_and_half / 2)
    out = int64_t{1} << k;
  else if (frac < (one_and_half + 1) / 2)
    out = (int64_t{3} << k) / 2;
  else
    out = int64_t{1} << (k + 1);
  return std::clamp(out, kContextSliderMin, kContextSliderMax);
}

// --- Messages next to their fields -----------------------------------------------------------------

const std::vector<std::string>* FieldMessages::find(const std::string& key) const {
  const auto it = by_key.find(key);
  return it == by_key.end() ? nullptr : &it->second;
}

size_t FieldMessages::count() const {
  size_t n = unplaced.size();
  for (const auto& [key, list] : by_key) n += list.size();
  return n;
}

std::string issue_message(const ConfigIssue& issue) {
  std::string out = issue.rule;
  if (!issue.hint.empty()) out += " (" + issue.hint + ")";
  return out;
}

FieldMessages file_issues(const std::vector<ConfigIssue>& issues, const std::set<std::string>& shown_keys) {
  FieldMessages out;
  for (const auto& issue : issues) {
    if (!issue.key.empty() && shown_keys.count(issue.key))
      out.by_key[issue.key].push_back(issue_message(issue));
    else
      out.unplaced.push_back(issue.key.empty() ? issue.format()
                                               : issue.key + " = " + issue.value + ": " + issue_message(issue));
  }
  return out;
}

// --- Flavors, profiles, techniques ---------------------------------------------------------------

bool apply_model_flavor(RunConfig& cfg, const std::string& name) {
  if (name == "custom") {
    cfg.model.flavor = "custom";
    return true;
  }
  if (name == "hf") {  // the shape of the Hugging Face directory the preset names
    HfConfigError error;
    const auto shape = cfg.model.hf_path.empty() ? std::nullopt : read_hf_config(cfg.model.hf_path, &error);
    if (!shape) return false;
    cfg.model = *shape;
    return true;
  }
  const auto shape = find_model_flavor(name);
  if (!shape) return false;
  cfg.model = *shape;
  cfg.model.flavor = name;
  return true;
}

bool apply_hardware_profile(RunConfig& cfg, const std::string& name) {
  const auto spec = find_hardware_profile(name);
  if (!spec) return false;
  cfg.hardware = *spec;
  cfg.hardware.profile = name;
  return true;
}

bool model_differs_from_flavor(const RunConfig& cfg) {
  auto shape = find_model_flavor(cfg.model.flavor);
  if (!shape) return false;
  shape->flavor = cfg.model.flavor;
  return !(*shape == cfg.model);
}

bool hardware_differs_from_profile(const RunConfig& cfg) {
  auto spec = find_hardware_profile(cfg.hardware.profile);
  if (!spec) return false;
  spec->profile = cfg.hardware.profile;
  return !(*spec == cfg.hardware);
}

ApplyWhen applies(const Technique& t) {
  const KeySpec* spec = find_key_spec(t.key);
  if (!spec) throw std::logic_error(std::string("technique registry names no schema key: ") + t.key);
  return spec->applies();
}

std::vector<Technique> live_toggles() {
  std::vector<Technique> out;
  for (const Technique& t : kTechniques)
    if (t.toggle && applies(t) == ApplyWhen::NextStep) out.push_back(t);
  return out;
}

std::vector<int64_t> heads_per_stage_choices(const RunConfig& cfg) {
  if (!cfg.memory.untied_ulysses) return {};
  return valid_heads_per_stage(cfg);
}

std::string heads_per_stage_text(const RunConfig& cfg, int64_t shown, bool standard_attention) {
  if (standard_attention) return "none: standard attention at this length";
  const int64_t value = cfg.memory.heads_per_stage;
  const bool automatic = value == kHeadsPerStageAuto;
  const auto choices = heads_per_stage_choices(cfg);
  if (!automatic &&
      std::find(choices.begin(), choices.end(), effective_heads_per_stage(cfg.memory, cfg.parallel)) == choices.end())
    return std::to_string(value) + " heads (invalid here)";
  const int64_t stages = cfg.model.n_heads / std::max<int64_t>(1, shown);
  return std::to_string(shown) + " heads (" + std::to_string(stages) + (stages == 1 ? " stage)" : " stages)") +
         (!automatic && value == 0 ? " (one a rank)" : "");
}

// --- Edits against a running config ----------------------------------------------------------------

const char* to_string(ChangeKind kind) {
  switch (kind) {
    case ChangeKind::None:
      return "none";
    case ChangeKind::PlanOnly:
      return "plan only";
    case ChangeKind::Live:
      return "live";
    case ChangeKind::Restart:
      return "restart";
  }
  return "?";
}

namespace {
/// The schema's rule for the key (KeySpec::applies), shared with the Session's live apply.
ChangeKind kind_of(ApplyWhen when) {
  switch (when) {
    case ApplyWhen::PlanOnly:
      return ChangeKind::PlanOnly;
    case ApplyWhen::NextStep:
      return ChangeKind::Live;
    case ApplyWhen::Restart:
      return ChangeKind::Restart;
  }
  return ChangeKind::Restart;
}
}  // namespace

ConfigChange classify_change(const RunConfig& running, const RunConfig& edited) {
  ConfigChange change;
  std::string plan_summary;
  for (const KeySpec& spec : config_schema()) {
    const std::string before = value_text(spec, running);
    const std::string after = value_text(spec, edited);
    if (before == after) continue;
    const std::string key = spec.full_name();
    const ChangeKind kind = kind_of(spec.applies());
    change.keys.push_back(key);
    change.kind = std::max(change.kind, kind);
    std::string& summary = kind == ChangeKind::PlanOnly ? plan_summary : change.summary;
    if (!summary.empty()) summary += "; ";
    summary += key + ": " + before + " -> " + after;
  }
  if (change.kind == ChangeKind::PlanOnly) change.summary = plan_summary;
  return change;
}

}  // namespace odyssey::studio
