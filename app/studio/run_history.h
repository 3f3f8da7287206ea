// What the studio has copied out of the engine: per-step metrics, per-rank memory samples (kept as
// columns so a million points downsample quickly), phase spans, log lines and the steps where a
// live change took effect, with the config each step ran with. defines: RunHistory, RankSeries, ChangeMarker
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "app/studio/engine_control.h"

namespace odyssey::studio {

/// Memory samples of one rank as columns, in arrival (time) order.
struct RankSeries {
  std::vector<double> t_s;
  std::vector<double> device_bytes;
  std::vector<double> host_bytes;
  std::vector<int64_t> step;
  std::vector<int32_t> phase_id;
  size_t size() const { return t_s.size(); }
  /// [first, last) sample indices of `step` (samples arrive in step order).
  std::pair<size_t, size_t> step_range(int64_t step) const;
};

/// The phase spans of one step (all ranks), with what the timeline needs without rescanning them.
struct StepSpans {
  int64_t step = 0;
  std::vector<PhaseSpan> spans;
  double t_min = 0, t_max = 0;  ///< time covered by the step's spans
  int max_depth = 0;
  std::vector<int32_t> peak_index;  ///< per rank: index in `spans` of the highest device peak (-1: none)
};

/// The step where a change to the running configuration took effect.
struct ChangeMarker {
  int64_t step = 0;            ///< first step that ran with the change
  int64_t config_version = 0;  ///< StepMetrics::config_version of that step (0 for restarts)
  std::string what;            ///< "memory.tiled_mlp: true -> false"
  bool restart = false;        ///< the run restarted for it
  RunConfig config;            ///< the config the run had from `step` on (the planned overlay's)
};

class RunHistory {
 public:
  /// Caps that keep a long session's memory bounded (oldest half dropped when exceeded).
  static constexpr size_t kMaxSamplesPerRank = 4'000'000;
  static constexpr size_t kMaxSpans = 2'000'000;
  static constexpr size_t kMaxLogLines = 2000;

  /// Forgets everything: a new run of `started` begins.
  void reset(const RunConfig& started = RunConfig{});
  /// Copies whatever the engine produced since the last poll. Cheap when nothing is new.
  void poll(EngineControl& engine);

  /// A live change to `now` was sent; its marker lands on the first step reporting a newer
  /// config_version.
  void note_live_change(const std::string& what, const RunConfig& now);
  /// The run restarted for a change, with `now`; marked at the next step that arrives.
  void note_restart(const std::string& what, const RunConfig& now);
  /// The config step `step` ran with: the newest marker's at or before it, else the started one.
  const RunConfig& config_at(int64_t step) const;

  const std::vector<StepMetrics>& metrics() const { return metrics_; }
  const std::vector<RankSeries>& ranks() const { return ranks_; }
  /// Spans grouped by step, in step order (a few thousand groups, not millions of spans, to scan).
  const std::deque<StepSpans>& span_steps() const { return span_steps_; }
  /// The spans of one step, or nullptr.
  const StepSpans* spans_of(int64_t step) const;
  size_t span_count() const { return span_count_; }
  const std::vector<std::string>& phase_names() const { return phase_names_; }
  const std::vector<ChangeMarker>& markers() const { return markers_; }
  const std::deque<std::string>& log() const { return log_; }
  /// Sample count over all ranks.
  size_t sample_count() const;
  /// Phase path of a phase id ("?" when unknown).
  const std::string& phase_name(int32_t id) const;
  /// Changes whenever stored samples change (new, trimmed or reset): a cache key for plots.
  uint64_t generation() const { return generation_; }
  /// Changes at every reset (a new run): a cache key for what depends on the run, not its samples.
  uint64_t run_id() const { return run_id_; }
  /// Largest step seen in samples or metrics (-1 when none).
  int64_t last_step() const { return last_step_; }
  /// Appends a line to the log (studio notices appear beside the engine's lines).
  void add_log(std::string line);

  /// Test and benchmark hook: appends samples as if the engine had sent them.
  void ingest_samples(const std::vector<MemorySample>& samples);
  void ingest_metrics(const std::vector<StepMetrics>& metrics);
  void ingest_spans(const std::vector<PhaseSpan>& spans);
  void set_phase_names(std::vector<std::string> names) { phase_names_ = std::move(names); }

 private:
  std::vector<StepMetrics> metrics_;
  std::vector<RankSeries> ranks_;
  std::deque<StepSpans> span_steps_;
  size_t span_count_ = 0;
  std::vector<std::string> phase_names_;
  std::vector<ChangeMarker> markers_;
  std::deque<std::string> log_;
  /// A change sent to the engine and not yet seen in a step.
  struct PendingChange {
    std::string what;
    RunConfig config;
  };
  std::deque<PendingChange> pending_live_;
  std::deque<PendingChange> pending_restart_;
  RunConfig started_;
  uint64_t generation_ = 0;
  uint64_t run_id_ = 0;
  int64_t last_config_version_ = -1;
  int64_t last_step_ = -1;
  size_t metrics_cursor_ = 0, samples_cursor_ = 0, spans_cursor_ = 0;
  std::vector<StepMetrics> scratch_metrics_;
  std::vector<MemorySample> scratch_samples_;
  std::vector<PhaseSpan> scratch_spans_;
};

}  // namespace odyssey::studio
