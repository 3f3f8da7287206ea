// odyssey bench PRESET [--set k=v]... [--steps ROUNDS] [--json]: the preset's model stepped plain,
// with each memory technique alone and with all together, interleaved in one run; prints the
// median step time per variant, its ratio to the baseline (with the per-round spread) and the
// measured device/host peaks; with world_size > 1 also the parallel rungs (plain Ulysses, +FSDP,
// Untied Ulysses per stage size). Exit 0, 1 (runtime failure), 2 (bad input).
#include <cstdio>
#include <iostream>

#include "app/cli/cli.h"
#include "engine/parallel/parallel_bench.h"
#include "engine/train/bench.h"
#include "engine/train/data.h"
#include "engine/train/trainer.h"
#include "engine/util/json.h"

namespace odyssey::cli {
namespace {

constexpr int kDefaultRounds = 10;

int run_bench_command(int argc, char** argv, int first) {
  ArgSpec spec;
  spec.set = spec.json = spec.steps = spec.quiet = true;
  auto args = parse_args("bench", spec, argc, argv, first, std::cerr);
  if (!args) return kExitBadInput;
  auto loaded = load_or_report(args->positional[0], args->overrides, std::cerr);
  if (!loaded) return kExitBadInput;
  const RunConfig& cfg = loaded->config;
  const int rounds = args->steps ? static_cast<int>(*args->steps) : kDefaultRounds;

  BenchResult result;
  std::vector<ParallelBenchRow> parallel;  // Ulysses / FSDP / Untied rungs (world_size > 1)
  try {
    result = run_bench(cfg, rounds, [&](const std::string& line) {
      if (!args->json && !args->quiet) std::cerr << "\r" << line << std::flush;
    });
    if (!args->json && !args->quiet) std::cerr << "\n";
    if (cfg.parallel.world_size > 1 && !cfg.parallel.emulate) parallel = parallel_bench(cfg, rounds);
  } catch (const StepFailure& e) {
    std::cerr << "odyssey bench: " << e.what() << "\n";
    return kExitRuntime;
  } catch (const DataError& e) {
    std::cerr << "odyssey bench: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {
    std::cerr << "odyssey bench: " << e.what() << "\n";
    return kExitBadInput;
  }

  if (args->json) {
    std::string json;
    JsonWriter w(json);
    w.begin_object().key("preset").value(args->positional[0]).key("rounds").value(result.rounds);
    w.key("threads").value(result.threads).key("variants").begin_array();
    for (const auto& v : result.variants) {
      const auto range = result.ratio_range(v);
      w.begin_object()
          .key("name").value(v.name)
          .key("baseline").value(v.baseline)
          .key("median_step_s").value(v.median_s())
          .key("min_step_s").value(v.min_s())
          .key("max_step_s").value(v.max_s())
          .key("ratio").value(result.ratio(v))
          .key("ratio_min").value(range.first)
          .key("ratio_max").value(range.second)
          .key("device_peak_bytes").value(v.device_peak)
          .key("host_peak_bytes").value(v.host_peak)
          .end_object();
    }
    w.end_array().key("parallel").begin_array();
    for (const auto& row : parallel)
      w.begin_object().key("name").value(row.name).key("median_step_s").value(row.median_step_s).key("ratio").value(row.ratio).end_object();
    w.end_array().end_object();
    std::cout << json << "\n";
    return kExitOk;
  }
  std::printf("odyssey bench %s: %d rounds, one step per variant per round (interleaved), %d intra-op thread%s\n",
              args->positional[0].c_str(), result.rounds, result.threads, result.threads == 1 ? "" : "s");
  std::printf("%-14s %10s %16s %22s %12s %10s\n", "variant", "median ms", "min..max ms", "ratio (round spread)",
              "device peak", "host peak");
  for (const auto& v : result.variants) {
    char ratio[64] = "";
    if (!v.baseline.empty()) {
      const auto range = result.ratio_range(v);
      std::snprintf(ratio, sizeof ratio, "%.2fx %s (%.2f..%.2f)", result.ratio(v),
                    v.baseline == "plain" ? "plain" : "ckpt", range.first, range.second);
    }
    std::printf("%-14s %10.1f %7.1f..%-7.1f %22s %9.1f MiB %6.1f MiB\n", v.name.c_str(), 1000 * v.median_s(),
                1000 * v.min_s(), 1000 * v.max_s(), ratio, v.device_peak / 1048576.0, v.host_peak / 1048576.0);
  }
  std::printf("targets: checkpointing <= 1.45x plain, offload <= 1.10x checkpointing, each tiling <= 1.10x plain\n");
  if (!parallel.empty()) {
    std::printf("\nparallel rungs on %lld rank threads (engine/parallel's parallel_bench, same rounds):\n",
                static_cast<long long>(cfg.parallel.world_size));
    std::printf("%-22s %10s %8s\n", "variant", "median ms", "ratio");
    for (const auto& row : parallel)
      std::printf("%-22s %10.1f %7.2fx\n", row.name.c_str(), 1000 * row.median_step_s, row.ratio);
  }
  return kExitOk;
}

const CommandRegistration registration{
    Command{60, "bench", "bench PRESET [--set k=v]... [--steps ROUNDS] [--json]",
            "step-time ratios of each memory technique, interleaved in one run", run_bench_command}};

}  // namespace
}  // namespace odyssey::cli
