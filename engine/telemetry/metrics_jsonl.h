// metrics.jsonl: one JSON object per training step (DESIGN.md's CLI contract), flushed line by
// line so a killed run keeps every finished step. No LibTorch. defines: metrics_json_line,
// MetricsJsonlWriter, write_metrics_jsonl, fill_peaks_from_tracker
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "engine/telemetry/samples.h"

namespace odyssey {

class PhasePeakTable;

/// One line (no newline): {"step", "loss", "loss_meaningful", "tokens_per_s", "step_time_s",
/// "peak_bytes" (max over ranks), "rank_peak_bytes" [...], "host_peak_bytes",
/// "rank_host_peak_bytes" [...], "lr", "grad_norm", "mfu", "config_version",
/// "phase_peak_bytes" {path: max device peak over ranks in this step} (when `phase_peaks`)}.
/// A NaN/Inf loss is written as null.
std::string metrics_json_line(const StepMetrics& m, const PhasePeakTable* phase_peaks = nullptr);

/// Usage: MetricsJsonlWriter out(dir + "/metrics.jsonl"); out.write(m, &step_phase_peaks);
/// Thread-safe. Errors throw std::runtime_error naming the file and the reason.
class MetricsJsonlWriter {
 public:
  /// Truncates `path`; or, with keep_through_step >= 0 (a resumed run continuing its own file),
  /// keeps the lines of steps 1..keep_through_step and appends after them. The steps a killed run
  /// took after its last checkpoint are run again, so their old lines go (as does a line torn by
  /// the kill): every step appears once.
  explicit MetricsJsonlWriter(const std::string& path, int64_t keep_through_step = -1);
  ~MetricsJsonlWriter();
  MetricsJsonlWriter(const MetricsJsonlWriter&) = delete;
  MetricsJsonlWriter& operator=(const MetricsJsonlWriter&) = delete;

  /// Writes and flushes one line. The first line this writer writes carries "first_of_process":
  /// true (a process's first step runs its warm-up: the allocator's first blocks, lazy set-up).
  void write(const StepMetrics& m, const PhasePeakTable* phase_peaks = nullptr);
  /// The lines written so far on the disk (fsync), before a checkpoint that counts them: after a
  /// power loss the checkpoint's steps have their lines (a resume then finds none missing).
  void sync();
  /// Idempotent; the destructor calls it.
  void close();
  const std::string& path() const { return path_; }
  int64_t lines() const;
  /// Lines of the old file a resumed run did not keep (steps after keep_through_step, torn or
  /// unreadable lines), for the run's log.
  int64_t dropped() const { return dropped_; }
  /// The steps of the lines a resumed run kept, read back (phase_peak_bytes aside): with this
  /// process's own they make the whole run's summary.
  const std::vector<StepMetrics>& kept_steps() const { return kept_steps_; }
  /// The kept lines' steps marked "first_of_process": where each earlier process began.
  const std::vector<int64_t>& kept_process_starts() const { return kept_process_starts_; }

 private:
  std::string path_;
  mutable std::mutex mutex_;
  std::FILE* file_ = nullptr;
  int64_t lines_ = 0;
  int64_t dropped_ = 0;
  std::vector<StepMetrics> kept_steps_;
  std::vector<int64_t> kept_process_starts_;
  bool wrote_ = false;  ///< this writer wrote a line (the next is no process's first)
};

/// Sets rank_peak_bytes / rank_host_peak_bytes (indexed by position in `ranks`) and peak_bytes
/// (their max) from the tracker's peaks since each rank's last reset_peak. The trainer resets the
/// peaks at the step start and calls this at its end (multi-process runs gather the lists).
void fill_peaks_from_tracker(StepMetrics& m, const std::vector<int>& ranks);

/// Writes `metrics` as a whole file (Session::export_metrics). False with *error on failure.
bool write_metrics_jsonl(const std::string& path, const std::vector<StepMetrics>& metrics, std::string* error);

}  // namespace odyssey
