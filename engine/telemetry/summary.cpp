// summary.json: aggregates over the steps, per-rank peaks, the phase table, atomic write.
// defines: RankPeak::from, summary_json, write_summary_json
#include "engine/telemetry/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "engine/telemetry/metrics_jsonl.h"
#include "engine/telemetry/phase_peaks.h"
#include "engine/util/files.h"
#include "engine/util/json.h"
#include "engine/util/json_read.h"

namespace odyssey {

RankPeak RankPeak::from(int rank, const MemorySnapshot& s) {
  RankPeak p;
  p.rank = rank;
  p.device_peak = s.device_peak;
  p.host_peak = s.host_peak;
  p.device_reserved = s.device_reserved;
  p.ooms = s.ooms;
  p.category_at_peak = s.category_at_peak;
  return p;
}

namespace {

/// Per-rank maxima over the steps (element-wise; lists may differ in length).
std::vector<int64_t> max_per_rank(const std::vector<StepMetrics>& steps, bool host) {
  std::vector<int64_t> out;
  for (const auto& m : steps) {
    const auto& v = host ? m.rank_host_peak_bytes : m.rank_peak_bytes;
    if (v.size() > out.size()) out.resize(v.size(), 0);
    for (size_t i = 0; i < v.size(); ++i) out[i] = std::max(out[i], v[i]);
  }
  return out;
}

void write_list(JsonWriter& w, const std::vector<int64_t>& values) {
  w.begin_array();
  for (int64_t v : values) w.value(v);
  w.end_array();
}

}  // namespace

std::string summary_json(const RunSummary& s) {
  std::optional<Json> extra;
  if (!s.extra_json.empty()) {
    std::string why;
    extra = parse_json(s.extra_json, &why);
    if (!extra || !extra->is_object())
      throw std::invalid_argument("summary.json: extra_json must be a JSON object" +
                                  (why.empty() ? std::string() : " (" + why + ")"));
  }
  const std::vector<StepMetrics>& steps = s.steps;
  // Throughput and step time without each process's first step (allocator warm-up, lazy set-up)
  // when other steps remain.
  auto warm_up = [&](size_t i) {
    return i == 0 ||
           std::find(s.process_starts.begin(), s.process_starts.end(), steps[i].step) != s.process_starts.end();
  };
  size_t counted = 0;
  for (size_t i = 0; i < steps.size(); ++i) counted += warm_up(i) ? 0 : 1;
  double tps = 0, st = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (counted > 0 && warm_up(i)) continue;
    tps += steps[i].tokens_per_s;
    st += steps[i].step_time_s;
  }
  const double n = static_cast<double>(counted > 0 ? counted : steps.size());
  double loss_min = std::numeric_limits<double>::infinity();
  bool meaningful = !steps.empty();
  for (const auto& m : steps) {
    if (std::isfinite(m.loss)) loss_min = std::min(loss_min, m.loss);
    meaningful = meaningful && m.loss_meaningful;
  }

  // Per rank, the most of the steps' peaks and of `ranks` (which may hold only some ranks: a
  // torchrun process's own, the steps of this process of a continued run).
  std::vector<int64_t> rank_peaks = max_per_rank(steps, false), rank_host_peaks = max_per_rank(steps, true);
  for (const auto& r : s.ranks) {
    if (r.rank < 0) continue;
    const size_t at = static_cast<size_t>(r.rank);
    if (rank_peaks.size() <= at) rank_peaks.resize(at + 1, 0);
    if (rank_host_peaks.size() <= at) rank_host_peaks.resize(at + 1, 0);
    rank_peaks[at] = std::max(rank_peaks[at], r.device_peak);
    rank_host_peaks[at] = std::max(rank_host_peaks[at], r.host_peak);
  }
  int64_t peak = 0, host_peak = 0;
  for (int64_t v : rank_peaks) peak = std::max(peak, v);
  for (int64_t v : rank_host_peaks) host_peak = std::max(host_peak, v);
  for (const auto& m : steps) peak = std::max(peak, m.peak_bytes);

  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.key("status").value(s.status);
  w.key("preset").value(s.preset);
  w.key("error").value(s.error);
  w.key("wall_s").value(s.wall_s);
  w.key("setup_s");
  if (s.setup_s < 0)
    w.null();
  else
    w.value(s.setup_s);
  w.key("steps").value(static_cast<int64_t>(steps.size()));
  w.key("final");
  if (steps.empty())
    w.null();
  else
    w.raw(metrics_json_line(steps.back()));
  w.key("loss_first");
  if (steps.empty())
    w.null();
  else
    w.value(steps.front().loss);
  w.key("loss_final");
  if (steps.empty())
    w.null();
  else
    w.value(steps.back().loss);
  w.key("loss_min").value(loss_min);  // Inf (no finite loss) is written as null
  w.key("loss_meaningful").value(meaningful);
  w.key("tokens_per_s_mean").value(n > 0 ? tps / n : 0.0);
  w.key("step_time_s_mean").value(n > 0 ? st / n : 0.0);
  w.key("peak_bytes").value(peak);
  w.key("host_peak_bytes").value(host_peak);
  w.key("rank_peak_bytes");
  write_list(w, rank_peaks);
  w.key("rank_host_peak_bytes");
  write_list(w, rank_host_peaks);
  w.key("ranks").begin_array();
  for (const auto& r : s.ranks) {
    w.begin_object();
    w.key("rank").value(r.rank).key("device_peak").value(r.device_peak).key("host_peak").value(r.host_peak);
    w.key("device_reserved").value(r.device_reserved).key("ooms").value(r.ooms);
    w.key("category_at_peak");
    write_categories_json(w, r.category_at_peak);
    w.end_object();
  }
  w.end_array();
  w.key("phases");
  if (s.phases == nullptr)
    w.begin_array().end_array();
  else
    s.phases->write_table_json(w, /*highest_first=*/true);
  w.key("extra");
  if (s.extra_json.empty())
    w.begin_object().end_object();
  else
    w.raw(s.extra_json);
  w.end_object();
  return out;
}

bool write_summary_json(const std::string& path, const RunSummary& summary, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error != nullptr) *error = why;
    return false;
  };
  std::string text;
  try {
    text = summary_json(summary);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  text += '\n';
  try {
    write_file_atomically(path, text);  // a reader sees the old summary or the new, never half
  } catch (const std::exception& e) {
    return fail(std::string("summary.json: ") + e.what());
  }
  return true;
}

}  // namespace odyssey
