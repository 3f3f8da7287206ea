// odyssey bench: the same model stepped plain, with each memory technique alone and with all of
// them, interleaved round by round in one process, so the step-time ratios compare like with like
// on a noisy machine. defines: BenchVariant, BenchResult, bench_variants, run_bench
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

/// One configuration of the techniques and what it measured.
struct BenchVariant {
  std::string name;           ///< "plain", "checkpointing", "offload", "tiled_mlp", "tiled_loss", "all"
  std::string baseline;       ///< the variant its ratio is taken against ("" for plain)
  MemoryConfig memory;
  std::vector<double> step_s;  ///< every measured step (after the warm-up round)
  int64_t device_peak = 0;     ///< max over its steps (rank 0)
  int64_t host_peak = 0;
  double median_s() const;
  double min_s() const;
  double max_s() const;
};

struct BenchResult {
  std::vector<BenchVariant> variants;
  int rounds = 0;
  int threads = 0;  ///< intra-op threads per rank
  const BenchVariant* find(const std::string& name) const;
  /// median(variant) / median(its baseline).
  double ratio(const BenchVariant& v) const;
  /// The ratio's spread: min and max over rounds of variant / baseline step times of the same round.
  std::pair<double, double> ratio_range(const BenchVariant& v) const;
};

/// plain; checkpointing; offload (= checkpointing + offload, against checkpointing); tiled MLP;
/// tiled loss; all four together. Tile sizes come from `base`.
std::vector<BenchVariant> bench_variants(const MemoryConfig& base);

/// Steps one model: one warm-up round, then `rounds` rounds of one step per variant in turn.
/// Throws on bad input; a failing step (OOM) propagates as StepFailure.
BenchResult run_bench(const RunConfig& cfg, int rounds, const std::function<void(const std::string&)>& log);

}  // namespace odyssey
