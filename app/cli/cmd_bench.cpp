// odyssey bench PRESET [--set k=v]... [--steps ROUNDS] [--json] [--force]: the preset's model stepped plain,
// with each memory technique alone and with all together, and on several ranks with FSDP and
// Untied Ulysses at each valid heads_per_stage, interleaved in one run; prints the median step
// time per variant, its ratio to the baseline (with the per-round spread) beside the planner's
// ratio for the same configs, and the measured device/host peaks (max over ranks). Under torchrun
// only rank 0 prints. Exit 0, 1 (runtime failure), 2 (bad input).
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "app/cli/cli.h"
#include "engine/parallel/job.h"
#include "engine/train/bench.h"
#include "engine/train/data.h"
#include "engine/train/run.h"
#include "engine/train/trainer.h"
#include "engine/util/json.h"

namespace odyssey::cli {
namespace {

constexpr int kDefaultRounds = 10;
constexpr int64_t kMaxRounds = 1000000;  // a round steps every variant once: a million is days on a GPU

int run_bench_command(int argc, char** argv, int first) {
  ArgSpec spec;
  spec.set = spec.json = spec.steps = spec.quiet = spec.force = true;
  auto args = parse_args("bench", spec, argc, argv, first, std::cerr);
  if (!args) return kExitBadInput;
  if (args->steps && *args->steps > kMaxRounds) {
    std::cerr << "odyssey bench: --steps " << *args->steps << ": at most " << kMaxRounds
              << " rounds (each round steps every variant once)\n";
    return kExitBadInput;
  }
  auto loaded = load_or_report(args->positional[0], args->overrides, std::cerr);
  if (!loaded) return kExitBadInput;
  const RunConfig& cfg = loaded->config;
  const int rounds = args->steps ? static_cast<int>(*args->steps) : kDefaultRounds;

  BenchResult result;
  bool prints = true;  // a torchrun process with RANK != 0 prints errors only
  try {
    prints = runs_rank_zero();
    result = run_bench(
        cfg, rounds,
        [&](const std::string& line) {
          if (prints && !args->json && !args->quiet) std::cerr << "\r" << line << std::flush;
        },
        args->force);
    if (prints && !args->json && !args->quiet) std::cerr << "\n";
  } catch (const StepFailure& e) {
    std::cerr << "odyssey bench: " << e.what() << "\n";
    return kExitRuntime;
  } catch (const PlannedOutOfMemory& e) {  // refused before anything is allocated
    std::cerr << "odyssey bench: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const DataError& e) {
    std::cerr << "odyssey bench: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {
    std::cerr << "odyssey bench: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "odyssey bench: " << e.what() << "\n";
    return kExitRuntime;
  }
  if (!prints) return kExitOk;

  if (args->json) {
    std::string json;
    JsonWriter w(json);
    w.begin_object().key("preset").value(args->positional[0]).key("rounds").value(result.rounds);
    w.key("threads").value(result.threads).key("world_size").value(result.world_size);
    w.key("ulysses_degree").value(result.ulysses_degree).key("emulated").value(result.emulated);
    w.key("variants").begin_array();
    for (const auto& v : result.variants) {
      const auto range = result.ratio_range(v);
      w.begin_object()
          .key("name")
          .value(v.name)
          .key("baseline")
          .value(v.baseline)
          .key("fsdp")
          .value(v.fsdp)
          .key("untied_ulysses")
          .value(v.memory.untied_ulysses)
          .key("median_step_s")
          .value(v.median_s())
          .key("min_step_s")
          .value(v.min_s())
          .key("max_step_s")
          .value(v.max_s())
          .key("ratio")
          .value(result.ratio(v))
          .key("ratio_min")
          .value(range.first)
          .key("ratio_max")
          .value(range.second);
      if (v.planned_step_s > 0)
        w.key("planned_step_s").value(v.planned_step_s).key("planned_ratio").value(result.planned_ratio(v));
      else
        w.key("planned_step_s").null().key("planned_ratio").null().key("planned_error").value(v.planned_error);
      w.key("device_peak_bytes").value(v.device_peak).key("host_peak_bytes").value(v.host_peak).end_object();
    }
    w.end_array().end_object();
    std::cout << json << "\n";
    return kExitOk;
  }
  std::printf("odyssey bench %s: %d rounds, one step per variant per round (interleaved), %d intra-op thread%s\n",
              args->positional[0].c_str(), result.rounds, result.threads, result.threads == 1 ? "" : "s");
  if (result.world_size > 1 || result.emulated)
    std::printf(
        "every variant on %lld ranks%s (Ulysses %lld x data %lld): plain = plain %s, no FSDP; peaks: max over ranks\n",
        static_cast<long long>(result.world_size), result.emulated ? ", emulated" : "",
        static_cast<long long>(result.ulysses_degree),
        static_cast<long long>(result.world_size / std::max<int64_t>(1, result.ulysses_degree)),
        result.ulysses_degree > 1 ? "Ulysses" : "data parallel");
  int name_width = 14;  // the longest variant name ("offload_optimizer") sets the column
  for (const auto& v : result.variants) name_width = std::max(name_width, static_cast<int>(v.name.size()));
  std::printf("%-*s %10s %16s %22s %8s %12s %10s\n", name_width, "variant", "median ms", "min..max ms",
              "ratio (round spread)", "planned", "device peak", "host peak");
  for (const auto& v : result.variants) {
    char ratio[64] = "";
    char planned[32] = "";
    if (!v.baseline.empty()) {
      const auto range = result.ratio_range(v);
      std::snprintf(ratio, sizeof ratio, "%.2fx %s (%.2f..%.2f)", result.ratio(v),
                    v.baseline == "plain" ? "plain" : "ckpt", range.first, range.second);
      if (result.planned_ratio(v) > 0)
        std::snprintf(planned, sizeof planned, "%.2fx", result.planned_ratio(v));
      else
        std::snprintf(planned, sizeof planned, "-");
    }
    std::printf("%-*s %10.1f %7.1f..%-7.1f %22s %8s %9.1f MiB %6.1f MiB\n", name_width, v.name.c_str(),
                1000 * v.median_s(), 1000 * v.min_s(), 1000 * v.max_s(), ratio, planned, v.device_peak / 1048576.0,
                v.host_peak / 1048576.0);
  }
  std::printf(
      "planned: the planner's step-time ratio for the same configs on the %s profile (hardware.compute_efficiency, "
      "attention_efficiency, untied_attention_efficiency)\n",
      cfg.hardware.profile.c_str());
  for (const auto& v : result.variants)
    if (!v.planned_error.empty()) std::printf("not planned: %s: %s\n", v.name.c_str(), v.planned_error.c_str());
  std::printf(
      "targets: checkpointing <= 1.45x plain, offload <= 1.10x checkpointing, each tiling <= 1.10x plain, "
      "optimizer offload <= 1.10x plain");
  std::printf(result.ulysses_degree > 1 ? ", Untied Ulysses at the largest chunk < 1.10x plain Ulysses\n" : "\n");
  return kExitOk;
}

const CommandRegistration registration{
    Command{60, "bench", "bench PRESET [--set k=v]... [--steps ROUNDS] [--json] [--quiet] [--force]",
            "step-time ratios of each memory and parallel technique, interleaved in one run", run_bench_command}};

}  // namespace
}  // namespace odyssey::cli
