// odyssey check PRESET...: validates each preset (with any --set overrides) and its data file as
// `odyssey train` opens it, prints every problem as FILE:LINE:COL: key = value: rule (hint), and
// for a valid one the RoPE it runs (describe_rope) and its notes (config_notes: what it does that
// its author may not expect). Exit 0 when all are valid, else 2. A model.hf_path directory's
// weights are opened as train opens them (model_weights_check.h: in odyssey-engine, to which
// `odyssey` hands such a check).
#include <iostream>

#include "app/cli/cli.h"
#include "app/cli/model_weights_check.h"
#include "engine/config/rope.h"
#include "engine/config/sizes.h"
#include "engine/config/validate.h"
#include "engine/util/json.h"

namespace odyssey::cli {

ModelWeightsCheck& model_weights_check() {
  static ModelWeightsCheck check = nullptr;
  return check;
}

namespace {

int run_check(int argc, char** argv, int first) {
  ArgSpec spec;
  spec.set = true;
  spec.json = true;
  spec.max_positional = -1;
  auto args = parse_args("check", spec, argc, argv, first, std::cerr);
  if (!args) return kExitBadInput;
  bool all_ok = true;
  std::string json;
  JsonWriter w(json);
  w.begin_object().key("presets").begin_array();
  std::vector<LoadedPreset> presets;
  for (const auto& path : args->positional) {
    presets.push_back(load_preset(path, args->overrides));
    // A model directory's weights are read where LibTorch is: before anything is printed here.
    if (presets.back().ok() && !presets.back().config.model.hf_path.empty() && !model_weights_check())
      return kRunInEngine;
  }
  for (size_t p = 0; p < presets.size(); ++p) {
    const std::string& path = args->positional[p];
    LoadedPreset& loaded = presets[p];
    if (loaded.ok())  // what train reads besides the preset: its data file and weights, with train's checks
      for (auto check : {check_dataset, model_weights_check()})
        if (check)
          if (std::optional<ConfigIssue> issue = check(loaded)) loaded.issues.push_back(std::move(*issue));
    all_ok = all_ok && loaded.ok();
    w.begin_object().key("path").value(path).key("ok").value(loaded.ok()).key("issues").begin_array();
    for (const auto& issue : loaded.issues) {
      w.begin_object()
          .key("file")
          .value(issue.loc.file)
          .key("line")
          .value(issue.loc.line)
          .key("col")
          .value(issue.loc.col)
          .key("key")
          .value(issue.key)
          .key("value")
          .value(issue.value)
          .key("rule")
          .value(issue.rule)
          .key("hint")
          .value(issue.hint)
          .key("message")
          .value(issue.format())
          .end_object();
      if (!args->json) std::cerr << issue.format() << "\n";
    }
    w.end_array();
    const std::vector<std::string> notes = loaded.ok() ? config_notes(loaded.config) : std::vector<std::string>{};
    w.key("notes").begin_array();
    for (const auto& note : notes) w.value(note);
    w.end_array().key("rope");
    if (loaded.ok())
      write_rope_json(w, loaded.config.model);
    else
      w.null();
    w.end_object();
    if (!args->json && loaded.ok()) {
      const RunConfig& c = loaded.config;
      std::cout << path << ": ok (" << c.model.flavor << ", " << format_size(c.training.seq_len) << " tokens, "
                << c.parallel.world_size << " rank" << (c.parallel.world_size == 1 ? "" : "s") << ", "
                << c.hardware.profile << ")\n";
      std::cout << path << ": " << describe_rope(c.model) << "\n";
      for (const auto& note : notes) std::cout << path << ": note: " << note << "\n";
    }
  }
  w.end_array().key("ok").value(all_ok).end_object();
  if (args->json) std::cout << json << "\n";
  return all_ok ? kExitOk : kExitBadInput;
}

const CommandRegistration registration{Command{10, "check", "check PRESET... [--set k=v]... [--json]",
                                               "validate presets; print every problem as FILE:LINE:COL, exit 2 if any",
                                               run_check}};

}  // namespace
}  // namespace odyssey::cli
