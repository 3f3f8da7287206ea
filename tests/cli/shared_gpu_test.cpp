// A node rehearsed on one GPU (hidden tag [.cuda]): torchrun processes sharing the device over
// Gloo run Ulysses (plain and Untied stages, P = 2 and 4, KV heads below the degree), FSDP,
// offload and the tiled loss (shared_gpu_jobs.h); each equals the CPU run of the same job, and each
// rank's allocator peak is within 3% of the plan's. Run it on a GPU host: `cli_tests "[.cuda]"`.
// defines: test cases [.cuda]
#include <cmath>

#include "../model_tolerance.h"
#include "cli_test_util.h"
#include "engine/config/preset.h"
#include "shared_gpu_jobs.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// Runs the job as `ranks` torchrun processes for 2 steps into DIR, on GPU 0 alone
/// (CUDA_VISIBLE_DEVICES=0: the ranks share it whatever the host has); requires every rank to
/// exit 0.
void run_job(int ranks, const std::string& device, const SharedGpuSetup& setup, const std::string& dir) {
  const std::vector<pid_t> pids =
      spawn_torchrun("train " + shared_gpu_job(ranks, device, setup) + "--steps 2 --no-checkpoint --quiet --out " + dir,
                     dir, ranks, "CUDA_VISIBLE_DEVICES=0");
  for (int rank = 0; rank < ranks; ++rank) {
    const auto status = wait_exit(pids[rank], 600);
    INFO(device << " rank " << rank << ": " << read_text(dir + ".rank" + std::to_string(rank) + ".log"));
    REQUIRE(status.has_value());
    REQUIRE(WIFEXITED(*status));
    REQUIRE(WEXITSTATUS(*status) == 0);
  }
}

}  // namespace

TEST_CASE("shared GPU: torchrun ranks on one GPU equal the CPU run and meet the plan per rank", "[.cuda]") {
  for (const SharedGpuSetup& setup : kSharedGpuSetups) {
    for (const int ranks : {2, 4}) {
      INFO(setup.name << ", " << ranks << " ranks");
      const std::string tag = std::to_string(&setup - kSharedGpuSetups.data()) + "_" + std::to_string(ranks);
      const std::string gpu = fresh_dir("shared_gpu_" + tag), cpu = fresh_dir("shared_cpu_" + tag);
      run_job(ranks, "cuda", setup, gpu);
      run_job(ranks, "cpu", setup, cpu);
      // More ranks than the one GPU they see: every group on Gloo, CUDA tensors staged on the host.
      const auto summary = parse_json(read_text(gpu + "/summary.json"));
      REQUIRE(summary.has_value());
      CHECK(summary->at("extra").at("collective_backend").get<std::string>() == "gloo");
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
      // tensor peak for a GPU (peak less the runtime overhead no allocator sees).
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
  }
}

TEST_CASE("shared GPU: rank threads of one process on one GPU are refused, naming the torchrun command", "[.cuda]") {
  // Autograd runs every thread's backward on the GPU's one worker thread: a rank waiting in a
  // collective there would wait for the other rank's backward forever.
  const Run r = run_odyssey("train " + shared_gpu_job(2, "cuda", kSharedGpuSetups.front()) +
                            "--steps 1 --quiet --out " + fresh_dir("shared_threads"));
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("rank threads of one process cannot share a GPU") &&
                        Catch::Contains("torchrun --nproc-per-node 2 --no-python odyssey train PRESET"));
}
