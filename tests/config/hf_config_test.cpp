// config.json as a model base: the preset rules around model.hf_path (shape keys fixed, a named
// flavor must agree, rope keys override), config.json's own refusals, the rope frequency rule
// against hand-worked values, and config.json written back reading as the same model.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/config/hf_config.h"
#include "engine/config/preset.h"
#include "engine/config/rope.h"
#include "engine/config/validate.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

// A Llama 3.1-8B-shaped config.json (the published spelling) in a fresh directory.
std::string write_config(const std::string& name, const std::string& json) {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/hf_config_test_" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << json;
  return dir;
}

const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "vocab_size": 128256, "rms_norm_eps": 1e-05, "tie_word_embeddings": false,
  "max_position_embeddings": 131072, "rope_theta": 500000.0, "hidden_act": "silu",
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";

LoadedPreset load(const std::string& model_keys) {
  return load_preset_text("[model]\n" + model_keys + "\n[training]\nseq_len = \"128K\"\n", "hf.toml");
}

bool says(const LoadedPreset& p, const std::string& key, const std::string& text) {
  for (const auto& issue : p.issues)
    if (issue.key == key && issue.format().find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("hf config: a Llama 3.1 config.json is the model, and the llama3-8b flavor agrees with it", "[config][hf]") {
  const std::string dir = write_config("llama31", kLlama31);
  const LoadedPreset p = load("hf_path = \"" + dir + "\"");
  INFO((p.issues.empty() ? "" : p.issues.front().format()));
  REQUIRE(p.ok());
  CHECK(p.config.model.flavor == "hf");
  CHECK(p.config.model.head_dim == 128);
  CHECK(p.config.model.rope_scaling.kind == RopeScalingKind::Llama3);
  CHECK(p.config.model.rope_scaling.original_max_position == 8192);
  CHECK(first_shape_difference(p.config.model, *find_model_flavor("llama3-8b")) == std::nullopt);
  const LoadedPreset named = load("flavor = \"llama3-8b\"\nhf_path = \"" + dir + "\"");
  REQUIRE(named.ok());
  CHECK(named.config.model.flavor == "llama3-8b");
  CHECK(named.config.model.rope_scaling.factor == 8.0);  // from the file, not the flavor
  // Context extension: rope keys override the file; a shape key may not.
  const LoadedPreset extended = load("hf_path = \"" + dir + "\"\nrope_factor = 32.0\nrope_theta = 1e6");
  REQUIRE(extended.ok());
  CHECK(extended.config.model.rope_scaling.factor == 32.0);
  CHECK(extended.config.model.rope_theta == 1e6);
  const LoadedPreset reshaped = load("hf_path = \"" + dir + "\"\nn_layers = 16");
  CHECK(says(reshaped, "model.n_layers", "the checkpoint's tensors fix the shape"));
  const LoadedPreset wrong_flavor = load("flavor = \"llama3.2-1b\"\nhf_path = \"" + dir + "\"");
  CHECK(says(wrong_flavor, "model.flavor", "describes another shape"));
  CHECK(says(load("flavor = \"hf\""), "model.flavor", "needs model.hf_path"));
  CHECK(says(load("flavor = \"custom\"\nhf_path = \"" + dir + "\""), "model.flavor", "cannot be custom"));
}

TEST_CASE("hf config: a preset with model.hf_path and a named flavor saves its own rope and norm keys",
          "[config][hf]") {
  // config.json's rope_theta and rms_norm_eps differ from the llama3-8b flavor's (500000, 1e-5),
  // and the preset sets them back to the flavor's. The saver skipped keys equal to the flavor,
  // while the loader starts from config.json: the saved preset loaded as another model.
  std::string json = kLlama31;
  json.replace(json.find("\"rope_theta\": 500000.0"), std::strlen("\"rope_theta\": 500000.0"), "\"rope_theta\": 1e6");
  json.replace(json.find("\"rms_norm_eps\": 1e-05"), std::strlen("\"rms_norm_eps\": 1e-05"), "\"rms_norm_eps\": 1e-06");
  const std::string dir = write_config("llama31_other_rope", json);
  const LoadedPreset p =
      load("flavor = \"llama3-8b\"\nhf_path = \"" + dir + "\"\nrope_theta = 500000.0\nnorm_eps = 1e-5");
  INFO((p.issues.empty() ? "" : p.issues.front().format()));
  REQUIRE(p.ok());
  REQUIRE(find_model_flavor("llama3-8b")->rope_theta == 500000.0);
  REQUIRE(find_model_flavor("llama3-8b")->norm_eps == 1e-5);
  const std::string saved = preset_to_toml(p.config);
  const LoadedPreset back = load_preset_text(saved, "saved.toml");
  INFO(saved);
  REQUIRE(back.ok());
  CHECK(back.config.model.rope_theta == 500000.0);
  CHECK(back.config.model.norm_eps == 1e-5);
  CHECK(preset_to_toml(back.config) == saved);
  // The shape keys stay implied: config.json fixes them and the flavor matches it.
  CHECK(saved.find("n_layers =") == std::string::npos);
}

TEST_CASE("hf config: what Odyssey cannot run exactly is refused naming the file, key and value", "[config][hf]") {
  struct Case {
    const char* replace;
    const char* with;
    const char* says;
  };
  const Case cases[] = {
      {"\"model_type\": \"llama\"", "\"model_type\": \"gemma2\"",
       "\"model_type\" = \"gemma2\": is not an architecture"},
      {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "\"hidden_act\" = \"gelu\""},
      {"\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5", "must divide num_attention_heads = 32"},
      {"\"num_hidden_layers\": 32", "\"num_hidden_layers\": -1", "\"num_hidden_layers\" = -1: must be a whole number"},
      {"\"rope_type\": \"llama3\"", "\"rope_type\": \"dynamic\"", "\"dynamic\": is not a rope type Odyssey runs"},
      {"\"factor\": 8.0", "\"factor\": 0.5", "model.rope_factor must be at least 1"},
      {"\"hidden_size\": 4096,", "", "\"hidden_size\" = (missing): is required"},
      // transformers refuses a scaling without its required keys: no default stands in for them
      {"\"factor\": 8.0, ", "", "\"factor\" = (missing): is required"},
      {"\"high_freq_factor\": 4.0,", "", "\"high_freq_factor\" = (missing): is required"},
      {"\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,\n                   "
       "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"",
       "\"rope_type\": \"linear\"", "\"factor\" = (missing): is required"},
      {"\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,\n                   "
       "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"",
       "\"rope_type\": \"yarn\", \"original_max_position_embeddings\": 8192", "\"factor\" = (missing): is required"},
      // accepted and ignored before: a model transformers computes otherwise
      {"\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\", \"truncate\": false",
       "\"rope_scaling.truncate\" = false: is not implemented"},
      {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"silu\", \"attention_dropout\": 0.5",
       "\"attention_dropout\" = 0.5: Odyssey's attention has no dropout"},
  };
  for (const Case& c : cases) {
    std::string json = kLlama31;
    json.replace(json.find(c.replace), std::string(c.replace).size(), c.with);
    const std::string dir = write_config("bad", json);
    HfConfigError error;
    INFO(c.with);
    CHECK(!read_hf_config(dir, &error));
    CHECK_THAT(error.format(), Catch::Contains(dir + "/config.json") && Catch::Contains(c.says));
    const LoadedPreset p = load("hf_path = \"" + dir + "\"");
    CHECK(says(p, "model.hf_path", c.says));
  }
  HfConfigError error;
  CHECK(!read_hf_config("/nonexistent/model", &error));
  CHECK_THAT(error.format(), Catch::Contains("is not a directory"));
  const std::string broken = write_config("not_json", "{ \"model_type\": ");
  CHECK(!read_hf_config(broken, &error));
  CHECK_THAT(error.format(), Catch::Contains("not a JSON object"));
}

TEST_CASE("hf config: rope_parameters and rope_scaling both present must agree, as transformers takes rope_scaling",
          "[config][hf]") {
  // Odyssey read rope_parameters and ignored rope_scaling, while transformers 5 lets rope_scaling
  // override it: a config edited by hand trained unscaled positions where transformers scales.
  std::string json = kLlama31;
  json.replace(json.find("\"rope_theta\""), 0,
               "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0}, ");
  HfConfigError error;
  CHECK(!read_hf_config(write_config("rope_both", json), &error));
  CHECK_THAT(error.format(), Catch::Contains("\"rope_parameters.rope_type\" = \"default\"") &&
                                 Catch::Contains("differs from rope_scaling.rope_type = \"llama3\"") &&
                                 Catch::Contains("keep one of the two keys"));
  // transformers replaces rope_parameters whole: a key only rope_parameters sets is dropped, and
  // rope_theta is the top level's
  struct Case {
    const char* parameters;
    const char* says;
  };
  for (const Case& c :
       {Case{"\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
             "\"original_max_position_embeddings\": 8192, \"rope_theta\": 10000.0",
             "\"rope_parameters.rope_theta\" = 10000.0: differs from the rope_theta transformers takes"},
        Case{"\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
             "\"original_max_position_embeddings\": 8192, \"rope_theta\": 500000.0, \"attention_factor\": 1.0",
             "\"rope_parameters.attention_factor\" = 1.0: differs from rope_scaling.attention_factor = (missing)"}}) {
    json = kLlama31;
    json.replace(json.find("\"rope_theta\""), 0, std::string("\"rope_parameters\": {") + c.parameters + "}, ");
    INFO(c.parameters);
    CHECK(!read_hf_config(write_config("rope_both_case", json), &error));
    CHECK_THAT(error.format(), Catch::Contains(c.says));
  }
  // the same parameters under both keys (the old name "type" for "rope_type" too) are one scaling
  json = kLlama31;
  json.replace(json.find("\"rope_theta\""), 0,
               "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
               "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_theta\": 500000.0}, ");
  json.replace(json.find("\"rope_type\": \"llama3\"}}"), 11, "\"type\"");
  const auto agreed = read_hf_config(write_config("rope_both_same", json), &error);
  INFO(error.format());
  REQUIRE(agreed);
  CHECK(agreed->rope_scaling.kind == RopeScalingKind::Llama3);
  CHECK(agreed->rope_scaling.factor == 8.0);
}

TEST_CASE("hf config: a value of config.json that a rule refuses is named with that file, at model.hf_path",
          "[config][hf]") {
  // The preset sets no head_dim: the odd one is config.json's, so the issue points there, not at [model].
  std::string json = kLlama31;
  json.replace(json.find("\"hidden_size\": 4096,"), std::string("\"hidden_size\": 4096,").size(),
               "\"hidden_size\": 4096, \"head_dim\": 7,");
  const std::string dir = write_config("odd_head_dim", json);
  const LoadedPreset p = load("hf_path = \"" + dir + "\"");
  int named = 0;
  for (const auto& issue : p.issues)
    if (issue.key == "model.head_dim") {
      ++named;
      CHECK(issue.loc.line == 2);  // hf_path's line
      CHECK_THAT(issue.format(),
                 Catch::Contains("must be even") && Catch::Contains("(the value of " + dir + "/config.json)"));
    }
  CHECK(named == 1);
}

TEST_CASE("hf config: the original context is read where transformers reads it", "[config][hf]") {
  // transformers 5 gives a top-level original_max_position_embeddings (Phi-3's spelling) priority
  // over the rope parameters' own, and YaRN without one takes max_position_embeddings, absent the
  // architecture's default (LlamaConfig 2048, Qwen3Config 32768): Odyssey read the inner key only,
  // and 8192 for a missing max_position_embeddings, a model with other frequencies than transformers'.
  auto read = [](const std::string& name, const std::string& replace, const std::string& with) {
    std::string json = kLlama31;
    json.replace(json.find(replace), replace.size(), with);
    HfConfigError error;
    const std::optional<ModelConfig> m = read_hf_config(write_config(name, json), &error);
    INFO(error.format());
    REQUIRE(m.has_value());
    return m->rope_scaling.original_max_position;
  };
  CHECK(read("top_original", "\"rope_theta\": 500000.0,",
             "\"rope_theta\": 500000.0, \"original_max_position_embeddings\": 4096,") == 4096);
  const std::string yarn_without_original = "\"rope_type\": \"yarn\"";
  const std::string llama3_scaling =
      "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,\n                   "
      "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"";
  CHECK(read("yarn_max_positions", llama3_scaling, "\"factor\": 4.0, " + yarn_without_original) == 131072);
  CHECK(read("yarn_llama_default", "\"max_position_embeddings\": 131072, ", "") == 8192);  // its own key still
  std::string no_max = kLlama31;
  no_max.replace(no_max.find("\"max_position_embeddings\": 131072, "), 35, "");
  no_max.replace(no_max.find(llama3_scaling), llama3_scaling.size(), "\"factor\": 4.0, " + yarn_without_original);
  HfConfigError error;
  const std::optional<ModelConfig> llama = read_hf_config(write_config("yarn_no_max_llama", no_max), &error);
  REQUIRE(llama.has_value());
  CHECK(llama->rope_scaling.original_max_position == 2048);
  std::string qwen3 = no_max;
  qwen3.replace(qwen3.find("\"model_type\": \"llama\""), 21, "\"model_type\": \"qwen3\"");
  const std::optional<ModelConfig> q = read_hf_config(write_config("yarn_no_max_qwen3", qwen3), &error);
  REQUIRE(q.has_value());
  CHECK(q->rope_scaling.original_max_position == 32768);
}

TEST_CASE("hf config: a scaling set over a config.json without one stretches the model's own context", "[config][hf]") {
  // `--set model.rope_scaling=yarn` over a model trained at 4K took the key's default original
  // context, 8K (Llama 3's), and trained other frequencies than the same scaling written into its
  // config.json (which transformers reads as its max_position_embeddings).
  const std::string scaling =
      ",\n  \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,\n                 "
      "  "
      "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}";
  std::string plain = kLlama31;
  plain.replace(plain.find(scaling), scaling.size(), "");
  plain.replace(plain.find("\"max_position_embeddings\": 131072"), 33, "\"max_position_embeddings\": 4096");
  const std::string dir = write_config("unscaled", plain);
  auto original = [&](const std::string& keys) {
    const LoadedPreset p = load("hf_path = \"" + dir + "\"\n" + keys);
    for (const auto& issue : p.issues) INFO(issue.format());
    REQUIRE(p.ok());
    return p.config.model.rope_scaling.original_max_position;
  };
  CHECK(original("rope_scaling = \"yarn\"\nrope_factor = 4.0") == 4096);
  CHECK(original("rope_scaling = \"llama3\"\nrope_factor = 4.0") == 4096);
  CHECK(original("rope_scaling = \"yarn\"\nrope_factor = 4.0\nrope_original_max_position = \"2K\"") == 2048);
  // a config.json with a scaling of its own keeps its original context (Llama 3.1's 8K)
  const std::string scaled = write_config("scaled", kLlama31);
  const LoadedPreset own = load("hf_path = \"" + scaled + "\"\nrope_scaling = \"yarn\"\nrope_factor = 4.0");
  REQUIRE(own.ok());
  CHECK(own.config.model.rope_scaling.original_max_position == 8192);
  // no max_position_embeddings: transformers' default of the architecture
  std::string qwen3 = plain;
  qwen3.replace(qwen3.find("\"max_position_embeddings\": 4096, "), 33, "");
  qwen3.replace(qwen3.find("\"model_type\": \"llama\""), 21, "\"model_type\": \"qwen3\"");
  const std::string q = write_config("unscaled_qwen3", qwen3);
  const LoadedPreset from_qwen3 = load("hf_path = \"" + q + "\"\nrope_scaling = \"yarn\"\nrope_factor = 4.0");
  REQUIRE(from_qwen3.ok());
  CHECK(from_qwen3.config.model.rope_scaling.original_max_position == 32768);
}

TEST_CASE("hf config: an original context above the model's pretraining context is noted, naming it", "[config][hf]") {
  // Valid (transformers takes it), but the scaling then takes positions the model never saw as
  // pretrained ones: a note names the model's own context and where it was read.
  std::string plain = kLlama31;
  const std::string scaling =
      ",\n  \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,\n                 "
      "  "
      "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}";
  plain.replace(plain.find(scaling), scaling.size(), "");
  plain.replace(plain.find("\"max_position_embeddings\": 131072"), 33, "\"max_position_embeddings\": 4096");
  const std::string unscaled = write_config("noted_unscaled", plain), scaled = write_config("noted_scaled", kLlama31);
  auto notes = [&](const std::string& dir, const std::string& keys) {
    const LoadedPreset p = load("hf_path = \"" + dir + "\"\n" + keys);
    for (const auto& issue : p.issues) INFO(issue.format());
    REQUIRE(p.ok());
    std::string all;
    for (const auto& note : config_notes(p.config)) all += note + "\n";
    return all;
  };
  const std::string yarn = "rope_scaling = \"yarn\"\nrope_factor = 4.0\n";
  CHECK_THAT(notes(unscaled, yarn + "rope_original_max_position = \"8K\""),
             Catch::Contains("model.rope_original_max_position = 8K is above the context the model was pretrained "
                             "at, 4K (" +
                             unscaled + "/config.json's max_position_embeddings)"));
  CHECK(notes(unscaled, yarn).empty());  // the model's own 4K, taken
  CHECK(notes(unscaled, yarn + "rope_original_max_position = \"2K\"").empty());
  // Llama 3.1: pretrained at its scaling's 8K, though it advertises 128K
  CHECK_THAT(notes(scaled, "rope_original_max_position = \"16K\""),
             Catch::Contains("is above the context the model was pretrained at, 8K (" + scaled +
                             "/config.json's original_max_position_embeddings)"));
  CHECK(notes(scaled, "").empty());
}

TEST_CASE("hf config: rope frequencies follow the published rules, worked by hand", "[config][hf]") {
  ModelConfig m;
  m.head_dim = 8;
  m.rope_theta = 10000.0;
  const std::vector<double> base = rope_inv_freq(m);  // 10000^(-2i/8): 1, 0.1, 0.01, 0.001
  REQUIRE(base.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(base[i] == Approx(std::pow(10.0, -i)).epsilon(1e-15));
  m.rope_scaling = RopeScaling{.kind = RopeScalingKind::Linear, .factor = 4.0};
  for (int i = 0; i < 4; ++i) CHECK(rope_inv_freq(m)[i] == Approx(base[i] / 4.0).epsilon(1e-15));
  // llama3 over an original context of 100 with low 1, high 4: wavelengths 2 pi / f are 6.28,
  // 62.8, 628, 6283. Below 100/4 = 25 kept, above 100 divided by 8, 62.8 blended with
  // smooth = (100 / 62.8 - 1) / (4 - 1) = 0.19718...
  m.rope_scaling = RopeScaling{.kind = RopeScalingKind::Llama3, .factor = 8.0, .original_max_position = 100};
  const std::vector<double> llama3 = rope_inv_freq(m);
  const double smooth = (100.0 / (2 * M_PI / 0.1) - 1.0) / 3.0;
  CHECK(llama3[0] == Approx(1.0).epsilon(1e-15));
  CHECK(llama3[1] == Approx((1 - smooth) * 0.1 / 8 + smooth * 0.1).epsilon(1e-14));
  CHECK(llama3[2] == Approx(0.01 / 8).epsilon(1e-15));
  CHECK(llama3[3] == Approx(0.001 / 8).epsilon(1e-15));
  CHECK(rope_attention_factor(m) == 1.0);
  m.rope_scaling = RopeScaling{.kind = RopeScalingKind::Yarn, .factor = 4.0, .original_max_position = 100};
  CHECK(rope_attention_factor(m) == Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-15));
  const std::vector<double> yarn = rope_inv_freq(m);
  CHECK(yarn[0] == Approx(1.0).epsilon(1e-15));        // fastest dimension: extrapolated (kept)
  CHECK(yarn[3] == Approx(0.001 / 4).epsilon(1e-15));  // slowest: interpolated by the factor
}

TEST_CASE("hf config: config.json written from a model reads back as the same model", "[config][hf]") {
  for (const char* flavor : {"llama3.2-1b", "llama3-8b", "qwen3-32b"}) {
    ModelConfig m = *find_model_flavor(flavor);
    if (std::string(flavor) == "llama3-8b")
      m.rope_scaling = RopeScaling{.kind = RopeScalingKind::Yarn, .factor = 4.0, .attention_factor = 1.2};
    const std::string dir = write_config(std::string("roundtrip_") + flavor, hf_config_json(m, "bfloat16", 131072));
    HfConfigError error;
    const auto back = read_hf_config(dir, &error);
    INFO(flavor << ": " << error.format());
    REQUIRE(back.has_value());
    CHECK(first_shape_difference(*back, m) == std::nullopt);
    CHECK(back->rope_theta == m.rope_theta);
    CHECK(back->norm_eps == m.norm_eps);
    // A config.json without a scaling states no original context (its max_position_embeddings is
    // the context a scaling set over it stretches): the qwen3-32b flavor's 32K is not carried.
    RopeScaling expected = m.rope_scaling;
    if (expected.kind == RopeScalingKind::None)
      expected.original_max_position = back->rope_scaling.original_max_position;
    CHECK(back->rope_scaling == expected);
  }
}
