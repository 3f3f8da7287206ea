// A Hugging Face model directory's config.json as a ModelConfig (Llama 3.x and Qwen3), and back:
// the plan needs only this file, the engine reads the weights beside it (engine/train/hf_checkpoint).
// defines: HfConfigError, read_hf_config, hf_default_max_positions, hf_config_json. No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/config/run_config.h"

namespace odyssey {

/// Why a config.json cannot describe an Odyssey model: the file, the JSON key, its value and the
/// rule, so the preset loader can report it against model.hf_path.
struct HfConfigError {
  std::string file;            ///< ".../config.json"
  std::string key;             ///< "num_key_value_heads", "" for the file as a whole
  std::string value;           ///< the value as written, or "(missing)"
  std::string rule;            ///< "must be a positive whole number"
  std::string format() const;  ///< "DIR/config.json: \"key\" = value: rule"
};

/// The model `dir`/config.json describes: model_type "llama" or "qwen3", its shape, rms_norm_eps,
/// tied embeddings, QK-norm (qwen3), rope_theta and rope scaling, read both as published
/// checkpoints write it (top-level rope_theta beside rope_scaling) and as transformers 5 does
/// (rope_parameters). `flavor` is "hf" and `hf_path` is `dir`. nullopt and *error on anything
/// Odyssey cannot run exactly (biases, sliding windows, other activations or rope types).
/// *max_positions (when given): the context config.json advertises, max_position_embeddings or,
/// absent, hf_default_max_positions.
std::optional<ModelConfig> read_hf_config(const std::string& dir, HfConfigError* error,
                                          int64_t* max_positions = nullptr);

/// transformers' max_position_embeddings for a config.json without one: its architecture's
/// default (LlamaConfig's 2048, Qwen3Config's 32768).
int64_t hf_default_max_positions(const std::string& model_type);

/// config.json for `model` as transformers loads it without conversion (LlamaForCausalLM, or
/// Qwen3ForCausalLM when qk_norm), weights stored as `torch_dtype` ("float32", "bfloat16"),
/// `max_positions` as max_position_embeddings.
std::string hf_config_json(const ModelConfig& model, const std::string& torch_dtype, int64_t max_positions);

}  // namespace odyssey
