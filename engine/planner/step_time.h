// The step-time model: FLOPs (model, recompute) over the hardware's peak times two efficiencies
// (the attention kernels' and everything else's), Ulysses all-to-all, FSDP all-gather/reduce-
// scatter and offload PCIe traffic, exposed where the engine does not overlap them. Internal to
// engine/planner. defines: PhaseTimes, model_step_time
#pragma once

#include <array>

#include "engine/planner/plan_shapes.h"
#include "engine/planner/planner.h"
#include "engine/planner/step_walk.h"

namespace odyssey::planner_detail {

/// Predicted seconds of each phase kind: per block for the per-block phases, per step otherwise.
struct PhaseTimes {
  std::array<double, static_cast<int>(PhaseKind::None)> seconds{};
  double of(PhaseKind kind) const { return seconds[static_cast<int>(kind)]; }
};

/// The step-time model for `s` on `hw`; fills `phases` when given.
StepTimePlan model_step_time(const PlanShapes& s, const HardwareConfig& hw, PhaseTimes* phases = nullptr);

}  // namespace odyssey::planner_detail
