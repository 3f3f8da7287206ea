// config.json <-> ModelConfig (see hf_config.h). Every value is checked for its type and range
// before it is used, and the rope parameters go through the preset's own rope rule.
// defines: HfConfigError::format, read_hf_config, hf_config_json
#include "engine/config/hf_config.h"

#include <cmath>

#include "engine/config/rope.h"
#include "engine/util/files.h"
#include "engine/util/json_read.h"

namespace odyssey {

std::string HfConfigError::format() const {
  if (key.empty()) return file + ": " + rule;
  return file + ": \"" + key + "\" = " + value + ": " + rule;
}

namespace {

// Real config.json files are a few KB (Llama 3.1 405B's: 1 KB); 1 MiB leaves room for any
// comments or extra keys a tool adds and refuses a link to /dev/zero or a log file at once.
constexpr int64_t kMaxConfigBytes = 1 << 20;

// A config.json as read: nlohmann::json (keys in a std::map: a document with tens of thousands of
// keys costs n log n, where ordered_json's linear scan per key would take minutes on 1 MiB).
using ReadJson = nlohmann::json;

/// A value as written, for messages: scalars in full, containers as [...] and {...}.
std::string value_text(const ReadJson& value) {
  if (value.is_array()) return "[...]";
  if (value.is_object()) return "{...}";
  return value.dump(-1, ' ', false, ReadJson::error_handler_t::replace);
}

/// Reads config.json's keys, failing with the first rule a value breaks.
class ConfigReader {
 public:
  ConfigReader(const ReadJson& json, std::string file) : json_(json), file_(std::move(file)) {}

  bool has(const ReadJson& obj, const char* key) const { return obj.contains(key) && !obj.at(key).is_null(); }
  bool has(const char* key) const { return has(json_, key); }

  /// A whole number in [lo, hi]; `fallback` when absent (nullopt: required).
  std::optional<int64_t> integer(const ReadJson& obj, const char* key, int64_t lo, int64_t hi,
                                 std::optional<int64_t> fallback = std::nullopt) {
    if (!has(obj, key)) return fallback ? fallback : fail(key, "(missing)", "is required");
    const ReadJson& v = obj.at(key);
    // 8.0 counts as 8: configs written by hand often carry floats for integer fields.
    const bool whole = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (!whole || v.get<double>() < static_cast<double>(lo) || v.get<double>() > static_cast<double>(hi))
      return fail(key, value_text(v),
                  "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
  }
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi,
                                 std::optional<int64_t> fallback = std::nullopt) {
    return integer(json_, key, lo, hi, fallback);
  }

  /// A number in (0, hi]; `fallback` when absent.
  std::optional<double> positive(const ReadJson& obj, const char* key, double hi,
                                 std::optional<double> fallback = std::nullopt) {
    if (!has(obj, key)) return fallback ? fallback : fail(key, "(missing)", "is required");
    const ReadJson& v = obj.at(key);
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > hi)
      return fail(key, value_text(v), "must be a number above 0 and at most " + value_text(ReadJson(hi)));
    return v.get<double>();
  }
  std::optional<double> positive(const char* key, double hi, std::optional<double> fallback = std::nullopt) {
    return positive(json_, key, hi, fallback);
  }

  std::optional<bool> boolean(const char* key, bool fallback) {
    if (!has(key)) return fallback;
    const ReadJson& v = json_.at(key);
    if (!v.is_boolean()) {
      fail(key, value_text(v), "must be true or false");
      return std::nullopt;
    }
    return v.get<bool>();
  }

  /// Fails unless `key` is absent, null or equal to `expected` (a feature Odyssey does not run).
  bool absent_or(const char* key, const ReadJson& expected, const std::string& why) {
    if (!has(key) || json_.at(key) == expected) return true;
    fail(key, value_text(json_.at(key)), why);
    return false;
  }

  std::nullopt_t fail(const std::string& key, const std::string& value, const std::string& rule) {
    if (!error_) error_ = HfConfigError{file_, key, value, rule};
    return std::nullopt;
  }
  const std::optional<HfConfigError>& error() const { return error_; }
  const ReadJson& json() const { return json_; }

 private:
  const ReadJson& json_;
  std::string file_;
  std::optional<HfConfigError> error_;
};

/// The rope parameters object and where it came from: rope_parameters (transformers 5) or
/// rope_scaling (published 4.x checkpoints, rope_theta then sits at the top level).
struct RopeSource {
  const ReadJson* params = nullptr;  ///< null: no scaling object
  std::string name;                  ///< "rope_parameters" or "rope_scaling"
};

bool read_rope(ConfigReader& r, ModelConfig& m, int64_t max_positions) {
  RopeSource src;
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (r.has(key)) {
      if (!r.json().at(key).is_object()) {
        r.fail(key, value_text(r.json().at(key)), "must be an object of rope parameters");
        return false;
      }
      src = {&r.json().at(key), key};
      break;
    }
  // Both keys (a config edited by hand): transformers 5 replaces rope_parameters with rope_scaling
  // whole, its rope_theta then the top level's (else 10000) and its other keys their defaults. So
  // the two must be one scaling: the same keys and values ("type" being the old name of
  // "rope_type"), rope_parameters' rope_theta that top-level value.
  if (src.name == "rope_parameters" && r.has("rope_scaling")) {
    const ReadJson& scaling = r.json().at("rope_scaling");
    if (!scaling.is_object()) {
      r.fail("rope_scaling", value_text(scaling), "must be an object of rope parameters");
      return false;
    }
    const std::string keep = ", and transformers reads rope_scaling alone: keep one of the two keys";
    ReadJson params = *src.params, legacy = ReadJson::object();
    for (const auto& [key, value] : scaling.items()) legacy[key == "type" ? "rope_type" : key] = value;
    if (params.contains("rope_theta")) {
      const ReadJson top = r.has("rope_theta") ? r.json().at("rope_theta") : ReadJson(10000.0);
      if (!legacy.contains("rope_theta") && params.at("rope_theta") != top) {
        r.fail("rope_parameters.rope_theta", value_text(params.at("rope_theta")),
               "differs from the rope_theta transformers takes beside rope_scaling (" + value_text(top) + ")" + keep);
        return false;
      }
      if (!legacy.contains("rope_theta")) params.erase("rope_theta");
    }
    for (const auto& [key, value] : params.items())
      if (!legacy.contains(key) || legacy.at(key) != value) {
        r.fail("rope_parameters." + key, value_text(value),
               "differs from rope_scaling." + key + " = " +
                   (legacy.contains(key) ? value_text(legacy.at(key)) : std::string("(missing)")) + keep);
        return false;
      }
    for (const auto& [key, value] : legacy.items())
      if (!params.contains(key)) {
        r.fail("rope_scaling." + key, value_text(value), "is not in rope_parameters" + keep);
        return false;
      }
  }
  const ReadJson empty = ReadJson::object();
  const ReadJson& p = src.params ? *src.params : empty;
  const std::string prefix = src.name.empty() ? "" : src.name + ".";
  // rope_theta: inside rope_parameters (transformers 5), else at the top level, else 10000.
  if (r.has(p, "rope_theta")) {
    if (auto v = r.positive(p, "rope_theta", 1e12))
      m.rope_theta = *v;
    else
      return false;
  } else if (auto v = r.positive("rope_theta", 1e12, 10000.0)) {
    m.rope_theta = *v;
  } else {
    return false;
  }
  std::string type = "default";
  for (const char* key : {"rope_type", "type"})  // "type" in early 4.x checkpoints
    if (r.has(p, key)) {
      if (!p.at(key).is_string()) {
        r.fail(prefix + key, value_text(p.at(key)), "must be a string");
        return false;
      }
      type = p.at(key).get<std::string>();
      break;
    }
  RopeScaling& s = m.rope_scaling;
  s = RopeScaling{};
  if (type == "default") return true;
  if (type == "linear")
    s.kind = RopeScalingKind::Linear;
  else if (type == "llama3")
    s.kind = RopeScalingKind::Llama3;
  else if (type == "yarn")
    s.kind = RopeScalingKind::Yarn;
  else {
    r.fail(prefix + "rope_type", "\"" + type + "\"", "is not a rope type Odyssey runs (default, linear, llama3, yarn)");
    return false;
  }
  // nullopt: required. transformers refuses a scaling without these keys (its
  // rope_config_validation: factor for every type, the two frequency factors for llama3), so a
  // default here would train positions that no Hugging Face load of the model reproduces.
  auto number = [&](const char* key, std::optional<double> fallback, double& out) {
    auto v = r.positive(p, key, 1e12, fallback);
    if (v) out = *v;
    return v.has_value();
  };
  if (!number("factor", std::nullopt, s.factor)) return false;
  if (s.kind == RopeScalingKind::Llama3 && !(number("low_freq_factor", std::nullopt, s.low_freq_factor) &&
                                             number("high_freq_factor", std::nullopt, s.high_freq_factor)))
    return false;
  if (s.kind == RopeScalingKind::Yarn &&
      !(number("beta_fast", 32.0, s.beta_fast) && number("beta_slow", 1.0, s.beta_slow)))
    return false;
  if (s.kind == RopeScalingKind::Yarn && r.has(p, "attention_factor")) {
    if (!number("attention_factor", 1.0, s.attention_factor)) return false;
  }
  // transformers' truncate (default true) floors and ceils YaRN's correction range, as Odyssey does
  if (s.kind == RopeScalingKind::Yarn && r.has(p, "truncate") && p.at("truncate") != ReadJson(true)) {
    r.fail(prefix + "truncate", value_text(p.at("truncate")),
           "is not implemented: Odyssey's YaRN floors and ceils its correction range (truncate true, "
           "transformers' default)");
    return false;
  }
  if (s.kind == RopeScalingKind::Yarn && (r.has(p, "mscale") || r.has(p, "mscale_all_dim"))) {
    r.fail(prefix + "mscale", value_text(r.has(p, "mscale") ? p.at("mscale") : p.at("mscale_all_dim")),
           "DeepSeek's mscale variant of YaRN is not supported");
    return false;
  }
  if (s.kind != RopeScalingKind::Linear) {
    // A top-level original_max_position_embeddings (Phi-3's spelling) takes priority over the rope
    // parameters' own, as transformers gives it
    const bool top = r.has("original_max_position_embeddings");
    auto original = r.integer(top ? r.json() : p, "original_max_position_embeddings", 1, int64_t{1} << 40,
                              s.kind == RopeScalingKind::Yarn ? std::optional<int64_t>(max_positions) : std::nullopt);
    if (!original) return false;
    s.original_max_position = *original;
  }
  if (auto broken = rope_scaling_rule(s)) {
    r.fail(prefix + "rope_type", "\"" + type + "\"", broken->key + " " + broken->rule);
    return false;
  }
  return true;
}

}  // namespace

int64_t hf_default_max_positions(const std::string& model_type) { return model_type == "qwen3" ? 32768 : 2048; }

std::optional<ModelConfig> read_hf_config(const std::string& dir, HfConfigError* error, int64_t* max_positions_out) {
  const std::string file = join_path(dir, "config.json");
  auto fail_file = [&](const std::string& rule) -> std::optional<ModelConfig> {
    if (error) *error = HfConfigError{file, "", "", rule};
    return std::nullopt;
  };
  if (!is_directory(dir))
    return fail_file("model.hf_path must name a Hugging Face model directory; " + dir + " is not a directory");
  // Bounded, without blocking, and only a regular file: a FIFO no one writes cannot hang the
  // loader, a link to /dev/zero cannot fill the memory.
  std::string text;
  try {
    text = read_file_bounded(file, kMaxConfigBytes, "config.json");
  } catch (const FileReadError& e) {
    const std::string what = e.what(), prefix = "config.json " + file + ": ";
    return fail_file((what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what) +
                     " (a Hugging Face model directory holds config.json beside its safetensors)");
  }
  std::optional<ReadJson> json;
  std::string parse_error;
  try {
    json = ReadJson::parse(text);
  } catch (const ReadJson::parse_error& e) {
    parse_error = "offset " + std::to_string(e.byte) + ": " + e.what();
  } catch (const ReadJson::exception& e) {  // out_of_range.406: a number such as 1e400 overflows a double
    parse_error = e.what();
  }
  if (!json || !json->is_object())
    return fail_file("is not a JSON object (" + (json ? "another JSON value" : parse_error) + ")");

  ConfigReader r(*json, file);
  ModelConfig m;
  m.flavor = "hf";
  m.hf_path = dir;
  auto done = [&]() -> std::optional<ModelConfig> {
    if (r.error()) {
      if (error) *error = *r.error();
      return std::nullopt;
    }
    return m;
  };
  if (!r.has("model_type") || !json->at("model_type").is_string()) {
    r.fail("model_type", r.has("model_type") ? value_text(json->at("model_type")) : "(missing)",
           "must name the architecture: \"llama\" or \"qwen3\"");
    return done();
  }
  const std::string type = json->at("model_type").get<std::string>();
  if (type != "llama" && type != "qwen3") {
    r.fail("model_type", "\"" + type + "\"", "is not an architecture Odyssey runs (llama, qwen3)");
    return done();
  }
  m.qk_norm = type == "qwen3";
  constexpr int64_t kBig = int64_t{1} << 24;
  auto set = [&](int64_t& field, const char* key, int64_t lo, int64_t hi,
                 std::optional<int64_t> fallback = std::nullopt) {
    if (auto v = r.integer(key, lo, hi, fallback)) field = *v;
    return !r.error();
  };
  if (!(set(m.n_layers, "num_hidden_layers", 1, 1024) && set(m.d_model, "hidden_size", 1, 1 << 20) &&
        set(m.n_heads, "num_attention_heads", 1, 4096) &&
        set(m.n_kv_heads, "num_key_value_heads", 1, 4096, m.n_heads) && set(m.d_ffn, "intermediate_size", 1, 1 << 22) &&
        set(m.vocab_size, "vocab_size", 2, kBig)))
    return done();
  if (m.d_model % m.n_heads != 0 && !r.has("head_dim")) {
    r.fail("num_attention_heads", std::to_string(m.n_heads),
           "must divide hidden_size = " + std::to_string(m.d_model) + " when head_dim is not given");
    return done();
  }
  if (!set(m.head_dim, "head_dim", 2, 4096, m.d_model / m.n_heads)) return done();
  if (m.n_heads % m.n_kv_heads != 0) {
    r.fail("num_key_value_heads", std::to_string(m.n_kv_heads),
           "must divide num_attention_heads = " + std::to_string(m.n_heads) + " (grouped-query attention)");
    return done();
  }
  if (auto eps = r.positive("rms_norm_eps", 1.0, 1e-6))
    m.norm_eps = *eps;
  else
    return done();
  if (auto tied = r.boolean("tie_word_embeddings", false))
    m.tie_embeddings = *tied;
  else
    return done();
  // absent: transformers' default of the architecture, which YaRN's original context defaults to
  int64_t max_positions = 0;
  if (!set(max_positions, "max_position_embeddings", 1, int64_t{1} << 40, hf_default_max_positions(type)))
    return done();
  if (max_positions_out != nullptr) *max_positions_out = max_positions;
  if (!read_rope(r, m, max_positions)) return done();
  // What Odyssey's decoder does not compute: refused rather than silently dropped.
  r.absent_or("hidden_act", "silu", "Odyssey's MLP is SwiGLU (hidden_act \"silu\")") &&
      r.absent_or("attention_bias", false, "Odyssey's attention projections have no bias") &&
      r.absent_or("mlp_bias", false, "Odyssey's MLP projections have no bias") &&
      r.absent_or("use_sliding_window", false, "Odyssey's attention is full causal attention (no sliding window)") &&
      r.absent_or("partial_rotary_factor", 1.0, "Odyssey rotates every channel of a head (partial_rotary_factor 1)") &&
      r.absent_or("attention_dropout", 0.0, "Odyssey's attention has no dropout (attention_dropout 0)");
  return done();
}

std::string hf_config_json(const ModelConfig& m, const std::string& torch_dtype, int64_t max_positions) {
  const bool qwen3 = m.qk_norm;
  Json j = Json::object();
  j["architectures"] = Json::array({qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"});
  j["model_type"] = qwen3 ? "qwen3" : "llama";
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.d_ffn;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_kv_heads;
  j["head_dim"] = m.head_dim;
  j["vocab_size"] = m.vocab_size;
  j["rms_norm_eps"] = m.norm_eps;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  if (qwen3) j["use_sliding_window"] = false;
  j["max_position_embeddings"] = max_positions;
  // The published (4.x) spelling: transformers 5 reads it as well, older versions only it.
  j["rope_theta"] = m.rope_theta;
  const RopeScaling& s = m.rope_scaling;
  if (s.kind == RopeScalingKind::None) {
    j["rope_scaling"] = nullptr;
  } else {
    Json p = Json::object();
    p["rope_type"] = std::string(to_string(s.kind));
    p["factor"] = s.factor;
    if (s.kind == RopeScalingKind::Llama3) {
      p["low_freq_factor"] = s.low_freq_factor;
      p["high_freq_factor"] = s.high_freq_factor;
    }
    if (s.kind == RopeScalingKind::Yarn) {
      p["beta_fast"] = s.beta_fast;
      p["beta_slow"] = s.beta_slow;
      if (s.attention_factor > 0) p["attention_factor"] = s.attention_factor;
    }
    if (s.kind != RopeScalingKind::Linear) p["original_max_position_embeddings"] = s.original_max_position;
    j["rope_scaling"] = p;
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace odyssey
