// odyssey bench: the same model stepped plain, with each memory technique alone and with all of
// them, and on a multi-rank preset with the parallel techniques (FSDP, Untied Ulysses at every
// valid heads_per_stage), interleaved round by round in one run, so the step-time ratios compare
// like with like on a noisy machine, each beside the planner's step for the same config.
// defines: BenchVariant, BenchResult, bench_variants, variant_config, run_bench
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

/// One configuration of the techniques and what it measured.
struct BenchVariant {
  /// "plain", "checkpointing", "offload", "tiled_mlp", "tiled_loss", "offload_optimizer", "all",
  /// "keep_attention" (a preset that keeps attention); on several ranks also "fsdp" and
  /// "untied_hps=K" (Ulysses degree > 1, or untied_ulysses set: head chunking)
  std::string name;
  std::string baseline;  ///< the variant its ratio is taken against ("" for plain)
  MemoryConfig memory;
  bool fsdp = false;           ///< stepped by the FSDP trainer
  std::vector<double> step_s;  ///< every measured step of rank 0 (after the warm-up round)
  int64_t device_peak = 0;     ///< max over its steps and the ranks, without the other trainer's states
  int64_t host_peak = 0;
  /// The planner's step for variant_config on cfg's hardware profile; 0 where the planner refused
  /// the config (the CLI prints "-" and planned_error, the JSON null)
  double planned_step_s = 0;
  std::string planned_error;  ///< why the planner refused the variant's config ("" when planned)
  double median_s() const;
  double min_s() const;
  double max_s() const;
};

struct BenchResult {
  std::vector<BenchVariant> variants;
  int rounds = 0;
  int threads = 0;                             ///< intra-op threads per rank
  int64_t world_size = 1, ulysses_degree = 1;  ///< where every variant runs (plain = plain Ulysses when > 1)
  bool emulated = false;
  const BenchVariant* find(const std::string& name) const;
  /// median(variant) / median(its baseline).
  double ratio(const BenchVariant& v) const;
  /// The ratio's spread: min and max over rounds of variant / baseline step times of the same round.
  std::pair<double, double> ratio_range(const BenchVariant& v) const;
  /// The planner's ratio beside ratio(): planned_step_s(variant) / planned_step_s(its baseline);
  /// 1 for plain, 0 where either was not planned.
  double planned_ratio(const BenchVariant& v) const;
};

/// On cfg's ranks, without FSDP and without Untied Ulysses unless named: plain; checkpointing;
/// offload (= checkpointing + offload, against checkpointing); tiled MLP; tiled loss; all four
/// together; where cfg keeps attention, keep_attention (checkpointing that keeps it, offloaded as
/// cfg offloads it; every other variant checkpoints plainly); with world_size > 1 fsdp (plain +
/// FSDP); with Ulysses degree > 1 (or untied_ulysses set) untied_hps=K for every valid
/// heads_per_stage K (largest = one stage). Every ratio is against plain but offload's and
/// keep_attention's (against checkpointing). Tile sizes come from cfg.memory.
std::vector<BenchVariant> bench_variants(const RunConfig& cfg);

/// The config a variant steps with, as the planner plans it: cfg with the variant's memory
/// techniques and FSDP (run_bench steps it on its FSDP or its unsharded trainer, built from cfg,
/// with the variant's memory set before each step).
RunConfig variant_config(const RunConfig& cfg, const BenchVariant& v);

/// Steps the model on cfg's ranks (run_on_ranks: threads, torchrun, emulation): one warm-up round,
/// then `rounds` rounds of one step per variant in turn, the ranks in lockstep. Two trainers
/// when FSDP variants exist (one sharded, one not); each variant's peak leaves out the other
/// trainer's persistent bytes. Throws on bad input (a layout the process cannot launch first, a
/// variant whose config breaks a rule (std::invalid_argument), then PlannedOutOfMemory for a
/// variant the planner says does not fit, unless `force`); a failing step (OOM) propagates as
/// StepFailure.
BenchResult run_bench(const RunConfig& cfg, int rounds, const std::function<void(const std::string&)>& log,
                      bool force = false);

}  // namespace odyssey
