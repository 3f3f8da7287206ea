// Training checkpoints: per-rank model shards, AdamW moments, step counter (the data position),
// RNG state, and the run's config, written atomically (temporary file, fsync, rename; a pointer
// file last), every tensor with a CRC-32, and read back for --resume, verified before use.
// defines: CheckpointError, CheckpointWriteError, CheckpointInfo, CarriedFile, save_checkpoint,
// read_checkpoint_info, check_resume_config, load_checkpoint
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/train/trainer.h"

namespace odyssey {

/// A checkpoint that cannot be used (missing, corrupt, or saved under an incompatible config):
/// bad input, exit 2. The message names the file, the tensor or key, and what is wrong.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A checkpoint that could not be written (disk full, rename failed): a runtime failure, exit 1.
class CheckpointWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What DIR/checkpoints/latest.json says.
struct CheckpointInfo {
  int64_t format = 2;  ///< 2: CRC-32 per tensor and of config.toml; 1: older, unverified
  int64_t step = 0;    ///< steps completed: training resumes at this step
  int64_t world_size = 1;
  std::string path;         ///< the step's folder
  std::string config_toml;  ///< the run's config at that step (verified against its CRC)
};

/// A small file a checkpoint carries beside its tensors: its name in the step's folder and its bytes.
struct CarriedFile {
  std::string name;
  std::string bytes;
};

/// Layout under `dir`: checkpoints/step_<N>/rank<r>.bin (every rank), checkpoints/step_<N>/
/// config.toml and `carried` (rank 0: the model directory's tokenizer files, so that eval and
/// export find them without it), and checkpoints/latest.json (rank 0, after every rank wrote; the
/// previous step's folder is removed after it). Collective: every rank calls it (a barrier over
/// ctx.world). A write that fails on any rank, latest.json's included, fails the save on every
/// rank with the same CheckpointWriteError naming the file (the highest failing rank's), the
/// step's new folder removed on every rank, and the previous checkpoint stays.
void save_checkpoint(Trainer& trainer, const std::string& dir, const std::vector<CarriedFile>& carried = {});

/// nullopt when `dir` has no checkpoint. Throws CheckpointError on a malformed pointer file or
/// config.toml (each field checked for type and range, the config against its CRC). A live run
/// saving into `dir` moves latest.json and then removes the folder it pointed at: a read caught
/// between the two is made again from the new pointer (up to 3 times).
std::optional<CheckpointInfo> read_checkpoint_info(const std::string& dir);

/// Compares the checkpoint's config with this run's. Throws CheckpointError listing every key the
/// saved state depends on (KeySpec::resume_must_match) that differs; returns one line for each
/// other difference ("resume: training.lr = 0.0003 -> 0.001 (checkpoint -> this run)").
std::vector<std::string> check_resume_config(const CheckpointInfo& info, const RunConfig& run, const std::string& dir);

/// The fp32 master weights in `rank`'s file of `info`'s checkpoint, by group name ("block.3"),
/// each [shard_numel]; the file is verified as load_checkpoint verifies it. For `odyssey export`.
std::map<std::string, at::Tensor> read_checkpoint_masters(const CheckpointInfo& info, int64_t rank);

/// Restores this rank's shards, moments, step counter and RNG from `dir`'s latest checkpoint.
/// Every tensor is checked (name, dtype, size, CRC-32, finite values) before the trainer is
/// touched; a mismatch throws CheckpointError naming the file and the tensor.
CheckpointInfo load_checkpoint(Trainer& trainer, const std::string& dir);
/// The same from the checkpoint `info` names (read once by the caller, so that every rank of a
/// process resumes from one step even while another process rewrites latest.json).
void load_checkpoint(Trainer& trainer, const CheckpointInfo& info, const std::string& dir);

}  // namespace odyssey
