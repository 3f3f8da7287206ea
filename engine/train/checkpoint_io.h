// Training checkpoints: per-rank model shards, AdamW moments, step counter (the data position),
// RNG state, and the run's config, written atomically (temporary file, then rename; a pointer file
// last) and read back for --resume. defines: CheckpointInfo, save_checkpoint, load_checkpoint,
// read_checkpoint_info
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/config/run_config.h"
#include "engine/train/trainer.h"

namespace odyssey {

/// A checkpoint that cannot be written or used; the message names the file and the problem.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What DIR/checkpoints/latest.json says.
struct CheckpointInfo {
  int64_t step = 0;        ///< steps completed: training resumes at this step
  int64_t world_size = 1;
  std::string path;        ///< the step's folder
  std::string config_toml; ///< the run's config at that step
};

/// Layout under `dir`: checkpoints/step_<N>/rank<r>.bin (every rank), checkpoints/step_<N>/
/// config.toml, and checkpoints/latest.json (rank 0, after every rank wrote; the previous step's
/// folder is removed after it). Collective: every rank calls it (a barrier over ctx.world).
void save_checkpoint(Trainer& trainer, const std::string& dir);

/// nullopt when `dir` has no checkpoint. Throws CheckpointError on a malformed pointer file.
std::optional<CheckpointInfo> read_checkpoint_info(const std::string& dir);

/// Restores this rank's shards, moments, step counter and RNG from `dir`'s latest checkpoint.
/// The model shape and world size must match (else CheckpointError naming the mismatch).
CheckpointInfo load_checkpoint(Trainer& trainer, const std::string& dir);

}  // namespace odyssey
