// Step-time ratios of the parallel techniques, measured side by side in one run on the same rank
// threads: plain Ulysses (the reference), Ulysses + FSDP, and Untied Ulysses at every valid
// heads_per_stage. What `odyssey bench` prints for the parallel rungs. defines: ParallelBenchRow,
// parallel_bench
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

struct ParallelBenchRow {
  std::string name;          ///< "ulysses", "ulysses+fsdp", "untied hps=8"
  double median_step_s = 0;  ///< median over the measured rounds
  double ratio = 1;          ///< median_step_s / the reference's (plain Ulysses)
};

/// Runs `rounds` rounds (after one warm-up round) on cfg.parallel.world_size rank threads with
/// Ulysses degree cfg.parallel.ulysses_degree (world_size when it is 1). Each round takes one step
/// of every variant in turn (one Trainer without and one with FSDP; Untied and its stage size are
/// live toggles), so machine noise hits all variants alike. Memory toggles other than Untied
/// Ulysses come from cfg.memory. Returns the reference first.
std::vector<ParallelBenchRow> parallel_bench(RunConfig cfg, int rounds);

}  // namespace odyssey
