// planner_bench: how long the planner takes for what the studio and the CLI ask of it: one
// plan_memory, one plan_peak, the full ladder plus every max-context solve (the 5 ms target), and
// tune, the fastest memory table that fits (the studio's button: well under a second).
// Usage: planner_bench [PRESET...] (default: every shipped preset). Prints median and best
// of repeated runs in one process, so figures taken side by side are comparable.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/config/preset.h"
#include "engine/planner/planner.h"

using namespace odyssey;

namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double median_ms = 0, best_ms = 0;
};

/// Runs `fn` `reps` times after one warm-up; returns median and best wall time in ms.
template <typename Fn>
Timing measure(int reps, Fn&& fn) {
  fn();
  std::vector<double> ms;
  ms.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

volatile int64_t g_sink = 0;  // keeps the optimiser from dropping the work

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> presets;
  for (int i = 1; i < argc; ++i) presets.push_back(argv[i]);
  if (presets.empty())
    for (const char* name : {"llama3-8b-3m-8xh100", "llama3-8b-5m-8xh100-untied", "qwen3-32b-16xh100",
                             "llama3-8b-1xh100", "llama3.2-1b-1xh100", "tiny-cpu"})
      presets.push_back(std::string(ODYSSEY_SOURCE_DIR) + "/presets/" + name + ".toml");
  constexpr double kTargetMs = 5.0;
  constexpr double kTuneTargetMs = 250.0;
  bool all_ok = true;
  std::printf("%-34s %-34s %10s %10s\n", "preset", "what", "median ms", "best ms");
  for (const auto& path : presets) {
    const LoadedPreset loaded = load_preset(path);
    if (!loaded.ok()) {
      for (const auto& issue : loaded.issues) std::fprintf(stderr, "%s\n", issue.format().c_str());
      return 2;
    }
    const RunConfig& cfg = loaded.config;
    const std::string name = path.substr(path.find_last_of('/') + 1);
    const Timing peak = measure(200, [&] { g_sink = g_sink + plan_peak(cfg).peak_bytes; });
    const Timing plan = measure(100, [&] { g_sink = g_sink + plan_memory(cfg).peak_bytes; });
    const Timing all = measure(30, [&] {
      const auto rungs = plan_ladder(cfg);  // 7 plans and 7 max-context solves
      g_sink = g_sink + rungs.back().max_seq_len + solve_max_seq_len(cfg);
    });
    int64_t tables = 0;
    const Timing tuned = measure(5, [&] {
      const TuneResult t = tune(cfg);
      tables = t.evaluated;
      g_sink = g_sink + t.choice;
    });
    std::printf("%-34s %-34s %10.4f %10.4f\n", name.c_str(), "plan_peak", peak.median_ms, peak.best_ms);
    std::printf("%-34s %-34s %10.4f %10.4f\n", name.c_str(), "plan_memory", plan.median_ms, plan.best_ms);
    std::printf("%-34s %-34s %10.4f %10.4f  %s\n", name.c_str(), "ladder + all max-context solves", all.median_ms,
                all.best_ms, all.median_ms < kTargetMs ? "(< 5 ms: ok)" : "(over the 5 ms target)");
    const std::string tune_what = "tune (" + std::to_string(tables) + " memory tables)";
    std::printf("%-34s %-34s %10.4f %10.4f  %s\n", name.c_str(), tune_what.c_str(), tuned.median_ms, tuned.best_ms,
                tuned.median_ms < kTuneTargetMs ? "(< 250 ms: ok)" : "(over the 250 ms target)");
    all_ok = all_ok && all.median_ms < kTargetMs && tuned.median_ms < kTuneTargetMs;
  }
  return all_ok ? 0 : 1;
}
