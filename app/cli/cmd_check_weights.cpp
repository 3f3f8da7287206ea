// `odyssey check`'s reading of a model.hf_path directory's weights, in odyssey-engine (HfWeights
// needs LibTorch's types): what train refuses before it builds the model, check refuses too.
#include "app/cli/model_weights_check.h"
#include "engine/train/hf_checkpoint.h"
#include "engine/util/safetensors.h"

namespace odyssey::cli {
namespace {

/// HfWeights as train opens it: every file's safetensors format, every parameter's tensor found
/// with its shape and dtype, a tied head's bytes. The elements (a NaN) are read only by train.
std::optional<ConfigIssue> check_hf_weights(const LoadedPreset& loaded) {
  const std::string& dir = loaded.config.model.hf_path;
  if (dir.empty()) return std::nullopt;
  std::string why;
  try {
    const HfWeights weights(dir, loaded.config.model);  // opened, checked and closed
    return std::nullopt;
  } catch (const CheckpointError& e) {  // HfCheckpointError
    why = e.what();
  } catch (const SafetensorsReadError& e) {
    why = e.what();
  }
  const auto at = loaded.sources.find("model.hf_path");
  return ConfigIssue{at != loaded.sources.end() ? at->second : SourceLoc{}, "model.hf_path", "\"" + dir + "\"", why,
                     "odyssey train opens the weights with these checks before it builds the model"};
}

const bool registered = [] {
  model_weights_check() = &check_hf_weights;
  return true;
}();

}  // namespace
}  // namespace odyssey::cli
