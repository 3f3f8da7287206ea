// The plan panel's cache: the planner's prediction, ladder, max context and advice for one config,
// recomputed only when the config changes (so every frame after an edit is free, and the edit's
// own frame pays one planner call). defines: PlanResult, PlanCache
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/planner/planner.h"

namespace odyssey::studio {

/// Everything the plan panel shows for one config.
struct PlanResult {
  bool ok = false;              ///< false when the config is invalid or the planner threw
  std::string error;            ///< why not
  MemoryPlan plan;
  std::vector<LadderRung> ladder;
  int64_t max_seq_len = 0;      ///< for the config as edited
  std::vector<Advice> advice;   ///< only when the plan does not fit
  double compute_ms = 0;        ///< how long the planner took (shown in the panel)
};

class PlanCache {
 public:
  /// The result for `cfg`, recomputed only when `cfg` differs from the cached config.
  const PlanResult& get(const RunConfig& cfg);
  /// Forgets the cached result (the next get() recomputes).
  void invalidate() { valid_ = false; }
  /// Number of recomputations so far (tests, the panel's footer).
  uint64_t computations() const { return computations_; }

 private:
  bool valid_ = false;
  RunConfig key_;
  PlanResult result_;
  uint64_t computations_ = 0;
};

}  // namespace odyssey::studio
