// Timeline data logic: classification of phase paths into bands, peaks, step extents and the
// planned-over-measured overlay. defines: see timeline_model.h
#include "app/studio/timeline_model.h"

#include <algorithm>
#include <map>

namespace odyssey::studio {

const char* to_string(PhaseClass c) {
  switch (c) {
    case PhaseClass::Forward:
      return "forward";
    case PhaseClass::Attention:
      return "attention";
    case PhaseClass::Mlp:
      return "MLP";
    case PhaseClass::Loss:
      return "loss";
    case PhaseClass::Backward:
      return "backward";
    case PhaseClass::Optimizer:
      return "optimizer";
    case PhaseClass::Other:
      return "other";
  }
  return "?";
}

namespace {
bool has_component(std::string_view path, std::string_view name) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (path.substr(start, end - start) == name) return true;
    start = end + 1;
  }
  return false;
}
}  // namespace

PhaseClass classify_phase(std::string_view path) {
  // the forward's wait for the last step's pipelined host AdamW ("block.3/host_update") first
  if (has_component(path, "optimizer") || has_component(path, "host_update")) return PhaseClass::Optimizer;
  if (has_component(path, "attn")) return PhaseClass::Attention;
  if (has_component(path, "mlp")) return PhaseClass::Mlp;
  if (has_component(path, "loss")) return PhaseClass::Loss;
  if (path.rfind("bwd", 0) == 0) return PhaseClass::Backward;
  if (path.rfind("fwd", 0) == 0) return PhaseClass::Forward;
  return PhaseClass::Other;
}

int phase_direction(std::string_view path) {
  if (path.rfind("fwd", 0) == 0) return 1;
  if (path.rfind("bwd", 0) == 0) return -1;
  return 0;
}

PeakMark find_peak(const std::vector<PhaseSpan>& spans, const std::vector<std::string>& names, int64_t step, int rank) {
  PeakMark best;
  int best_depth = -1;
  for (const auto& s : spans) {
    if ((step >= 0 && s.step != step) || (rank >= 0 && s.rank != rank)) continue;
    if (!best.found || s.device_peak > best.bytes || (s.device_peak == best.bytes && s.depth > best_depth)) {
      best.found = true;
      best.bytes = s.device_peak;
      best.t_s = 0.5 * (s.t_begin_s + s.t_end_s);
      best.rank = s.rank;
      best.step = s.step;
      best.phase = s.phase_id >= 0 && static_cast<size_t>(s.phase_id) < names.size() ? names[s.phase_id] : "?";
      best_depth = s.depth;
    }
  }
  return best;
}

PeakMark find_run_peak(const RunHistory& history, int rank) {
  PeakMark best;
  for (const StepSpans& g : history.span_steps())
    for (size_t r = 0; r < g.peak_index.size(); ++r) {
      if ((rank >= 0 && static_cast<int>(r) != rank) || g.peak_index[r] < 0) continue;
      const PhaseSpan& s = g.spans[g.peak_index[r]];
      if (!best.found || s.device_peak > best.bytes) {
        best.found = true;
        best.bytes = s.device_peak;
        best.t_s = 0.5 * (s.t_begin_s + s.t_end_s);
        best.rank = s.rank;
        best.step = s.step;
        best.phase = history.phase_name(s.phase_id);
      }
    }
  return best;
}

plot::Range step_extent(const std::vector<PhaseSpan>& spans, int64_t step, int rank) {
  plot::Range r = plot::Range::empty();
  for (const auto& s : spans) {
    if ((step >= 0 && s.step != step) || (rank >= 0 && s.rank != rank)) continue;
    r.include(s.t_begin_s);
    r.include(s.t_end_s);
  }
  return r;
}

std::vector<PlannedSegment> planned_overlay(const MemoryPlan& plan, const std::vector<PhaseSpan>& spans,
                                            const std::vector<std::string>& names, int64_t step, int rank) {
  std::vector<PlannedSegment> out;
  if (plan.phases.empty()) return out;
  std::map<std::string_view, const PhasePlan*> by_name;
  for (const auto& p : plan.phases) by_name.emplace(p.name, &p);

  // Deeper spans are drawn over shallower ones, so match in depth order.
  std::vector<const PhaseSpan*> mine;
  for (const auto& s : spans)
    if (s.step == step && s.rank == rank) mine.push_back(&s);
  std::stable_sort(mine.begin(), mine.end(),
                   [](const PhaseSpan* a, const PhaseSpan* b) { return a->depth < b->depth; });
  for (const PhaseSpan* s : mine) {
    if (s->phase_id < 0 || static_cast<size_t>(s->phase_id) >= names.size()) continue;
    const auto it = by_name.find(names[s->phase_id]);
    if (it == by_name.end()) continue;
    out.push_back({s->t_begin_s, s->t_end_s, it->second->resident_bytes, it->second->host_bytes, it->second->name});
  }
  if (!out.empty() || mine.empty()) return out;

  // No phase names in common: spread the plan over the measured step by predicted durations.
  const plot::Range ext = step_extent(spans, step, rank);
  double total = 0;
  for (const auto& p : plan.phases) total += std::max(0.0, p.time_s);
  double t = ext.min;
  for (const auto& p : plan.phases) {
    const double share = total > 0 ? std::max(0.0, p.time_s) / total : 1.0 / plan.phases.size();
    const double dt = share * ext.span();
    out.push_back({t, t + dt, p.resident_bytes, p.host_bytes, p.name});
    t += dt;
  }
  return out;
}

}  // namespace odyssey::studio
