// RoPE's frequencies for a model: theta and the context-extension scaling (linear, llama3, YaRN)
// as Hugging Face computes them, defined once for the engine's tables and the rope_pack kernel.
// defines: rope_inv_freq, rope_attention_factor, rope_scaling_rule
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

/// The rotary inverse frequencies [head_dim / 2] of `model` (rope_theta, then rope_scaling), in
/// float64: pair i of a head rotates by position x rope_inv_freq(model)[i] radians.
std::vector<double> rope_inv_freq(const ModelConfig& model);

/// The factor YaRN puts on cos and sin (so on every attention logit, squared); 1 otherwise.
double rope_attention_factor(const ModelConfig& model);

/// Why `scaling` cannot be used ("must be at least 1 ..."), naming the key, or nullopt. One rule for
/// the preset validator and the Hugging Face config reader.
struct RopeRuleBreak {
  std::string key;   ///< "model.rope_factor"
  std::string rule;  ///< "must be at least 1 when model.rope_scaling = \"llama3\""
};
std::optional<RopeRuleBreak> rope_scaling_rule(const RopeScaling& scaling);

}  // namespace odyssey
