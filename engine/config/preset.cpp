// TOML <-> RunConfig. The only file that includes toml++. Collects every problem with its position
// (syntax, unknown tables/keys, types, flavor rules, validation) instead of stopping at the first.
#include "engine/config/preset.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <sys/stat.h>

#include <toml++/toml.h>

#include "engine/config/hf_config.h"
#include "engine/config/rope.h"
#include "engine/config/sizes.h"
#include "engine/config/validate.h"
#include "engine/util/files.h"

namespace odyssey {

// [SECTION] Issues and overrides ---------------------------------------------------------------

std::string ConfigIssue::format() const {
  std::string out = loc.str();
  if (!out.empty()) out += ": ";
  if (!key.empty()) out += key + " = " + value + ": ";
  out += rule;
  if (!hint.empty()) out += " (" + hint + ")";
  return out;
}

namespace {
std::optional<RawValue> override_value(std::string_view text, std::string* why, std::string* hint);

/// The offset of the first byte of `text` that is not well-formed UTF-8 (RFC 3629: no overlong
/// forms, no surrogates, nothing above U+10FFFF), or nullopt. TOML files are UTF-8, and toml++
/// refuses a file that is not; a --set value is checked by this before it can be saved.
std::optional<size_t> first_invalid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > text.size()) return i;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cont = static_cast<unsigned char>(text[i + k]);
      if ((cont & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cont & 0x3F);
    }
    static constexpr char32_t kLeast[5] = {0, 0, 0x80, 0x800, 0x10000};  // below: overlong
    if (cp < kLeast[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}
}  // namespace

bool parse_override(std::string_view text, int index, Override* out, ConfigIssue* issue) {
  const SourceLoc loc{"--set", index, 1};
  const auto eq = text.find('=');
  const std::string_view name = eq == std::string_view::npos ? text : text.substr(0, eq);
  const auto dot = name.find('.');
  // A top-level key (description) has no section to name.
  const bool top_level =
      eq != std::string_view::npos && dot == std::string_view::npos && find_key_spec("", std::string(name)) != nullptr;
  if (!top_level &&
      (eq == std::string_view::npos || dot == std::string_view::npos || dot == 0 || dot + 1 == name.size())) {
    if (issue)
      *issue = ConfigIssue{loc, "", "", "--set " + std::string(text) + ": expected section.key=value",
                           "for example --set training.seq_len=3M"};
    return false;
  }
  std::string why, hint;
  const std::optional<RawValue> value = override_value(text.substr(eq + 1), &why, &hint);
  if (!value) {
    if (issue) *issue = ConfigIssue{loc, std::string(name), std::string(text.substr(eq + 1)), why, hint};
    return false;
  }
  out->section = top_level ? std::string() : std::string(name.substr(0, dot));
  out->key = top_level ? std::string(name) : std::string(name.substr(dot + 1));
  out->value = *value;
  out->loc = loc;
  return true;
}

// [SECTION] Loading ----------------------------------------------------------------------------

namespace {

struct Assignment {
  const KeySpec* spec;
  RawValue raw;
  SourceLoc loc;
};

std::string shield(std::string_view text);
std::string unshield(std::string_view text);
std::optional<ConfigIssue> find_shelter_character(std::string_view text, const std::string& name);

SourceLoc loc_of(const toml::source_region& region, const std::string& file) {
  return SourceLoc{file, static_cast<int>(region.begin.line), static_cast<int>(region.begin.column)};
}

RawValue raw_of(const toml::node& node) {
  if (auto v = node.as_boolean()) return RawValue::boolean(v->get());
  if (auto v = node.as_integer()) return RawValue::integer(v->get());
  if (auto v = node.as_floating_point()) return RawValue::floating(v->get());
  if (auto v = node.as_string()) return RawValue::string(unshield(v->get()));
  std::ostringstream os;
  if (auto a = node.as_array())
    os << *a;
  else if (node.is_table())
    os << "{ ... }";
  else if (auto d = node.as_date())
    os << *d;
  else if (auto tm = node.as_time())
    os << *tm;
  else if (auto dt = node.as_date_time())
    os << *dt;
  return RawValue::other(unshield(os.str()));
}

/// A --set value as a preset's TOML would read it (integers in any base, floats, booleans, quoted
/// strings, and arrays, tables and dates, which no key takes: the same value on the command line
/// and in a file), else as from_text reads it (the bare words and sizes TOML has no literal for:
/// auto, llama3-8b, 512K). A value that opens a TOML string or array and does not read as one
/// (`"a`, `[1,`) is nullopt with *why: read as a bare word it would become another value.
/// A value that is not UTF-8, or that holds a character of the shelter block, is nullopt with *why
/// as a preset file would be refused: taken as given, it was saved into presets and checkpoints
/// that no load could read back.
std::optional<RawValue> override_value(std::string_view text, std::string* why, std::string* hint) {
  if (const std::optional<size_t> at = first_invalid_utf8(text)) {
    *why = "is not UTF-8 (byte " + std::to_string(*at + 1) + " of the value), as every preset must be";
    *hint = "write the value in UTF-8";
    return std::nullopt;
  }
  if (const std::optional<ConfigIssue> bad = find_shelter_character(text, "--set")) {
    *why = bad->rule;
    *hint = "a preset cannot hold them: choose other characters";
    return std::nullopt;
  }
  try {
    const toml::table root = toml::parse("v = " + shield(text));  // as load_document reads a file
    const toml::node* node = root.get("v");
    if (node != nullptr && root.size() == 1) return raw_of(*node);
  } catch (const toml::parse_error& e) {
    if (!text.empty() && std::string_view("\"'[{").find(text.front()) != std::string_view::npos) {
      *why = "the value opens a TOML " +
             std::string(text.front() == '['   ? "array"
                         : text.front() == '{' ? "table"
                                               : "string") +
             " and does not read as one (" + unshield(e.description()) + ")";
      *hint = "quote a string whole (--set 'output.dir=\"runs/a b\"'), or write it bare (runs/a)";
      return std::nullopt;
    }
  }
  return RawValue::from_text(text);
}

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const auto& s : config_sections()) names.emplace_back(s.name);
  return names;
}

/// What may stand at a preset's top level: its keys (description) and its tables.
std::vector<std::string> top_level_names() {
  std::vector<std::string> names;
  for (const auto& k : config_schema())
    if (k.section.empty()) names.emplace_back(k.name);
  for (const auto& s : config_sections()) names.emplace_back(s.name);
  return names;
}

std::vector<std::string> key_names(std::string_view section) {
  std::vector<std::string> names;
  for (const auto& k : config_schema())
    if (k.section == section) names.emplace_back(k.name);
  return names;
}

std::string unknown_hint(std::string_view name, const std::vector<std::string>& known) {
  const std::string near = closest_name(name, known);
  if (!near.empty()) return "did you mean " + near + "?";
  std::string all = "known: ";
  for (size_t i = 0; i < known.size(); ++i) all += (i ? ", " : "") + known[i];
  return all;
}

/// Walks the parsed document: known keys become assignments, everything else an issue.
void collect(const toml::table& root, const std::string& file, std::vector<Assignment>& out, SourceMap& sources,
             std::vector<ConfigIssue>& issues, std::vector<std::string>& broken) {
  for (auto&& [key, node] : root) {
    const std::string name = unshield(key.str());
    const SourceLoc loc = loc_of(key.source(), file);
    if (const auto* table = node.as_table()) {
      const bool known = std::any_of(config_sections().begin(), config_sections().end(),
                                     [&](const SectionSpec& s) { return s.name == name; });
      if (!known) {
        issues.push_back({loc, name, "[...]", "unknown table [" + name + "]", unknown_hint(name, section_names())});
        continue;
      }
      sources[name] = loc;
      for (auto&& [child_key, child] : *table) {
        const std::string child_name = unshield(child_key.str());
        const SourceLoc child_loc = loc_of(child_key.source(), file);
        const KeySpec* spec = find_key_spec(name, child_name);
        if (!spec) {
          issues.push_back({child_loc, name + "." + child_name, raw_of(child).text, "unknown key in [" + name + "]",
                            unknown_hint(child_name, key_names(name))});
          continue;
        }
        out.push_back({spec, raw_of(child), child_loc});
      }
      continue;
    }
    if (node.is_array_of_tables()) {
      broken.push_back(name);
      issues.push_back({loc, name, "[[...]]", "must be a single table [" + name + "], not an array of tables", ""});
      continue;
    }
    const KeySpec* spec = find_key_spec("", name);
    if (!spec) {
      const bool is_section = std::any_of(config_sections().begin(), config_sections().end(),
                                          [&](const SectionSpec& s) { return s.name == name; });
      if (is_section) broken.push_back(name);
      issues.push_back({loc, name, raw_of(node).text,
                        is_section ? "must be a table [" + name + "]" : "unknown top-level key",
                        is_section ? "" : unknown_hint(name, top_level_names())});
      continue;
    }
    out.push_back({spec, raw_of(node), loc});
  }
}

const Assignment* last_of(const std::vector<Assignment>& all, std::string_view section, std::string_view name) {
  const Assignment* found = nullptr;
  for (const auto& a : all)
    if (a.spec->section == section && a.spec->name == name) found = &a;
  return found;
}

/// Applies assignments in order: base flavor/profile first, then every other key. Handles the
/// defaults that depend on other keys (custom flavors, head_dim).
void apply(const std::vector<Assignment>& all, const std::string& file, const SourceMap& tables,
           const std::vector<std::string>& broken, RunConfig& cfg, SourceMap& sources,
           std::vector<ConfigIssue>& issues) {
  // A table already reported as malformed gets no "missing key" issues piled on top.
  auto is_broken = [&](const char* section) {
    return std::find(broken.begin(), broken.end(), section) != broken.end();
  };
  auto table_loc = [&](const std::string& section) {
    if (auto it = tables.find(section); it != tables.end()) return it->second;
    return SourceLoc{file, 1, 1};
  };
  auto coerce = [&](const Assignment& a) -> std::optional<RawValue> {
    std::string rule;
    auto v = coerce_value(*a.spec, a.raw, &rule);
    if (!v) {
      std::string hint;
      if (a.spec->kind == KeyKind::Choice && a.raw.type == RawValue::Type::String)
        if (auto near = closest_name(a.raw.s, a.spec->choices); !near.empty()) hint = "did you mean \"" + near + "\"?";
      issues.push_back({a.loc, a.spec->full_name(), a.raw.text, rule, hint});
    }
    return v;
  };

  // A Hugging Face directory's config.json is the model's base, like a flavor (which, when named
  // too, must describe the same shape).
  std::optional<ModelConfig> hf_shape;
  int64_t hf_context = 0;  // its max_position_embeddings (or transformers' default for it)
  const Assignment* hf = last_of(all, "model", "hf_path");
  if (hf && hf->raw.type == RawValue::Type::String && hf->raw.s.empty()) hf = nullptr;  // "" = none (as saved)
  if (hf) {
    if (auto v = coerce(*hf)) {
      HfConfigError error;
      hf_shape = read_hf_config(v->s, &error, &hf_context);
      if (!hf_shape)
        issues.push_back({hf->loc, "model.hf_path", hf->raw.text, error.format(),
                          "name a directory holding a Llama 3.x or Qwen3 config.json and its safetensors"});
    }
  }
  const Assignment* named_flavor = last_of(all, "model", "flavor");
  if (named_flavor && named_flavor->raw.type == RawValue::Type::String && named_flavor->raw.s == "hf" && !hf)
    issues.push_back({named_flavor->loc, "model.flavor", named_flavor->raw.text, "needs model.hf_path",
                      "name the Hugging Face model directory whose config.json gives the shape"});

  // The model flavor is the base every model key overrides.
  bool custom = false;
  ModelConfig flavor_shape;
  if (hf_shape) {
    cfg.model = *hf_shape;
    sources["model.hf_path"] = hf->loc;
    if (named_flavor && named_flavor->raw.type == RawValue::Type::String) {
      if (auto named = find_model_flavor(named_flavor->raw.s)) {
        if (auto diff = first_shape_difference(*named, *hf_shape))
          issues.push_back(
              {named_flavor->loc, "model.flavor", named_flavor->raw.text,
               "describes another shape than " + join_path(hf_shape->hf_path, "config.json") + ": " + *diff,
               "drop model.flavor (flavor = \"hf\" is implied by hf_path) or name the matching flavor"});
        cfg.model.flavor = named->flavor;
      } else if (named_flavor->raw.s == "custom") {
        issues.push_back({named_flavor->loc, "model.flavor", named_flavor->raw.text,
                          "cannot be custom with model.hf_path: the directory's config.json gives the shape",
                          "drop model.flavor, or set flavor = \"hf\""});
      }
      sources["model.flavor"] = named_flavor->loc;
    }
  } else if (hf) {
    // config.json could not be read: reported above; no second issue for the missing flavor.
  } else if (const Assignment* f = named_flavor) {
    if (auto v = coerce(*f)) {
      sources["model.flavor"] = f->loc;
      if (v->s == "custom") {
        custom = true;
        cfg.model = ModelConfig{};
        cfg.model.flavor = "custom";
        cfg.model.rope_theta = 10000.0;
        cfg.model.norm_eps = 1e-5;
        cfg.model.tie_embeddings = false;
        cfg.model.qk_norm = false;
      } else if (auto named = find_model_flavor(v->s)) {
        flavor_shape = *named;
        cfg.model = flavor_shape;
      }  // else "hf" without model.hf_path: reported above
    }
  } else if (!is_broken("model")) {
    issues.push_back({table_loc("model"), "model.flavor", "(missing)", "is required",
                      "name a flavor (tiny, llama3.2-1b, llama3.2-3b, llama3-8b, qwen3-32b, llama3-70b), \"custom\", "
                      "or a Hugging Face directory as model.hf_path"});
  }
  // The hardware profile is the base every hardware key overrides; h100-sxm when absent.
  if (const Assignment* p = last_of(all, "hardware", "profile")) {
    if (auto v = coerce(*p)) {
      sources["hardware.profile"] = p->loc;
      cfg.hardware = *find_hardware_profile(v->s);
    }
  }
  if (!last_of(all, "training", "seq_len") && !is_broken("training"))
    issues.push_back({table_loc("training"), "training.seq_len", "(missing)", "is required",
                      "tokens per sequence, e.g. seq_len = \"128K\""});

  for (const auto& a : all) {
    if (a.spec->full_name() == "model.flavor" || a.spec->full_name() == "hardware.profile") continue;
    if (hf && a.spec->full_name() == "model.hf_path") continue;  // the base above
    if (auto v = coerce(a)) {
      a.spec->set(cfg, *v);
      sources[a.spec->full_name()] = a.loc;
    }
  }

  auto given = [&](const char* key) { return sources.count(key) > 0; };
  ModelConfig& m = cfg.model;
  if (hf_shape) {
    // The checkpoint's tensors fix the shape; rope_*, norm_eps and the rest may be changed.
    for (const KeySpec* spec : model_shape_keys())
      if (given(spec->full_name().c_str()) &&
          toml_literal(*spec, cfg) != toml_literal(*spec, RunConfig{.model = *hf_shape}))
        issues.push_back({sources[spec->full_name()], spec->full_name(), toml_literal(*spec, cfg),
                          "differs from " + join_path(hf_shape->hf_path, "config.json") + " (" +
                              toml_literal(*spec, RunConfig{.model = *hf_shape}) +
                              "): the checkpoint's tensors fix the shape",
                          "drop the key; model.hf_path gives it"});
    // A llama3 or YaRN scaling named here over a config.json without one: its original context is
    // the model's own (config.json's max_position_embeddings, as transformers takes it), not the
    // key's default (8K, Llama 3's), unless given.
    if (reads_original_context(m.rope_scaling.kind) && !reads_original_context(hf_shape->rope_scaling.kind) &&
        !given("model.rope_original_max_position"))
      m.rope_scaling.original_max_position = hf_context;
    return;
  }
  if (custom) {
    for (const char* key : {"model.n_layers", "model.d_model", "model.n_heads", "model.d_ffn", "model.vocab_size"})
      if (!given(key))
        issues.push_back({table_loc("model"), key, "(missing)", "is required when model.flavor = \"custom\"",
                          "give every shape key, or name a flavor to start from"});
    if (!given("model.n_kv_heads")) m.n_kv_heads = m.n_heads;
  }
  // head_dim follows d_model / n_heads unless given, or the flavor's own differs (qwen3-32b).
  const bool flavor_standard =
      custom || (flavor_shape.n_heads > 0 && flavor_shape.d_model == flavor_shape.n_heads * flavor_shape.head_dim);
  // Only for values in their ranges: an absurd n_heads or d_model is reported by the range pass
  // (validate), not as a divisibility problem.
  auto in_range = [&](const char* key) {
    const KeySpec* spec = find_key_spec(key);
    return spec->in_range(cfg);
  };
  if (!given("model.head_dim") && flavor_standard && (custom || given("model.d_model") || given("model.n_heads")) &&
      in_range("model.n_heads") && in_range("model.d_model")) {
    // An issue names the key the preset wrote that derives head_dim: d_model where it is given alone
    // (n_heads is then the flavor's), else n_heads.
    const bool by_d_model = given("model.d_model") && !given("model.n_heads");
    const char* by = by_d_model ? "model.d_model" : "model.n_heads";
    const SourceLoc where = sources.count(by) ? sources[by] : table_loc("model");
    const std::string value = std::to_string(by_d_model ? m.d_model : m.n_heads);
    const KeySpec* head_dim = find_key_spec("model.head_dim");
    if (m.d_model % m.n_heads != 0) {
      issues.push_back(
          {where, by, value,
           by_d_model ? "must be a multiple of model.n_heads = " + std::to_string(m.n_heads) +
                            " unless model.head_dim is given"
                      : "must divide model.d_model = " + std::to_string(m.d_model) + " unless model.head_dim is given",
           "set head_dim explicitly for a model whose heads do not tile d_model"});
    } else {
      RunConfig derived = cfg;
      derived.model.head_dim = m.d_model / m.n_heads;
      if (head_dim->in_range(derived))
        m.head_dim = derived.model.head_dim;
      else  // reported at the key written, not by the range pass at a head_dim the preset never wrote
        issues.push_back({where, by, value,
                          "gives model.head_dim = d_model / n_heads = " + std::to_string(derived.model.head_dim) +
                              ", and model.head_dim " + head_dim->range->rule(head_dim->kind),
                          "give model.head_dim, or a d_model and n_heads whose quotient is in its range"});
    }
  }
}

void sort_issues(std::vector<ConfigIssue>& issues, const std::string& file) {
  std::stable_sort(issues.begin(), issues.end(), [&](const ConfigIssue& a, const ConfigIssue& b) {
    const bool a_file = a.loc.file == file, b_file = b.loc.file == file;
    if (a_file != b_file) return a_file;
    if (a.loc.line != b.loc.line) return a.loc.line < b.loc.line;
    return a.loc.col < b.loc.col;
  });
}

/// Control characters other than tab/LF/CR are never valid TOML; reported here with their position
/// (toml++ 3.3 asserts on some of them, e.g. NUL in a table header, found by scripts/fuzz.sh).
std::optional<ConfigIssue> find_control_character(std::string_view text, const std::string& name) {
  int line = 1, col = 1;
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "U+%04X", c);
      return ConfigIssue{SourceLoc{name, line, col}, "", "",
                         std::string("control character ") + code + " is not allowed in TOML (TOML syntax)",
                         "is this a binary file?"};
    }
    if (c == '\n') {
      line += 1;
      col = 1;
    } else if ((c & 0xC0) != 0x80) {
      col += 1;  // count UTF-8 code points, not continuation bytes
    }
  }
  return std::nullopt;
}

/// How deep a preset may nest: dotted parts of one key, and arrays or inline tables inside each
/// other. Odyssey's schema needs 2 and 1; toml++ builds a dotted key's tables and destroys them
/// recursively, so 150,000 parts (a 300 KB file) overflowed the stack. Checked before parsing.
constexpr int kMaxTomlNesting = 64;

/// The first key with more than kMaxTomlNesting dotted parts, or value nested deeper, found by a
/// scan that knows TOML's strings and comments (a dot or bracket inside them counts for nothing).
std::optional<ConfigIssue> find_excess_nesting(std::string_view text, const std::string& name) {
  enum class In { Plain, Comment, Basic, Literal, MultiBasic, MultiLiteral };
  In in = In::Plain;
  int dots = 0, depth = 0;
  size_t i = 0;
  auto issue = [&](const std::string& rule) {
    int line = 1, col = 1;  // of text[i], counted in code points
    for (size_t j = 0; j < i; ++j) {
      if (text[j] == '\n') {
        line += 1;
        col = 1;
      } else if ((static_cast<unsigned char>(text[j]) & 0xC0) != 0x80) {
        col += 1;
      }
    }
    return ConfigIssue{SourceLoc{name, line, col}, "", "", rule + " (TOML syntax)",
                       "Odyssey's keys are section.key; is this a preset?"};
  };
  auto at = [&](size_t pos, std::string_view s) { return text.substr(pos, s.size()) == s; };
  for (; i < text.size(); ++i) {
    const char c = text[i];
    switch (in) {
      case In::Comment:
        if (c == '\n') in = In::Plain;
        break;
      case In::Basic:
      case In::MultiBasic:
        if (c == '\\') {
          ++i;  // the escaped character (a quote does not end the string)
        } else if (in == In::MultiBasic ? at(i, "\"\"\"") : c == '"') {
          if (in == In::MultiBasic) i += 2;
          in = In::Plain;
        } else if (c == '\n' && in == In::Basic) {
          in = In::Plain;  // an unterminated string: the parser reports it; the scan goes on
        }
        break;
      case In::Literal:
      case In::MultiLiteral:
        if (in == In::MultiLiteral ? at(i, "\'\'\'") : c == '\'') {
          if (in == In::MultiLiteral) i += 2;
          in = In::Plain;
        } else if (c == '\n' && in == In::Literal) {
          in = In::Plain;
        }
        break;
      case In::Plain:
        if (c == '#') {
          in = In::Comment;
        } else if (c == '"') {
          in = at(i, "\"\"\"") ? In::MultiBasic : In::Basic;
          if (in == In::MultiBasic) i += 2;
        } else if (c == '\'') {
          in = at(i, "\'\'\'") ? In::MultiLiteral : In::Literal;
          if (in == In::MultiLiteral) i += 2;
        } else if (c == '.') {
          if (++dots >= kMaxTomlNesting)
            return issue("a key of more than " + std::to_string(kMaxTomlNesting) + " dotted parts");
        } else if (c == '[' || c == '{') {
          dots = 0;
          if (++depth > kMaxTomlNesting)
            return issue("arrays, tables or inline tables nested more than " + std::to_string(kMaxTomlNesting) +
                         " deep");
        } else if (c == ']' || c == '}') {
          dots = 0;
          depth = std::max(0, depth - 1);
        } else if (c == '=' || c == ',' || c == '\n') {
          dots = 0;
        }
        break;
    }
  }
  return std::nullopt;
}

// toml++ 3.3's is_non_ascii_horizontal_whitespace reaches __builtin_unreachable for code points in
// three ranges (its generated lookup table misses them), and the parser calls it on arbitrary
// characters while scanning. Before parsing, those code points are moved to a private-use block
// that the table handles; strings and messages read back from the parse are moved home again.
struct ShieldRange {
  char32_t first, last, shelter;
};
constexpr ShieldRange kShieldRanges[] = {
    {0x00A1, 0x0499, 0xE000}, {0x2C1E, 0x2FFF, 0xE400}, {0x3001, 0x3017, 0xE7E2}, {0xFB26, 0xFEFE, 0xE800}};
constexpr char32_t kShelterFirst = 0xE000, kShelterLast = 0xEBFF;

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// Rewrites every 2- and 3-byte UTF-8 code point through `map`; other bytes (ASCII, 4-byte and
/// invalid sequences, which toml++ reports itself) pass through unchanged.
template <class Map>
std::string remap_code_points(std::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t len = 0;
    char32_t cp = 0;
    if ((c & 0xE0) == 0xC0 && i + 1 < text.size() && (text[i + 1] & 0xC0) == 0x80) {
      len = 2;
      cp = ((c & 0x1F) << 6) | (text[i + 1] & 0x3F);
    } else if ((c & 0xF0) == 0xE0 && i + 2 < text.size() && (text[i + 1] & 0xC0) == 0x80 &&
               (text[i + 2] & 0xC0) == 0x80) {
      len = 3;
      cp = ((c & 0x0F) << 12) | ((text[i + 1] & 0x3F) << 6) | (text[i + 2] & 0x3F);
    }
    if (len == 0) {
      out.push_back(text[i++]);
      continue;
    }
    append_utf8(out, map(cp));
    i += len;
  }
  return out;
}

std::string shield(std::string_view text) {
  return remap_code_points(text, [](char32_t cp) {
    for (const auto& r : kShieldRanges)
      if (cp >= r.first && cp <= r.last) return static_cast<char32_t>(r.shelter + (cp - r.first));
    return cp;
  });
}

std::string unshield(std::string_view text) {
  return remap_code_points(text, [](char32_t cp) {
    for (const auto& r : kShieldRanges)
      if (cp >= r.shelter && cp <= r.shelter + (r.last - r.first))
        return static_cast<char32_t>(r.first + (cp - r.shelter));
    return cp;
  });
}

/// Finds a private-use character of the shelter block in the input (it could not be told apart
/// from a sheltered one), with its position.
std::optional<ConfigIssue> find_shelter_character(std::string_view text, const std::string& name) {
  int line = 1, col = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0xEE && i + 2 < text.size()) {  // U+E000..U+EFFF encode as EE 80..BF xx
      const unsigned char c1 = static_cast<unsigned char>(text[i + 1]);
      if (c1 >= 0x80 && c1 <= 0xAF)  // U+E000..U+EBFF
        return ConfigIssue{SourceLoc{name, line, col}, "", "",
                           "private-use characters U+E000..U+EBFF are not supported in presets", ""};
    }
    if (c == '\n') {
      line += 1;
      col = 1;
    } else if ((c & 0xC0) != 0x80) {
      col += 1;
    }
  }
  return std::nullopt;
}

LoadedPreset load_document(std::string_view text, const std::string& name, const std::vector<Override>& overrides) {
  LoadedPreset result;
  result.path = name;
  if (auto bad = find_control_character(text, name)) {
    result.issues.push_back(*bad);
    return result;
  }
  if (auto bad = find_shelter_character(text, name)) {
    result.issues.push_back(*bad);
    return result;
  }
  if (auto bad = find_excess_nesting(text, name)) {
    result.issues.push_back(*bad);
    return result;
  }
  std::vector<Assignment> assignments;
  SourceMap tables;
  std::vector<std::string> broken;
  try {
    const std::string shielded = shield(text);
    const toml::table root = toml::parse(shielded, std::string_view(name));
    collect(root, name, assignments, tables, result.issues, broken);
  } catch (const toml::parse_error& e) {
    result.issues.push_back({loc_of(e.source(), name), "", "", unshield(e.description()) + " (TOML syntax)", ""});
    return result;
  }
  for (const auto& o : overrides) {
    const KeySpec* spec = find_key_spec(o.section, o.key);
    if (!spec) {
      const bool known_section = std::any_of(config_sections().begin(), config_sections().end(),
                                             [&](const SectionSpec& s) { return s.name == o.section; });
      result.issues.push_back(
          {o.loc, o.section + "." + o.key, o.value.text,
           known_section ? "unknown key in [" + o.section + "]" : "unknown table [" + o.section + "]",
           known_section ? unknown_hint(o.key, key_names(o.section)) : unknown_hint(o.section, section_names())});
      continue;
    }
    assignments.push_back({spec, o.value, o.loc});
  }
  result.sources = tables;
  apply(assignments, name, tables, broken, result.config, result.sources, result.issues);
  // The rules that combine keys only make sense on a config whose keys all read (a key that failed
  // holds its default); each key's own range holds regardless, so a file's every out-of-range value
  // is reported beside its reading problems, not after they are fixed.
  if (result.issues.empty()) {
    result.issues = validate(result.config, result.sources, name);
  } else {
    std::set<std::string> failed;
    for (const ConfigIssue& issue : result.issues) failed.insert(issue.key);
    for (ConfigIssue& issue : validate_ranges(result.config, result.sources, name))
      if (!failed.count(issue.key)) result.issues.push_back(std::move(issue));
  }
  sort_issues(result.issues, name);
  return result;
}

}  // namespace

LoadedPreset load_preset_text(std::string_view text, const std::string& name, const std::vector<Override>& overrides) {
  return load_document(text, name, overrides);
}

LoadedPreset load_checkpoint_config(std::string_view text, const std::string& name,
                                    const std::vector<Override>& overrides) {
  LoadedPreset r = load_document(text, name, overrides);
  for (const Override& o : overrides)
    if (o.section == "hardware") return r;
  const auto set_aside_hardware = [&r] {
    const auto hardware = std::stable_partition(r.issues.begin(), r.issues.end(), [](const ConfigIssue& issue) {
      return issue.key.rfind("hardware.", 0) != 0;
    });
    r.hardware_kept_as_saved.insert(r.hardware_kept_as_saved.end(), hardware, r.issues.end());
    r.issues.erase(hardware, r.issues.end());
  };
  set_aside_hardware();
  // A [hardware] key that did not read (one this version no longer knows, or of another type:
  // it holds its default) kept the rules that combine keys from running: they run now, on the
  // rest, so nothing but the profile goes unchecked.
  if (!r.hardware_kept_as_saved.empty() && r.issues.empty()) {
    std::set<std::string> kept;
    for (const ConfigIssue& issue : r.hardware_kept_as_saved) kept.insert(issue.key);
    for (ConfigIssue& issue : validate(r.config, r.sources, name))
      if (!kept.count(issue.key)) r.issues.push_back(std::move(issue));
    set_aside_hardware();
  }
  return r;
}

namespace {
/// Presets are a few kilobytes; a larger "preset" is some other file named by mistake.
constexpr int64_t kMaxPresetBytes = 1 << 20;
}  // namespace

LoadedPreset load_preset(const std::string& path, const std::vector<Override>& overrides) {
  try {
    // Bounded on the opened descriptor: a FIFO cannot block, /dev/zero or a huge file is refused
    // before a byte is read.
    return load_document(read_file_bounded(path, kMaxPresetBytes, "preset"), path, overrides);
  } catch (const FileReadError& e) {
    LoadedPreset r;
    r.path = path;
    std::string rule = e.what();
    const std::string prefix = "preset " + path + ": ";
    if (rule.rfind(prefix, 0) == 0) rule = rule.substr(prefix.size());  // the location names the file
    r.issues.push_back({SourceLoc{path}, "", "", rule, "give the path of a .toml preset, e.g. presets/tiny-cpu.toml"});
    return r;
  }
}

LoadedPreset apply_overrides(const RunConfig& base, const std::vector<Override>& overrides, const std::string& name) {
  return load_document(preset_to_toml(base), name, overrides);
}

// [SECTION] Saving -----------------------------------------------------------------------------

std::string preset_to_toml(const RunConfig& cfg) {
  std::ostringstream out;
  out << "# Odyssey preset";
  if (!cfg.description.empty()) {
    // A comment ends at the line's end and TOML allows no control character in it: the
    // description's own are shown as spaces here (the key below keeps them, escaped).
    std::string shown = cfg.description;
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    out << ": " << shown;
  }
  out << "\n# Load with `odyssey check|plan|train FILE`; every key is documented in docs/presets.md.\n\n";
  if (!cfg.description.empty()) {
    const KeySpec* d = find_key_spec("", "description");
    out << "description = " << toml_literal(*d, cfg) << "\n\n";
  }
  const auto flavor = find_model_flavor(cfg.model.flavor);
  const auto profile = find_hardware_profile(cfg.hardware.profile);
  for (const auto& section : config_sections()) {
    out << "# [" << section.name << "] " << section.doc << "\n[" << section.name << "]\n";
    for (const auto& key : config_schema()) {
      if (key.section != section.name) continue;
      // Keys equal to the named base are implied by it; write only what differs. head_dim is
      // written with a d_model or n_heads of its own: the loader would derive it from them. Under
      // model.hf_path the loader starts from its config.json, which a named flavor matches in shape
      // only: rope_*, norm_eps and the rest are written whatever the flavor's.
      const auto& shape_keys = model_shape_keys();
      const bool implied_by_flavor =
          cfg.model.hf_path.empty() || std::find(shape_keys.begin(), shape_keys.end(), &key) != shape_keys.end();
      if (section.name == "model" && key.name != "flavor" && flavor && implied_by_flavor) {
        RunConfig base = cfg;
        base.model = *flavor;
        const bool derived_otherwise =
            key.name == "head_dim" && (cfg.model.d_model != flavor->d_model || cfg.model.n_heads != flavor->n_heads);
        if (!derived_otherwise && toml_literal(key, base) == toml_literal(key, cfg)) continue;
      }
      if (section.name == "hardware" && key.name != "profile" && profile) {
        RunConfig base = cfg;
        base.hardware = *profile;
        if (toml_literal(key, base) == toml_literal(key, cfg)) continue;
      }
      out << "# " << key.doc << "\n" << key.name << " = " << toml_literal(key, cfg) << "\n";
    }
    out << "\n";
  }
  return out.str();
}

bool save_preset(const std::string& path, const RunConfig& cfg, std::string* error, bool replace) {
  try {
    AtomicFile file(path);  // PATH.tmp, fsync, rename: whole or not at all
    file.write(preset_to_toml(cfg));
    if (replace) {
      file.commit();
      return true;
    }
    if (file.commit_new()) return true;
    if (error) *error = path + " appeared while the preset was written (another program wrote it): it is left as it is";
    return false;
  } catch (const FileWriteError& e) {
    if (error) *error = e.what();
    return false;
  }
}

std::vector<std::string> list_presets(const std::string& dir) {
  // POSIX, not std::filesystem: a symlink loop or an unreadable entry made its iterator throw (and
  // the studio abort); here such an entry is simply not a preset.
  std::vector<std::string> out;
  for (const std::string& entry : list_dir(dir)) {
    if (entry.size() <= 5 || entry.compare(entry.size() - 5, 5, ".toml") != 0) continue;
    const std::string path = join_path(dir, entry);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) out.push_back(path);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace odyssey
