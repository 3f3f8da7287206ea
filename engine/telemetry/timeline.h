// The studio's live feed: ring buffers of memory samples (one per phase edge), phase spans and
// step metrics, filled by rank threads and read by cursor from the UI thread; plus the table of
// phase names that samples and spans refer to by id. defines: TimelineOptions, Timeline
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/telemetry/samples.h"
#include "engine/telemetry/phase.h"
#include "engine/telemetry/ring_buffer.h"

namespace odyssey {

/// Capacities (entries). The defaults hold about 2M samples (80 MiB), 1M spans, 64K steps.
struct TimelineOptions {
  size_t sample_capacity = size_t(1) << 21;
  size_t span_capacity = size_t(1) << 20;
  size_t metrics_capacity = size_t(1) << 16;
};

/// Usage (per rank thread): timeline.attach(recorder); ... and once per step (any thread):
/// timeline.add_metrics(m). The studio: cursor = timeline.samples_since(cursor, &out).
/// Thread-safe throughout; writers never wait for a whole read (RingBuffer).
class Timeline {
 public:
  explicit Timeline(TimelineOptions options = {});

  /// Sends `recorder`'s edges (as samples) and finished phases (as spans) here. The sinks hold
  /// a pointer to this timeline: it must outlive the recorder.
  void attach(PhaseRecorder& recorder);

  void add_sample(const MemorySample& sample) { samples_.push(sample); }
  void add_span(const PhaseSpan& span) { spans_.push(span); }
  void add_metrics(const StepMetrics& metrics) { metrics_.push(metrics); }
  /// Converts one edge / record (what attach() installs as sinks).
  void on_edge(const PhaseEdge& edge);
  void on_record(const PhaseRecord& record);

  /// The id of a phase path (new paths get the next id). Thread-safe.
  int32_t phase_id(const std::string& path);
  /// Every known path, indexed by id.
  std::vector<std::string> phase_names() const;
  /// The path of one id ("" when unknown).
  std::string phase_name(int32_t id) const;

  /// Copy out what arrived after `cursor` and return the new cursor (Session's contract).
  size_t samples_since(size_t cursor, std::vector<MemorySample>* out, size_t* dropped = nullptr) const {
    return samples_.read_since(cursor, out, dropped);
  }
  size_t spans_since(size_t cursor, std::vector<PhaseSpan>* out, size_t* dropped = nullptr) const {
    return spans_.read_since(cursor, out, dropped);
  }
  size_t metrics_since(size_t cursor, std::vector<StepMetrics>* out, size_t* dropped = nullptr) const {
    return metrics_.read_since(cursor, out, dropped);
  }

  const RingBuffer<MemorySample>& samples() const { return samples_; }
  const RingBuffer<PhaseSpan>& spans() const { return spans_; }
  const RingBuffer<StepMetrics>& metrics() const { return metrics_; }

 private:
  RingBuffer<MemorySample> samples_;
  RingBuffer<PhaseSpan> spans_;
  RingBuffer<StepMetrics> metrics_;
  mutable std::mutex names_mutex_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, int32_t> ids_;
};

}  // namespace odyssey
