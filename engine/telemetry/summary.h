// summary.json: what a finished (or stopped, or failed) run leaves behind: final metrics, loss and
// throughput over the run, per-rank peaks with their category breakdown, and the per-phase peak
// table. Written atomically. No LibTorch. defines: RankPeak, RunSummary, summary_json,
// write_summary_json
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/telemetry/samples.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

class PhasePeakTable;

/// One rank's peaks over the run (from MemoryTracker::snapshot at the end).
struct RankPeak {
  int rank = 0;
  int64_t device_peak = 0;
  int64_t host_peak = 0;
  int64_t device_reserved = 0;  ///< CUDA only
  int64_t ooms = 0;
  std::array<int64_t, kMemCategoryCount> category_at_peak{};

  static RankPeak from(int rank, const MemorySnapshot& snapshot);
};

/// Usage: RunSummary s; s.status = "finished"; s.steps = all_metrics; s.ranks = {...};
///        s.phases = &run_phase_peaks; write_summary_json(dir + "/summary.json", s, &err);
struct RunSummary {
  std::string preset;               ///< preset path or name
  std::string status = "finished";  ///< "finished", "stopped" or "failed"
  std::string error;                ///< the failure, when status is "failed"
  double wall_s = 0;
  /// Seconds from the run's start to this process's first step (checks, groups, the model built
  /// and initialised or loaded, the data opened); negative when no step started (written as null).
  double setup_s = -1;
  std::vector<StepMetrics> steps;  ///< every step of the run, in order
  /// The step each process of the run began with (a continued run: the first process's and each
  /// resume's), left out of the means with the first step as warm-up; empty: the first step only.
  std::vector<int64_t> process_starts;
  std::vector<RankPeak> ranks;  ///< the ranks known in detail (any subset); per-rank peaks also from the steps
  const PhasePeakTable* phases = nullptr;
  /// A JSON object the trainer adds under "extra" (config echo, planner prediction...); must
  /// parse as an object, or the write fails.
  std::string extra_json;
};

/// The document: {"status", "preset", "error", "wall_s", "setup_s", "steps", "final" (the last step's
/// metrics.jsonl object), "loss_first", "loss_final", "loss_min", "loss_meaningful",
/// "tokens_per_s_mean", "step_time_s_mean" (both without each process's first step, when there are more),
/// "peak_bytes", "host_peak_bytes", "rank_peak_bytes", "rank_host_peak_bytes",
/// "ranks" [{"rank", "device_peak", "host_peak", "device_reserved", "ooms", "category_at_peak"}],
/// "phases" [PhasePeakTable rows, highest peak first], "extra"}. Throws std::invalid_argument
/// when extra_json is not a JSON object.
std::string summary_json(const RunSummary& summary);

/// Writes summary_json to `path` through a temporary file and a rename (never half a file).
/// False with *error naming the file and the reason.
bool write_summary_json(const std::string& path, const RunSummary& summary, std::string* error);

}  // namespace odyssey
