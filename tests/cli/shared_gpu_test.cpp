// A node rehearsed on one GPU (hidden tag [.cuda]): torchrun processes sharing the device over
// Gloo run Ulysses (plain and Untied stages, P = 2 and 4, KV heads below the degree), FSDP,
// offload and the tiled loss (shared_gpu_jobs.h); each equals the CPU run of the same job, and each
// rank's allocator peak is within 3% of the plan's. Run it on a GPU host: `cli_tests "[.cuda]"`.
// The same jobs with a GPU a rank, on NCCL (hidden tag [.multigpu]): on a host with 2 GPUs or more
// (`cli_tests "[.multigpu]"`, which validate.sh's smoke stage runs there and only there).
// defines: test cases [.cuda], [.multigpu]
#include <cmath>

#include "../model_tolerance.h"
#include "cli_test_util.h"
#include "engine/config/preset.h"
#include "shared_gpu_jobs.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// Runs the job as `ranks` torchrun processes for 2 steps into DIR with CUDA_VISIBLE_DEVICES =
/// `visible` (each rank takes GPU LOCAL_RANK % the GPUs it sees: "0" puts every rank on GPU 0);
/// requires every rank to exit 0.
void run_job(int ranks, const std::string& device, const SharedGpuSetup& setup, const std::string& dir,
             const std::string& visible) {
  const std::vector<pid_t> pids =
      spawn_torchrun("train " + shared_gpu_job(ranks, device, setup) + "--steps 2 --no-checkpoint --quiet --out " + dir,
                     dir, ranks, "CUDA_VISIBLE_DEVICES=" + visible);
  for (int rank = 0; rank < ranks; ++rank) {
    const auto status = wait_exit(pids[rank], 600);
    INFO(device << " rank " << rank << ": " << read_text(dir + ".rank" + std::to_string(rank) + ".log"));
    REQUIRE(status.has_value());
    REQUIRE(WIFEXITED(*status));
    REQUIRE(WEXITSTATUS(*status) == 0);
  }
}

/// The job on the GPUs `visible` names and on the CPU: the collectives on `backend`, the first
/// step's loss equal to the CPU run's within the model's loss tolerance, each rank's allocator
/// peak within 3% of the planner's tensor peak.
void check_job_against_cpu_and_plan(int ranks, const SharedGpuSetup& setup, const std::string& visible,
                                    const std::string& backend) {
  INFO(setup.name << ", " << ranks << " ranks on CUDA_VISIBLE_DEVICES=" << visible);
  const std::string tag =
      backend + "_" + std::to_string(&setup - kSharedGpuSetups.data()) + "_" + std::to_string(ranks);
  const std::string gpu = fresh_dir("shared_gpu_" + tag), cpu = fresh_dir("shared_cpu_" + tag);
  run_job(ranks, "cuda", setup, gpu, visible);
  run_job(ranks, "cpu", setup, cpu, visible);
  const auto summary = parse_json(read_text(gpu + "/summary.json"));
  REQUIRE(summary.has_value());
  CHECK(summary->at("extra").at("collective_backend").get<std::string>() == backend);
  // The first step's loss (fp32 both): the same sums in other orders, within the model's
  // loss tolerance on the global batch (one sequence).
  const LoadedPreset loaded = load_preset("presets/tiny-cpu.toml");
  REQUIRE(loaded.ok());
  RunConfig cfg = loaded.config;
  cfg.training.seq_len = 512;
  const double tolerance = loss_tolerance(cfg, 1);
  const double on_gpu = losses(gpu).at(1), on_cpu = losses(cpu).at(1);
  INFO("step 1 loss: GPU " << on_gpu << ", CPU " << on_cpu << ", tolerance " << tolerance);
  CHECK(std::abs(on_gpu - on_cpu) <= tolerance * std::abs(on_cpu));
  // Each rank's allocator peak (metrics.jsonl, the last step: warm) against the planner's
  // tensor peak for a GPU (peak less the runtime overhead no allocator sees; NCCL's own buffers
  // are outside the allocator, as that overhead is).
  const Run plan =
      run_odyssey("plan " + shared_gpu_job(ranks, "cuda", setup) + "--set hardware.profile=h100-sxm --json");
  REQUIRE(plan.code == 0);
  const auto p = parse_json(plan.out);
  REQUIRE(p.has_value());
  const double planned = static_cast<double>(p->at("tensor_peak_bytes").get<int64_t>());
  std::istringstream rows(read_text(gpu + "/metrics.jsonl"));
  std::string last;
  for (std::string line; std::getline(rows, line);) last = line;
  const auto metrics = parse_json(last);
  REQUIRE(metrics.has_value());
  const auto& peaks = metrics->at("rank_peak_bytes");
  REQUIRE(static_cast<int>(peaks.size()) == ranks);
  for (int r = 0; r < ranks; ++r) {
    const double measured = static_cast<double>(peaks[r].get<int64_t>());
    INFO("rank " << r << ": measured " << measured << " B, planned " << planned << " B");
    CHECK(std::abs(measured - planned) <= 0.03 * measured);
  }
}

/// The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries: that variable's own where it
/// is set (nvidia-smi lists every GPU whatever it says), else each GPU nvidia-smi lists by index;
/// none where nvidia-smi cannot say.
std::vector<std::string> visible_gpus() {
  const Run listed = run_shell("nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null");
  std::vector<std::string> ids;
  std::istringstream lines(listed.out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) ids.push_back(line);
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES"); env != nullptr && ids.size() > 0) {
    ids.clear();
    std::istringstream entries(env);
    for (std::string id; std::getline(entries, id, ',');)
      if (!id.empty()) ids.push_back(id);
  }
  return ids;
}

/// The first GPU this process may use (visible_gpus), "0" where none is listed.
std::string first_gpu() {
  const std::vector<std::string> gpus = visible_gpus();
  return gpus.empty() ? "0" : gpus.front();
}

}  // namespace

TEST_CASE("shared GPU: torchrun ranks on one GPU equal the CPU run and meet the plan per rank", "[.cuda]") {
  // More ranks than the one GPU they see: every group on Gloo, CUDA tensors staged on the host.
  for (const SharedGpuSetup& setup : kSharedGpuSetups)
    for (const int ranks : {2, 4}) check_job_against_cpu_and_plan(ranks, setup, first_gpu(), "gloo");
}

TEST_CASE("shared GPU: rank threads of one process on one GPU are refused, naming the torchrun command", "[.cuda]") {
  // Autograd runs every thread's backward on the GPU's one worker thread: a rank waiting in a
  // collective there would wait for the other rank's backward forever. One GPU visible, as on a
  // host of several it would be one rank's each and nothing to refuse.
  const char* before = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string restore = before ? before : "";
  setenv("CUDA_VISIBLE_DEVICES", first_gpu().c_str(), 1);
  const Run r = run_odyssey("train " + shared_gpu_job(2, "cuda", kSharedGpuSetups.front()) +
                            "--steps 1 --quiet --out " + fresh_dir("shared_threads"));
  if (before)
    setenv("CUDA_VISIBLE_DEVICES", restore.c_str(), 1);
  else
    unsetenv("CUDA_VISIBLE_DEVICES");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("rank threads of one process cannot share a GPU") &&
                        Catch::Contains("torchrun --nproc-per-node 2 --no-python odyssey train PRESET"));
}

TEST_CASE("GPUs a rank: torchrun ranks on NCCL equal the CPU run and meet the plan per rank", "[.multigpu]") {
  // A GPU a rank: every group on NCCL, at 2 ranks and, on a host with 4 GPUs or more, at 4. Run on
  // purpose (the hidden tag): a host with one GPU fails here rather than pass with nothing run.
  const std::vector<std::string> gpus = visible_gpus();
  INFO("GPUs visible: " << gpus.size());
  REQUIRE(gpus.size() >= 2);
  for (const SharedGpuSetup& setup : kSharedGpuSetups) {
    for (const size_t ranks : {2u, 4u}) {
      if (ranks > gpus.size()) continue;
      std::string visible = gpus[0];  // the first `ranks` of them, one a rank (LOCAL_RANK's)
      for (size_t g = 1; g < ranks; ++g) visible += "," + gpus[g];
      check_job_against_cpu_and_plan(static_cast<int>(ranks), setup, visible, "nccl");
    }
  }
}
