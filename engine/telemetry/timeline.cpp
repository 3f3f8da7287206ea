// The studio's live feed: phase edges become MemorySamples, finished phases PhaseSpans, both with
// interned phase ids. defines: Timeline members
#include "engine/telemetry/timeline.h"

namespace odyssey {

Timeline::Timeline(TimelineOptions options)
    : samples_(options.sample_capacity), spans_(options.span_capacity), metrics_(options.metrics_capacity) {}

void Timeline::attach(PhaseRecorder& recorder) {
  recorder.add_edge_sink([this](const PhaseEdge& edge) { on_edge(edge); });
  recorder.add_sink([this](const PhaseRecord& record) { on_record(record); });
}

void Timeline::on_edge(const PhaseEdge& edge) {
  MemorySample s;
  s.t_s = edge.t_s;
  s.step = edge.step;
  s.rank = edge.rank;
  s.phase_id = edge.path != nullptr ? phase_id(*edge.path) : -1;
  s.device_bytes = edge.device_bytes;
  s.host_bytes = edge.host_bytes;
  samples_.push(s);
}

void Timeline::on_record(const PhaseRecord& record) {
  PhaseSpan span;
  span.step = record.step;
  span.rank = record.rank;
  span.phase_id = phase_id(record.path);
  span.depth = record.depth;
  span.t_begin_s = record.t_begin_s;
  span.t_end_s = record.t_end_s;
  span.device_begin = record.device_begin;
  span.device_end = record.device_end;
  span.device_peak = record.device_peak;
  span.host_peak = record.host_peak;
  spans_.push(span);
}

int32_t Timeline::phase_id(const std::string& path) {
  std::lock_guard<std::mutex> lock(names_mutex_);
  auto it = ids_.find(path);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<int32_t>(names_.size());
  names_.push_back(path);
  ids_.emplace(path, id);
  return id;
}

std::vector<std::string> Timeline::phase_names() const {
  std::lock_guard<std::mutex> lock(names_mutex_);
  return names_;
}

std::string Timeline::phase_name(int32_t id) const {
  std::lock_guard<std::mutex> lock(names_mutex_);
  return id >= 0 && static_cast<size_t>(id) < names_.size() ? names_[static_cast<size_t>(id)] : std::string();
}

}  // namespace odyssey
