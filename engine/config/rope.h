// RoPE's frequencies for a model: theta and the context-extension scaling (linear, llama3, YaRN)
// as Hugging Face computes them, defined once for the engine's tables and the rope_pack kernel,
// and the RoPE a model runs in words and JSON (check, plan). defines: rope_inv_freq,
// rope_attention_factor, rope_scaling_rule, reads_original_context, describe_rope, write_rope_json
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

class JsonWriter;

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

/// Whether a scaling kind stretches a pretraining context (model.rope_original_max_position):
/// llama3 and yarn do, linear divides every position alike.
bool reads_original_context(RopeScalingKind kind);

/// The RoPE `model` runs, in words: "RoPE theta 500000, llama3 x32 over 8K pretraining positions
/// (low_freq_factor 1, high_freq_factor 4)", naming only what its scaling kind reads, the YaRN
/// attention factor resolved. What `odyssey check` and `odyssey plan` print.
std::string describe_rope(const ModelConfig& model);
/// The same as a JSON object: {"theta", "scaling", then the keys the kind reads without their
/// "rope_" prefix ("factor", "original_max_position", ...), "attention_factor" resolved for yarn}.
void write_rope_json(JsonWriter& w, const ModelConfig& model);

}  // namespace odyssey
