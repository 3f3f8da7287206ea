// The planner's step time beside the measured one (app/studio/planned_throughput.h): the run's
// configs planned once each, then laid over the steps that ran with them.
#include "app/studio/planned_throughput.h"

#include <exception>
#include <utility>

#include "app/studio/run_history.h"

namespace odyssey::studio {

std::vector<PlannedStretch> planned_stretches(const RunHistory& history,
                                              const std::function<double(const RunConfig&)>& step_time) {
  std::vector<std::pair<int64_t, const RunConfig*>> configs{{0, &history.config_at(-1)}};
  for (const auto& m : history.markers()) configs.emplace_back(m.step, &m.config);
  std::vector<PlannedStretch> out;
  for (const auto& [first, cfg] : configs) {
    PlannedStretch s;
    s.first_step = first;
    s.profile = cfg->hardware.profile;
    try {
      s.step_s = step_time(*cfg);
      s.ok = s.step_s > 0;
      if (!s.ok) s.error = "the planner gave no step time";
    } catch (const std::exception& e) {
      s.error = e.what();
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<PlannedThroughputSpan> planned_throughput_spans(const std::vector<StepMetrics>& metrics,
                                                            const std::vector<PlannedStretch>& stretches) {
  std::vector<PlannedThroughputSpan> out;
  for (size_t k = 0; k < stretches.size(); ++k) {
    const PlannedStretch& s = stretches[k];
    const int64_t end = k + 1 < stretches.size() ? stretches[k + 1].first_step : INT64_MAX;
    const StepMetrics* first = nullptr;
    const StepMetrics* last = nullptr;
    for (const auto& m : metrics)
      if (m.step >= s.first_step && m.step < end) {
        if (!first) first = &m;
        last = &m;
      }
    if (!s.ok || !first) continue;
    PlannedThroughputSpan span;
    span.x0 = double(first->step) - 0.5;
    span.x1 = double(last->step) + 0.5;
    span.step_s = s.step_s;
    // tokens and model FLOPs a step are the config's: the measured rate times measured over planned time
    span.tokens_per_s = last->tokens_per_s * last->step_time_s / s.step_s;
    span.mfu = last->mfu * last->step_time_s / s.step_s;
    span.profile = s.profile;
    out.push_back(std::move(span));
  }
  return out;
}

bool profile_describes_device(const std::string& profile, const std::string& device) {
  const bool on_gpu = device.rfind("cuda", 0) == 0;
  return !device.empty() && on_gpu == profile_describes_gpu(profile);
}

}  // namespace odyssey::studio
