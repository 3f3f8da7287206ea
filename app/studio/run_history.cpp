// RunHistory: copies new engine output each frame (short copies under the engine's lock, nothing
// else), files samples into per-rank columns and turns config_version bumps into change markers.
// defines: RunHistory, RankSeries::step_range
#include "app/studio/run_history.h"

#include <algorithm>

namespace odyssey::studio {

namespace {

/// Drops the oldest half of each column once a series passes its cap (amortised O(1) per sample).
void trim_series(RankSeries& s, size_t cap) {
  if (s.size() <= cap) return;
  const size_t drop = s.size() / 2;
  auto cut = [drop](auto& v) { v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(drop)); };
  cut(s.t_s);
  cut(s.device_bytes);
  cut(s.host_bytes);
  cut(s.step);
  cut(s.phase_id);
}

/// Moves the first `count` pending changes into `marker`: their texts joined, the newest config.
template <class Pending>
void take_pending(std::deque<Pending>& pending, int64_t count, ChangeMarker& marker) {
  for (int64_t i = 0; i < count && !pending.empty(); ++i) {
    if (!marker.what.empty()) marker.what += "; ";
    marker.what += pending.front().what;
    marker.config = std::move(pending.front().config);
    pending.pop_front();
  }
}

}  // namespace

std::pair<size_t, size_t> RankSeries::step_range(int64_t s) const {
  const auto lo = std::lower_bound(step.begin(), step.end(), s);
  const auto hi = std::upper_bound(lo, step.end(), s);
  return {static_cast<size_t>(lo - step.begin()), static_cast<size_t>(hi - step.begin())};
}

void RunHistory::reset(const RunConfig& started) {
  const uint64_t next = generation_ + 1;  // caches keyed on the old data must not match the new
  const uint64_t next_run = run_id_ + 1;
  *this = RunHistory();
  generation_ = next;
  run_id_ = next_run;
  started_ = started;
}

const RunConfig& RunHistory::config_at(int64_t step) const {
  for (auto it = markers_.rbegin(); it != markers_.rend(); ++it)
    if (it->step <= step) return it->config;
  return started_;
}

size_t RunHistory::sample_count() const {
  size_t n = 0;
  for (const auto& r : ranks_) n += r.size();
  return n;
}

const std::string& RunHistory::phase_name(int32_t id) const {
  static const std::string unknown = "?";
  return id >= 0 && static_cast<size_t>(id) < phase_names_.size() ? phase_names_[id] : unknown;
}

void RunHistory::add_log(std::string line) {
  log_.push_back(std::move(line));
  while (log_.size() > kMaxLogLines) log_.pop_front();
}

void RunHistory::note_live_change(const std::string& what, const RunConfig& now) {
  pending_live_.push_back({what, now});
}
void RunHistory::note_restart(const std::string& what, const RunConfig& now) {
  pending_restart_.push_back({what, now});
}

void RunHistory::poll(EngineControl& engine) {
  // A cursor that comes back smaller than ours means the engine started counting afresh (a new
  // run behind our back): read from zero.
  auto fetch = [](size_t& cursor, auto&& call, auto& scratch) {
    scratch.clear();
    size_t next = call(cursor, &scratch);
    if (next < cursor) {
      scratch.clear();
      next = call(0, &scratch);
    }
    cursor = next;
  };
  fetch(
      metrics_cursor_, [&](size_t c, std::vector<StepMetrics>* o) { return engine.metrics_since(c, o); },
      scratch_metrics_);
  fetch(
      samples_cursor_, [&](size_t c, std::vector<MemorySample>* o) { return engine.samples_since(c, o); },
      scratch_samples_);
  fetch(
      spans_cursor_, [&](size_t c, std::vector<PhaseSpan>* o) { return engine.spans_since(c, o); }, scratch_spans_);
  // Phase names only grow; refetch when a new id shows up.
  int32_t max_id = -1;
  for (const auto& s : scratch_samples_) max_id = std::max(max_id, s.phase_id);
  for (const auto& s : scratch_spans_) max_id = std::max(max_id, s.phase_id);
  if (max_id >= 0 && static_cast<size_t>(max_id) >= phase_names_.size()) phase_names_ = engine.phase_names();
  ingest_samples(scratch_samples_);
  ingest_spans(scratch_spans_);
  ingest_metrics(scratch_metrics_);
  for (auto& line : engine.drain_log()) add_log(std::move(line));
}

void RunHistory::ingest_samples(const std::vector<MemorySample>& samples) {
  for (const auto& s : samples) {
    if (s.rank < 0) continue;
    if (static_cast<size_t>(s.rank) >= ranks_.size()) ranks_.resize(s.rank + 1);
    RankSeries& r = ranks_[s.rank];
    r.t_s.push_back(s.t_s);
    r.device_bytes.push_back(static_cast<double>(s.device_bytes));
    r.host_bytes.push_back(static_cast<double>(s.host_bytes));
    r.step.push_back(s.step);
    r.phase_id.push_back(s.phase_id);
    last_step_ = std::max(last_step_, s.step);
  }
  for (auto& r : ranks_) trim_series(r, kMaxSamplesPerRank);
  if (!samples.empty()) ++generation_;
}

const StepSpans* RunHistory::spans_of(int64_t step) const {
  const auto it = std::lower_bound(span_steps_.begin(), span_steps_.end(), step,
                                   [](const StepSpans& g, int64_t s) { return g.step < s; });
  return it != span_steps_.end() && it->step == step ? &*it : nullptr;
}

void RunHistory::ingest_spans(const std::vector<PhaseSpan>& spans) {
  for (const auto& s : spans) {
    // Spans arrive in (roughly) step order: the group is the last one or very close to it.
    auto it = span_steps_.end();
    while (it != span_steps_.begin() && std::prev(it)->step >= s.step) --it;
    if (it == span_steps_.end() || it->step != s.step) {
      StepSpans fresh;
      fresh.step = s.step;
      fresh.t_min = s.t_begin_s;
      fresh.t_max = s.t_end_s;
      it = span_steps_.insert(it, std::move(fresh));
    }
    StepSpans& g = *it;
    g.t_min = std::min(g.t_min, s.t_begin_s);
    g.t_max = std::max(g.t_max, s.t_end_s);
    g.max_depth = std::max(g.max_depth, s.depth);
    if (s.rank >= 0) {
      if (static_cast<size_t>(s.rank) >= g.peak_index.size()) g.peak_index.resize(s.rank + 1, -1);
      int32_t& best = g.peak_index[s.rank];
      const PhaseSpan* b = best >= 0 ? &g.spans[best] : nullptr;
      if (!b || s.device_peak > b->device_peak || (s.device_peak == b->device_peak && s.depth > b->depth))
        best = static_cast<int32_t>(g.spans.size());
    }
    g.spans.push_back(s);
    ++span_count_;
    last_step_ = std::max(last_step_, s.step);
  }
  while (span_count_ > kMaxSpans && span_steps_.size() > 1) {
    span_count_ -= span_steps_.front().spans.size();
    span_steps_.pop_front();
  }
}

void RunHistory::ingest_metrics(const std::vector<StepMetrics>& metrics) {
  for (const auto& m : metrics) {
    if (!pending_restart_.empty()) {
      ChangeMarker marker{m.step, 0, "", true, config_at(m.step)};
      take_pending(pending_restart_, static_cast<int64_t>(pending_restart_.size()), marker);
      markers_.push_back(std::move(marker));
      last_config_version_ = m.config_version;  // versions may count afresh after a restart
    } else if (last_config_version_ >= 0 && m.config_version > last_config_version_) {
      ChangeMarker marker{m.step, m.config_version, "", false, config_at(m.step)};
      take_pending(pending_live_, m.config_version - last_config_version_, marker);
      if (marker.what.empty()) marker.what = "live change";
      markers_.push_back(std::move(marker));
    }
    last_config_version_ = m.config_version;
    last_step_ = std::max(last_step_, m.step);
    metrics_.push_back(m);
  }
}

}  // namespace odyssey::studio
