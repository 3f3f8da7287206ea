// PlanCache: calls the planner once per distinct config. Invalid configs are not planned (the
// planner requires a valid one); the panel shows the validator's count instead.
// defines: PlanCache::get
#include "app/studio/plan_cache.h"

#include <chrono>
#include <exception>

#include "engine/config/validate.h"

namespace odyssey::studio {

const PlanResult& PlanCache::get(const RunConfig& cfg) {
  if (valid_ && key_ == cfg) return result_;
  const auto t0 = std::chrono::steady_clock::now();
  key_ = cfg;
  valid_ = true;
  ++computations_;
  result_ = PlanResult{};
  const auto issues = validate(cfg);
  if (!issues.empty()) {
    result_.error = std::to_string(issues.size()) + (issues.size() == 1 ? " problem" : " problems") +
                    " in the configuration: fix the highlighted fields to see the plan";
    return result_;
  }
  try {
    result_.plan = plan_memory(cfg);
    result_.ladder = plan_ladder(cfg);
    result_.max_seq_len = solve_max_seq_len(cfg);
    if (!result_.plan.fits()) result_.advice = advise(cfg);
    result_.ok = true;
  } catch (const std::exception& e) {
    result_.ok = false;
    result_.error = std::string("the planner failed: ") + e.what();
  }
  result_.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return result_;
}

}  // namespace odyssey::studio
