// The jobs a node is rehearsed with on one GPU (shared_gpu_test.cpp, [.cuda]) and whose CPU halves
// run in `make test` (train_cli_test.cpp): one definition, so both sides run the same job.
// defines: SharedGpuSetup, kSharedGpuSetups, shared_gpu_job
#pragma once

#include <string>
#include <vector>

namespace odyssey::test {

/// One rank layout's technique set, as --set words after the common job.
struct SharedGpuSetup {
  std::string name;
  std::string sets;
};

/// The tiny preset's stack (FSDP, checkpointing with offload, tiled MLP and loss) with:
/// - the Untied stages over its 2 KV heads (at P = 4 each KV head serves two ranks);
/// - the Untied stages over 1 KV head, below the degree at P = 2 and 4 (replicated to every rank);
/// - plain Ulysses (one all-to-all of every head, no stages) over 1 KV head.
inline const std::vector<SharedGpuSetup> kSharedGpuSetups = {
    {"Untied stages, 2 KV heads", ""},
    {"Untied stages, 1 KV head", "--set model.n_kv_heads=1 "},
    {"plain Ulysses, 1 KV head", "--set memory.untied_ulysses=false --set model.n_kv_heads=1 "},
};

/// The tiny preset (8 query heads of 16) at world = Ulysses degree `ranks`, one query head per
/// rank per stage, fp32, 512 tokens, on `device`, with `setup`'s keys.
inline std::string shared_gpu_job(int ranks, const std::string& device, const SharedGpuSetup& setup) {
  return "presets/tiny-cpu.toml --set training.seq_len=512 --set training.dtype=float32 --set training.warmup_steps=1 "
         "--set parallel.world_size=" +
         std::to_string(ranks) + " --set parallel.ulysses_degree=" + std::to_string(ranks) +
         " --set memory.heads_per_stage=" + std::to_string(ranks) + " --set training.device=" + device + " " +
         setup.sets;
}

}  // namespace odyssey::test
