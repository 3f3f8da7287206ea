// odyssey schema [--markdown | --json | --techniques-markdown | --tensor-kinds-markdown]: prints
// every preset table and key with its type, physical range, default and doc line (as text, a
// markdown table or JSON for tools), the technique registry or the planner's tensor kinds as a
// markdown table. docs/presets.md's schema section is the --markdown output, docs/architecture.md's
// technique table the --techniques-markdown output, docs/planner.md's tensor kinds the
// --tensor-kinds-markdown output (tests keep each equal).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "app/cli/cli.h"
#include "engine/config/schema.h"
#include "engine/config/techniques.h"
#include "engine/planner/planner.h"
#include "engine/util/json.h"

namespace odyssey::cli {
namespace {

const char* kind_name(KeyKind kind) {
  switch (kind) {
    case KeyKind::Bool:
      return "bool";
    case KeyKind::Int:
      return "int";
    case KeyKind::Size:
      return "size";
    case KeyKind::Float:
      return "float";
    case KeyKind::String:
      return "string";
    case KeyKind::Choice:
      return "choice";
  }
  return "?";
}

/// Where a key's default comes from: "built-in" (RunConfig's own), "flavor" ([model]: the
/// flavor's shape), "profile" ([hardware]: the device profile's figures) or "required" (no default).
const char* default_source(const KeySpec& key) {
  if (key.section == "model") return key.name == "flavor" ? "required" : "flavor";
  if (key.section == "training" && key.name == "seq_len") return "required";
  if (key.section == "hardware" && key.name != "profile") return "profile";
  return "built-in";
}

/// Every preset key as one JSON object for tools that write or check presets: the same facts as
/// the markdown table, each in its own field, numbers as numbers.
std::string schema_json(const RunConfig& defaults) {
  std::string out;
  JsonWriter w(out);
  w.begin_object().key("sections").begin_array();
  for (const auto& section : config_sections())
    w.begin_object().key("name").value(section.name).key("doc").value(section.doc).end_object();
  w.end_array().key("keys").begin_array();
  for (const auto& key : config_schema()) {
    w.begin_object().key("key").value(key.full_name()).key("section").value(key.section);
    w.key("name").value(key.name).key("type").value(kind_name(key.kind));
    if (key.kind == KeyKind::Choice) {
      w.key("choices").begin_array();
      for (const auto& choice : key.choices) w.value(choice);
      w.end_array();
    }
    w.key("word");
    key.word.empty() ? w.null() : w.value(key.word);  // the one value written as a word: "auto"
    w.key("range");
    if (key.range) {
      const ValueRange& r = *key.range;
      const bool whole = key.kind == KeyKind::Int || key.kind == KeyKind::Size;  // counts as integers
      auto bound = [&](double v) { whole ? w.value(static_cast<int64_t>(v)) : w.value(v); };
      w.begin_object().key("min");
      bound(r.lo);
      w.key("max");
      if (std::isinf(r.hi))
        w.null();  // no bound beyond the type's own
      else
        bound(r.hi);
      w.key("min_open").value(r.lo_open).key("max_open").value(r.hi_open).key("unit").value(r.unit);
      w.key("text").value(r.interval(key.kind)).end_object();
    } else {
      w.null();
    }
    const char* source = default_source(key);
    w.key("default");
    const RawValue value = key.get(defaults);
    if (std::string(source) != "built-in")
      w.null();
    else if (value.type == RawValue::Type::Bool)
      w.value(value.b);
    else if (value.type == RawValue::Type::Int)
      w.value(value.i);
    else if (value.type == RawValue::Type::Float)
      w.value(value.f);
    else if (value.type == RawValue::Type::String)
      w.value(value.s);
    else
      w.value(toml_literal(key, defaults));
    w.key("default_from").value(source).key("doc").value(key.doc);
    w.key("applies").value(to_string(key.applies())).key("resume_must_match").value(key.resume_must_match);
    w.end_object();
  }
  w.end_array().end_object();
  return out + "\n";
}

/// The technique registry (kTechniques) as a markdown table, one row a technique in ladder order,
/// then memory.keep_attention, memory.keep_attention_blocks and memory.offload_kept_attention from
/// their schema entries (keys that spend memory for time: no rung).
std::string techniques_markdown() {
  std::ostringstream os;
  os << "| technique | key | studio label | what it trades | requires | ladder rung | an edit applies | applied in |\n"
     << "|---|---|---|---|---|---|---|---|\n";
  for (const Technique& t : kTechniques) {
    std::string requires_text;
    if (t.requires_on) requires_text = "`" + std::string(technique(*t.requires_on).key) + "`: " + t.requires_why;
    const KeySpec* spec = find_key_spec(t.key);
    os << "| `" << t.name << "` | `" << t.key << "` | " << t.label << " | " << t.trades << " | " << requires_text
       << " | `" << kLadderRungNames[static_cast<size_t>(t.ladder_rung)] << "` | "
       << (spec ? to_string(spec->applies()) : "?") << " | " << t.applied_in << " |\n";
  }
  const KeySpec* kept = find_key_spec("memory", "keep_attention");
  if (kept) {
    os << "\n`" << kept->full_name() << "` is a memory key, not a technique of the ladder: it spends memory to save "
       << "time (an edit applies: " << to_string(kept->applies()) << "). " << kept->doc << "\n";
  }
  // where and by how many blocks it is kept
  for (const char* name : {"keep_attention_blocks", "offload_kept_attention"}) {
    const KeySpec* spec = find_key_spec("memory", name);
    if (spec)
      os << "\n`" << spec->full_name() << "` says how it keeps (an edit applies: " << to_string(spec->applies())
         << "). " << spec->doc << "\n";
  }
  return os.str();
}

/// The planner's tensor kinds (tensor_kind_docs, one rule each) as a markdown table, in its order.
std::string tensor_kinds_markdown() {
  std::ostringstream os;
  os << "| kind | shape | what it is |\n|---|---|---|\n";
  for (const TensorKindDoc& kind : tensor_kind_docs())
    os << "| `" << kind.name << "` | `" << kind.shape << "` | " << kind.meaning << " |\n";
  return os.str();
}

int run_schema(int argc, char** argv, int first) {
  bool markdown = false;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--markdown") {
      markdown = true;
    } else if (arg == "--json" || arg == "--techniques-markdown" || arg == "--tensor-kinds-markdown") {
      if (argc - first != 1) {
        std::cerr << "odyssey schema: " << arg << " takes no other argument\n";
        return kExitBadInput;
      }
      std::cout << (arg == "--json"                  ? schema_json(RunConfig{})
                    : arg == "--techniques-markdown" ? techniques_markdown()
                                                     : tensor_kinds_markdown());
      return kExitOk;
    } else {
      std::cerr << "odyssey schema: unknown argument " << argv[i] << "\n";
      return kExitBadInput;
    }
  }
  const RunConfig defaults;  // the built-in defaults (flavor tiny, profile h100-sxm)
  std::ostringstream os;
  if (markdown) {
    os << "Top level: `description` (string): " << find_key_spec("", "description")->doc << "\n";
    for (const auto& section : config_sections()) {
      os << "\n**[" << section.name << "]** " << section.doc << "\n\n";
      os << "| key | type | range | default | meaning |\n|---|---|---|---|---|\n";
      for (const auto& key : config_schema()) {
        if (key.section != section.name) continue;
        std::string type = kind_name(key.kind);
        if (!key.word.empty()) type += " \\| \"" + std::string(key.word) + "\"";  // int | "auto"
        if (key.kind == KeyKind::Choice) {
          type.clear();
          for (size_t i = 0; i < key.choices.size(); ++i) type += (i ? " \\| " : "") + key.choices[i];
        }
        const std::string source = default_source(key);
        const std::string def = source == "built-in"   ? toml_literal(key, defaults)
                                : source == "required" ? source
                                                       : "from " + source;
        const std::string range = key.range ? key.range->interval(key.kind) : "";
        const std::string unit = key.range && !key.range->unit.empty() ? " " + std::string(key.range->unit) : "";
        os << "| `" << key.name << "` | " << type << " | " << range << unit << " | `" << def << "` | " << key.doc
           << (key.resume_must_match ? " Fixed for a resumed run (the checkpoint's state depends on it)." : "")
           << " |\n";
      }
    }
  } else {
    // the names padded to the longest and two spaces: a name is never cut, nor run into its type
    size_t width = 0;
    for (const auto& key : config_schema()) width = std::max(width, std::string_view(key.name).size() + 2);
    for (const auto& section : config_sections()) {
      os << "[" << section.name << "]  " << section.doc << "\n";
      for (const auto& key : config_schema()) {
        if (key.section != section.name) continue;
        std::string name(key.name);
        name.resize(width, ' ');
        std::string type = kind_name(key.kind);
        if (!key.word.empty()) type += "|\"" + std::string(key.word) + "\"";
        os << "  " << name << type << "\t" << key.doc << "\n";
      }
    }
  }
  std::cout << os.str();
  return kExitOk;
}

const CommandRegistration registration{
    Command{70, "schema", "schema [--markdown | --json | --techniques-markdown | --tensor-kinds-markdown]",
            "print every preset key (docs/presets.md; --json for tools), the technique table "
            "(docs/architecture.md) or the tensor kinds (docs/planner.md)",
            run_schema}};

}  // namespace
}  // namespace odyssey::cli
