// The configuration panel's logic: the context-length parser and log slider, validator messages
// filed under their fields, flavors and profiles, heads-per-stage choices, change classification,
// and loading a preset that breaks a rule.
#include <catch2/catch.hpp>

#include <fstream>

#include "app/studio/app_state.h"
#include "app/studio/config_edit.h"
#include "engine/config/preset.h"
#include "engine/config/validate.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::studio;

TEST_CASE("context length parser accepts counts and K/M suffixes", "[studio][config]") {
  std::string err;
  CHECK(parse_context_length("512K", &err) == 524288);
  CHECK(err.empty());
  CHECK(parse_context_length("3M", &err) == 3 * 1024 * 1024);
  CHECK(parse_context_length("1.5M", &err) == 1572864);
  CHECK(parse_context_length(" 131072 ", &err) == 131072);
  CHECK(parse_context_length("131_072", &err) == 131072);
  CHECK(parse_context_length("16m", &err) == 16 * 1024 * 1024);
}

TEST_CASE("context length parser explains what it refuses", "[studio][config]") {
  std::string err;
  CHECK_FALSE(parse_context_length("abc", &err));
  CHECK(err == "\"abc\" is not a token count: write 131072, 512K, 1.5M or 3M (K = 1024)");
  CHECK_FALSE(parse_context_length("3MB", &err));
  CHECK(err.find("\"3MB\" is not a token count") == 0);
  CHECK_FALSE(parse_context_length("", &err));
  CHECK(err == "type a token count such as 131072, 512K or 3M");
  CHECK_FALSE(parse_context_length("1", &err));
  CHECK(err == "needs at least 2 tokens (one input and one label)");
  CHECK_FALSE(parse_context_length("-4K", &err));
}

TEST_CASE("context slider snaps to 2^k and 1.5 x 2^k up to 16M", "[studio][config]") {
  for (int64_t tokens : {int64_t{128}, int64_t{512} << 10, int64_t{768} << 10, int64_t{1} << 20, int64_t{3} << 20,
                         int64_t{12} << 20, int64_t{16} << 20})
    CHECK(slider_to_context(context_to_slider(tokens)) == tokens);
  CHECK(slider_to_context(99.f) == kContextSliderMax);
  CHECK(slider_to_context(0.f) == kContextSliderMin);
  int64_t prev = 0;
  for (float v = 7.f; v <= 24.f; v += 0.01f) {
    const int64_t t = slider_to_context(v);
    CHECK(t >= prev);
    prev = t;
  }
  CHECK(prev == int64_t{16} << 20);
}

TEST_CASE("the heads-per-stage slider names a value it does not offer as invalid, not as its handle's",
          "[studio][config]") {
  // tiny-cpu: 8 heads over Ulysses 2, stages of 2, 4 or 8 heads. heads_per_stage = 3 showed the
  // handle's "2 heads (4 stages)" beside the field's message that 3 is not a valid value.
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  RunConfig c = state.config;
  REQUIRE(heads_per_stage_choices(c) == std::vector<int64_t>{2, 4, 8});
  c.memory.heads_per_stage = 4;
  CHECK(heads_per_stage_text(c, 4, false) == "4 heads (2 stages)");
  c.memory.heads_per_stage = 8;
  CHECK(heads_per_stage_text(c, 8, false) == "8 heads (1 stage)");
  c.memory.heads_per_stage = 3;
  CHECK(heads_per_stage_text(c, 2, false) == "3 heads (invalid here)");
  c.memory.heads_per_stage = kHeadsPerStageAuto;
  CHECK(heads_per_stage_text(c, 2, false) == "2 heads (4 stages)");
  CHECK(heads_per_stage_text(c, 8, true) == "none: standard attention at this length");
}

TEST_CASE("the configuration panel holds odyssey check's notes of a valid config", "[studio][config]") {
  // A CPU run under a GPU profile planned a 2 GiB line above a measurement of a few MiB, unexplained
  // in the studio: `odyssey check` says why, and now the panel does.
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  refresh_validation(state);
  CHECK(state.edit.notes.empty());
  state.config.hardware = *find_hardware_profile("h100-sxm");
  state.config.hardware.profile = "h100-sxm";
  refresh_validation(state);
  REQUIRE(state.edit.issues.empty());
  REQUIRE(state.edit.notes.size() == 1);
  CHECK(state.edit.notes[0] == config_notes(state.config)[0]);
  CHECK_THAT(state.edit.notes[0], Catch::StartsWith("training.device = \"cpu\" takes the CPU path"));
}

TEST_CASE("validator issues are filed under the field that shows them", "[studio][config]") {
  RunConfig cfg;
  cfg.parallel.world_size = 4;
  cfg.parallel.ulysses_degree = 3;  // divides neither heads nor world size
  cfg.training.beta1 = 2;           // no field in the panel
  const auto issues = validate(cfg);
  REQUIRE(issues.size() == 4);
  const FieldMessages m = file_issues(issues, {"parallel.world_size", "parallel.ulysses_degree", "training.seq_len"});
  REQUIRE(m.find("parallel.ulysses_degree"));
  CHECK(m.find("parallel.ulysses_degree")->front().find("must divide model.n_heads = 8") == 0);
  REQUIRE(m.find("parallel.world_size"));
  REQUIRE(m.unplaced.size() == 1);
  CHECK(m.unplaced[0] == "training.beta1 = 2.0: must be in [0, 1)");
  CHECK(m.count() == issues.size());
}

TEST_CASE("a preset that breaks a rule loads and shows the rule at its field", "[studio][config]") {
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/tests/fixtures/bad_hps_multiple.toml"));
  const auto* msgs = state.edit.messages.find("memory.heads_per_stage");
  REQUIRE(msgs);
  CHECK(msgs->front() ==
        "must be a multiple of parallel.ulysses_degree = 8 so that each stage gives every rank whole heads "
        "(valid values here: 8, 16, 32)");
  CHECK(heads_per_stage_choices(state.config) == std::vector<int64_t>{8, 16, 32});
}

TEST_CASE("a preset that does not parse leaves the config as it was", "[studio][config]") {
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  const RunConfig before = state.config;
  CHECK_FALSE(
      load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/tests/fixtures/bad_syntax_unclosed_table.toml"));
  CHECK(state.config == before);
  CHECK(state.edit.preset_message_error);
  CHECK(state.edit.preset_message.find("Could not load") == 0);
  CHECK_FALSE(load_preset_into(state, "/nonexistent/x.toml"));
  CHECK(state.config == before);
}

TEST_CASE("a file with problems never reads as a valid configuration", "[studio][config]") {
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  bool valid = false;
  CHECK(validity_headline(state.edit, &valid) == "Valid configuration");
  CHECK(valid);
  // An empty file parses, lacks the required keys, and the fields fall back to defaults: the
  // headline says so instead of "Valid configuration" under "Loaded ... with problems".
  const std::string empty = std::string(ODYSSEY_BINARY_DIR) + "/config_edit_test_empty.toml";
  std::ofstream(empty, std::ios::trunc).flush();
  REQUIRE(load_preset_into(state, empty));
  CHECK(state.edit.preset_message.find("with problems") != std::string::npos);
  CHECK(state.edit.file_problems.size() == 2);  // model.flavor and training.seq_len missing
  CHECK(validity_headline(state.edit, &valid) ==
        "2 problems in the loaded file (listed above): the fields show defaults in their place until you fix and save");
  CHECK_FALSE(valid);
  // /dev/null is no preset file at all: refused, the config as it was.
  const RunConfig before = state.config;
  CHECK_FALSE(load_preset_into(state, "/dev/null"));
  CHECK(state.edit.preset_message.find("is not a regular file") != std::string::npos);
  CHECK(state.config == before);
}

TEST_CASE("flavors and profiles replace their table and report modifications", "[studio][config]") {
  RunConfig cfg;
  REQUIRE(apply_model_flavor(cfg, "llama3-8b"));
  CHECK(cfg.model.n_layers == 32);
  CHECK_FALSE(model_differs_from_flavor(cfg));
  cfg.model.n_layers = 16;
  CHECK(model_differs_from_flavor(cfg));
  CHECK_FALSE(apply_model_flavor(cfg, "no-such-model"));
  REQUIRE(apply_hardware_profile(cfg, "h200"));
  CHECK_FALSE(hardware_differs_from_profile(cfg));
  cfg.hardware.device_memory_gib = 10;
  CHECK(hardware_differs_from_profile(cfg));
  // A profile with edited numbers saves as its base and the keys that differ, and loads back as
  // the same config. The studio's "custom" profile could not be saved at all (hardware.profile
  // must be a named one): it is no choice any more.
  CHECK_FALSE(apply_hardware_profile(cfg, "custom"));
  CHECK(cfg.hardware.profile == "h200");
  const LoadedPreset back = load_preset_text(preset_to_toml(cfg), "edited.toml");
  REQUIRE(back.ok());
  CHECK(back.config.hardware.device_memory_gib == 10);
  CHECK(preset_to_toml(back.config) == preset_to_toml(cfg));
}

TEST_CASE("heads-per-stage choices are the validator's valid values", "[studio][config]") {
  RunConfig cfg;  // tiny: 8 heads
  cfg.parallel.world_size = 2;
  cfg.parallel.ulysses_degree = 2;
  CHECK(heads_per_stage_choices(cfg).empty());  // Untied Ulysses off
  cfg.memory.untied_ulysses = true;
  CHECK(heads_per_stage_choices(cfg) == std::vector<int64_t>{2, 4, 8});
  for (int64_t v : heads_per_stage_choices(cfg)) {
    cfg.memory.heads_per_stage = v;
    CHECK(validate(cfg).empty());
  }
  cfg.parallel.ulysses_degree = 3;
  CHECK(heads_per_stage_choices(cfg).empty());
}

TEST_CASE("changes are classified as live, restart or plan-only", "[studio][config]") {
  RunConfig a;
  RunConfig b = a;
  CHECK(classify_change(a, b).kind == ChangeKind::None);
  b.memory.tiled_loss = true;
  auto c = classify_change(a, b);
  CHECK(c.kind == ChangeKind::Live);
  CHECK(c.summary == "memory.tiled_loss: false -> true");
  b.hardware.bf16_tflops = 1;
  c = classify_change(a, b);
  CHECK(c.kind == ChangeKind::Live);
  CHECK(c.keys.size() == 2);
  b.parallel.world_size = 4;
  c = classify_change(a, b);
  CHECK(c.kind == ChangeKind::Restart);
  CHECK(c.summary == "parallel.world_size: 1 -> 4; memory.tiled_loss: false -> true");
  RunConfig h = a;
  h.hardware.bf16_tflops = 1;
  CHECK(classify_change(a, h).kind == ChangeKind::PlanOnly);
  RunConfig t = a;
  t.training.seq_len = 3 << 20;
  c = classify_change(a, t);
  CHECK(c.kind == ChangeKind::Restart);
  CHECK(c.summary == "training.seq_len: 2K -> 3M");
}

TEST_CASE("the memory section's toggles are the registry's next-step techniques", "[studio][config]") {
  std::vector<std::string> keys;
  for (const Technique& t : live_toggles()) keys.push_back(t.key);
  CHECK(keys == std::vector<std::string>{"memory.activation_checkpointing", "memory.offload_activations",
                                         "memory.tiled_mlp", "memory.tiled_loss", "memory.untied_ulysses",
                                         "memory.offload_optimizer"});
  CHECK(applies(technique(TechniqueId::Fsdp)) == ApplyWhen::Restart);  // drawn in the parallel section
}

TEST_CASE("an edit's kind is the schema's rule for its key, for every key", "[studio][config]") {
  // The Session's live apply reads the same rule (KeySpec::applies): a key the studio calls live or
  // plan-only never makes the Session ask for a restart.
  for (const KeySpec& spec : config_schema()) {
    INFO(spec.full_name());
    RunConfig edited;
    const RunConfig running;
    bool changed = false;
    std::vector<RawValue> candidates = {RawValue::boolean(true), RawValue::boolean(false), RawValue::integer(3),
                                        RawValue::integer(7),    RawValue::floating(0.5),  RawValue::integer(8192),
                                        RawValue::string("x")};
    for (const std::string& choice : spec.choices) candidates.push_back(RawValue::string(choice));
    for (const RawValue& candidate : candidates) {
      std::string rule;
      auto value = coerce_value(spec, candidate, &rule);
      if (!value) continue;
      spec.set(edited, *value);
      if (value_text(spec, edited) != value_text(spec, running)) {
        changed = true;
        break;
      }
    }
    REQUIRE(changed);
    const ConfigChange change = classify_change(running, edited);
    const ChangeKind expected = spec.applies() == ApplyWhen::NextStep   ? ChangeKind::Live
                                : spec.applies() == ApplyWhen::PlanOnly ? ChangeKind::PlanOnly
                                                                        : ChangeKind::Restart;
    CHECK(change.kind == expected);
  }
  CHECK(find_key_spec("hardware.bf16_tflops")->applies() == ApplyWhen::PlanOnly);
  CHECK(find_key_spec("memory.heads_per_stage")->applies() == ApplyWhen::NextStep);
  CHECK(find_key_spec("parallel.fsdp")->applies() == ApplyWhen::Restart);
}
