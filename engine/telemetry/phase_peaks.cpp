// The per-phase peak table: rows keyed by phase path, worst occurrence kept, JSON forms for
// metrics.jsonl and summary.json. defines: PhasePeakTable members, write_categories_json
#include "engine/telemetry/phase_peaks.h"

#include <algorithm>

#include "engine/util/json.h"

namespace odyssey {

namespace {
PhasePeak row_of(const PhaseRecord& r) {
  PhasePeak row;
  row.path = r.path;
  row.depth = r.depth;
  row.device_peak = r.device_peak;
  row.peak_rank = r.rank;
  row.peak_step = r.step;
  row.host_peak = r.host_peak;
  row.category_at_peak = r.category_at_peak;
  row.count = 1;
  row.total_s = r.t_end_s - r.t_begin_s;
  row.max_s = row.total_s;
  return row;
}
}  // namespace

void PhasePeakTable::add_locked(const PhasePeak& row) {
  auto it = index_.find(row.path);
  if (it == index_.end()) {
    index_.emplace(row.path, rows_.size());
    rows_.push_back(row);
    return;
  }
  PhasePeak& have = rows_[it->second];
  if (row.device_peak > have.device_peak) {
    have.device_peak = row.device_peak;
    have.peak_rank = row.peak_rank;
    have.peak_step = row.peak_step;
    have.category_at_peak = row.category_at_peak;
  }
  have.host_peak = std::max(have.host_peak, row.host_peak);
  have.count += row.count;
  have.total_s += row.total_s;
  have.max_s = std::max(have.max_s, row.max_s);
}

void PhasePeakTable::add(const PhaseRecord& record) {
  const PhasePeak row = row_of(record);
  std::lock_guard<std::mutex> lock(mutex_);
  add_locked(row);
}

void PhasePeakTable::add(const std::vector<PhaseRecord>& records) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& r : records) add_locked(row_of(r));
}

void PhasePeakTable::merge(const PhasePeakTable& other) {
  if (&other == this) return;
  const std::vector<PhasePeak> theirs = other.rows();
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& row : theirs) add_locked(row);
}

std::vector<PhasePeak> PhasePeakTable::rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rows_;
}

std::vector<PhasePeak> PhasePeakTable::rows_by_peak() const {
  std::vector<PhasePeak> out = rows();
  std::stable_sort(out.begin(), out.end(),
                   [](const PhasePeak& a, const PhasePeak& b) { return a.device_peak > b.device_peak; });
  return out;
}

bool PhasePeakTable::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rows_.empty();
}

void PhasePeakTable::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  rows_.clear();
  index_.clear();
}

void PhasePeakTable::write_peaks_json(JsonWriter& w) const {
  std::lock_guard<std::mutex> lock(mutex_);
  w.begin_object();
  for (const auto& row : rows_) w.key(row.path).value(row.device_peak);
  w.end_object();
}

void PhasePeakTable::write_table_json(JsonWriter& w, bool highest_first) const {
  const std::vector<PhasePeak> rows = highest_first ? rows_by_peak() : this->rows();
  w.begin_array();
  for (const auto& row : rows) {
    w.begin_object();
    w.key("path").value(row.path);
    w.key("depth").value(row.depth);
    w.key("device_peak").value(row.device_peak);
    w.key("peak_rank").value(row.peak_rank);
    w.key("peak_step").value(row.peak_step);
    w.key("host_peak").value(row.host_peak);
    w.key("count").value(row.count);
    w.key("total_s").value(row.total_s);
    w.key("max_s").value(row.max_s);
    w.key("category_at_peak");
    write_categories_json(w, row.category_at_peak);
    w.end_object();
  }
  w.end_array();
}

void write_categories_json(JsonWriter& w, const std::array<int64_t, kMemCategoryCount>& bytes) {
  w.begin_object();
  for (int c = 0; c < kMemCategoryCount; ++c)
    w.key(to_string(static_cast<MemCategory>(c))).value(bytes[static_cast<size_t>(c)]);
  w.end_object();
}

}  // namespace odyssey
