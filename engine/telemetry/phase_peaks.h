// The per-phase peak table: for every phase path, the highest device and host peak over ranks and
// steps, where it happened, how often and how long it ran. Feeds metrics.jsonl (per step) and
// summary.json (whole run). No LibTorch. defines: PhasePeak, PhasePeakTable
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/telemetry/phase.h"

namespace odyssey {

class JsonWriter;

/// One row: the worst occurrence of one phase path.
struct PhasePeak {
  std::string path;
  int depth = 0;
  int64_t device_peak = 0;                                    ///< max over ranks and occurrences
  int peak_rank = 0;                                          ///< rank that reached device_peak
  int64_t peak_step = 0;                                      ///< step in which it did
  int64_t host_peak = 0;                                      ///< max over ranks and occurrences
  std::array<int64_t, kMemCategoryCount> category_at_peak{};  ///< of the device_peak occurrence
  int64_t count = 0;                                          ///< occurrences (all ranks)
  double total_s = 0;                                         ///< summed wall time (all ranks)
  double max_s = 0;                                           ///< longest single occurrence
};

/// Thread-safe: rank threads may add their records concurrently. Rows keep first-seen order
/// (the order phases first finished, children before parents).
class PhasePeakTable {
 public:
  void add(const PhaseRecord& record);
  void add(const std::vector<PhaseRecord>& records);
  void merge(const PhasePeakTable& other);
  std::vector<PhasePeak> rows() const;
  /// Rows sorted by device peak, highest first.
  std::vector<PhasePeak> rows_by_peak() const;
  bool empty() const;
  void clear();

  /// {"path": device_peak, ...}: the compact form for one metrics.jsonl line.
  void write_peaks_json(JsonWriter& w) const;
  /// [{"path":..., "depth":..., "device_peak":..., "peak_rank":..., "peak_step":...,
  ///   "host_peak":..., "count":..., "total_s":..., "max_s":..., "category_at_peak":{...}}, ...]
  /// in first-seen order, or highest device peak first.
  void write_table_json(JsonWriter& w, bool highest_first = false) const;

 private:
  void add_locked(const PhasePeak& row);
  mutable std::mutex mutex_;
  std::vector<PhasePeak> rows_;
  std::unordered_map<std::string, size_t> index_;
};

/// {"params": bytes, ...} for all categories (zeros included, so every series is present).
void write_categories_json(JsonWriter& w, const std::array<int64_t, kMemCategoryCount>& bytes);

}  // namespace odyssey
