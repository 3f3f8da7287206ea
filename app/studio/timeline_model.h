// The timeline panel's data logic without rendering: phase paths to band classes, the measured peak
// of a step with its phase, the time extent of a step, and the planner's per-phase bytes laid over
// the measured phases so planned and measured can be compared on one time axis.
// defines: PhaseClass, classify_phase, PeakMark, find_peak, find_run_peak, step_extent, PlannedSegment,
// planned_overlay
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "app/studio/plot.h"
#include "app/studio/run_history.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/samples.h"

namespace odyssey::studio {

/// The coloured bands of the timeline (forward, attention, MLP, loss, backward, optimizer).
enum class PhaseClass { Forward, Attention, Mlp, Loss, Backward, Optimizer, Other };
constexpr int kPhaseClassCount = 7;
const char* to_string(PhaseClass c);
/// "fwd/block.3/attn" -> Attention, "bwd/block.0/recompute" -> Backward, "optimizer" -> Optimizer.
PhaseClass classify_phase(std::string_view path);
/// Forward (fwd/...), backward (bwd/...) or neither (optimizer, step).
int phase_direction(std::string_view path);  // +1 forward, -1 backward, 0 other

/// The highest device peak among the spans of a step (step < 0: all steps) and rank (< 0: all).
struct PeakMark {
  bool found = false;
  int64_t bytes = 0;
  double t_s = 0;  ///< middle of the phase holding the peak
  int rank = 0;
  int64_t step = 0;
  std::string phase;  ///< its path
};
/// Deepest phase wins ties, so the mark names "bwd/block.0/recompute" rather than "step".
PeakMark find_peak(const std::vector<PhaseSpan>& spans, const std::vector<std::string>& names, int64_t step, int rank);

/// The highest device peak of the whole run (rank < 0: all ranks), from each step's precomputed peak.
PeakMark find_run_peak(const RunHistory& history, int rank);

/// Time covered by the spans of a step (step < 0: all) and rank (< 0: all); invalid when none.
plot::Range step_extent(const std::vector<PhaseSpan>& spans, int64_t step, int rank);

/// Planned bytes over a stretch of measured time.
struct PlannedSegment {
  double t0 = 0, t1 = 0;
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
  std::string phase;
};
/// Lays the plan's phases over one measured step of one rank: each measured phase the plan names
/// gets the planned bytes over its measured time (deepest match wins). When no names match, the
/// plan's phases are spread over the step in proportion to their predicted durations.
std::vector<PlannedSegment> planned_overlay(const MemoryPlan& plan, const std::vector<PhaseSpan>& spans,
                                            const std::vector<std::string>& names, int64_t step, int rank);

}  // namespace odyssey::studio
