// The check of a model.hf_path directory's weights that `odyssey check` runs beyond its config.json:
// it reads them as train does (LibTorch's side), so odyssey-engine registers it and `odyssey` hands it on.
#pragma once

#include <optional>

#include "engine/config/preset.h"

namespace odyssey::cli {

/// A command's answer to main: run this command line in odyssey-engine instead (never an exit code).
constexpr int kRunInEngine = -1;

/// What train checks of a preset's model.hf_path weights before it builds the model, as the issue
/// at model.hf_path's line; nullopt when they pass or the preset names no directory.
using ModelWeightsCheck = std::optional<ConfigIssue> (*)(const LoadedPreset&);

/// Null in `odyssey` (no LibTorch); odyssey-engine sets it before main (cmd_check_weights.cpp).
ModelWeightsCheck& model_weights_check();

}  // namespace odyssey::cli
