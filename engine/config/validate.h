// Validation that explains: every range and every impossible combination of a RunConfig, each an
// issue naming the key, its value, the rule and a hint. Runs before anything is allocated.
#pragma once

#include <string>
#include <vector>

#include "engine/config/preset.h"

namespace odyssey {

/// Checks every rule; returns all problems (empty when the config is valid). `sources` and `file`
/// give each issue its position; without them the issue carries only the key (as in the studio).
std::vector<ConfigIssue> validate(const RunConfig& cfg, const SourceMap& sources = {}, const std::string& file = "");

/// The range pass of validate alone: every numeric key against its schema range. What a config
/// whose reading found problems (an unknown key, a wrong type) can still be checked for: the rules
/// that combine keys wait until every key has read, since a key that failed holds its default.
std::vector<ConfigIssue> validate_ranges(const RunConfig& cfg, const SourceMap& sources = {},
                                         const std::string& file = "");

/// training.seq_len's bounds: the schema's range (one input and one label at least, 16G tokens at
/// most) and the long-range task's shortest (its filler, query mark and passkey).
constexpr int64_t kSeqLenMin = 2;
constexpr int64_t kSeqLenMax = int64_t{1} << 34;
constexpr int64_t kLongRangeSeqLenMin = 32;
/// The shortest training.seq_len validate takes for this config's dataset: where the max-length
/// solver starts.
int64_t shortest_seq_len(const RunConfig& cfg);

/// Ulysses degrees that would be valid for this model, sequence and world size (for hints and the
/// studio's selector).
std::vector<int64_t> valid_ulysses_degrees(const RunConfig& cfg);
/// heads_per_stage values valid for this model and Ulysses degree (for hints and the slider).
std::vector<int64_t> valid_heads_per_stage(const RunConfig& cfg);

/// What a valid config does that its author may not expect, each as one sentence naming the keys
/// (`odyssey check` prints them as notes; they change no exit code): a training.device that takes
/// the other path than hardware.profile describes, so the plan walks one device's kernels against
/// the other's capacity and runtime overhead (runs_cuda_path); a compute_efficiency moved from the
/// profile's while attention_efficiency keeps the profile's (it used to scale the whole step); a
/// technique's size set while the technique is off (idle_size_keys); a RoPE scaling key the scaling
/// kind does not read (idle_rope_keys); an original context above the one the model was pretrained
/// at (model_own_rope).
std::vector<std::string> config_notes(const RunConfig& cfg);

/// The RoPE scaling keys set away from the model's own (`own`: model_own_rope's) that `r.kind` does
/// not read (rope_factor with "none"; rope_beta_fast with "linear"; ...): each a note of
/// config_notes, as in the rule engine/config/rope.h applies (linear: the factor; llama3: the
/// factor, the low and high frequency factors and the original context; yarn: the factor, the
/// original context, both betas and the attention factor). Keys the model brought (Llama 3.2's
/// llama3 factors under a preset's "none") are the model's, not the preset author's: no note.
std::vector<std::string> idle_rope_keys(const RopeScaling& r, const RopeScaling& own);

/// The RoPE a model brings before any rope_* key and the context it was pretrained at: from its
/// config.json (model.hf_path: the original context of its llama3 or yarn scaling, else its
/// max_position_embeddings), from its flavor (its scaling's original context: 8K for Llama 3, 32K
/// for Qwen3; none for a flavor not pretrained: ModelFlavor::pretrained, tiny), or nothing known (a custom model: the keys'
/// defaults, context 0).
struct ModelRope {
  RopeScaling scaling;
  int64_t pretrained_context = 0;
  std::string from;  ///< where both come from, for a note: "the qwen3-32b flavor's"
};
ModelRope model_own_rope(const ModelConfig& m);

/// A technique's size key set away from its default while the technique is off: it sizes nothing
/// until the technique is on again (the studio keeps it across a toggle).
struct IdleSizeKey {
  const char* size_key;       ///< in [memory]: "mlp_tile_tokens", "loss_tile_tokens", "heads_per_stage"
  const char* technique_key;  ///< in [memory]: "tiled_mlp", "tiled_loss", "untied_ulysses"
};
/// The idle sizes of `m`, in [memory]'s key order.
std::vector<IdleSizeKey> idle_size_keys(const MemoryConfig& m);
/// `m` with every idle size back at its default: what a table written as a new preset carries
/// (`odyssey tune -o`), so that `odyssey check` has nothing to note about it.
MemoryConfig without_idle_sizes(MemoryConfig m);

}  // namespace odyssey
