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

/// Ulysses degrees that would be valid for this model, sequence and world size (for hints and the
/// studio's selector).
std::vector<int64_t> valid_ulysses_degrees(const RunConfig& cfg);
/// heads_per_stage values valid for this model and Ulysses degree (for hints and the slider).
std::vector<int64_t> valid_heads_per_stage(const RunConfig& cfg);

/// What a valid config does that its author may not expect, each as one sentence naming the keys
/// (`odyssey check` prints them as notes; they change no exit code): a training.device that takes
/// the other path than hardware.profile describes, so the plan walks one device's kernels against
/// the other's capacity and runtime overhead (runs_cuda_path); a compute_efficiency moved from the
/// profile's while attention_efficiency keeps the profile's (it used to scale the whole step).
std::vector<std::string> config_notes(const RunConfig& cfg);

}  // namespace odyssey
