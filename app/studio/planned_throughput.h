// The planner's step time beside the measured one (the throughput panel's dashed line): one stretch
// per config the run ran with, each planned once, in the units of the step metrics.
// defines: PlannedStretch, planned_stretches, PlannedThroughputSpan, planned_throughput_spans, profile_describes_device
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/telemetry/samples.h"

namespace odyssey::studio {

class RunHistory;

/// The planner's word for the steps that ran with one config.
struct PlannedStretch {
  int64_t first_step = 0;  ///< the first step that ran with the config (the run's own: 0)
  bool ok = false;         ///< the planner planned the config; otherwise `error` says why
  std::string error;
  double step_s = 0;    ///< the planner's step time on the config's hardware profile
  std::string profile;  ///< hardware.profile: the device the planner speaks of
};

/// The run's configs in step order (the started one, then each change marker's: live change or
/// restart), each planned by `step_time` (the planned step of a config; it may throw, which the
/// stretch records as its error).
std::vector<PlannedStretch> planned_stretches(const RunHistory& history,
                                              const std::function<double(const RunConfig&)>& step_time);

/// One stretch over the metrics' steps, in the metrics' units: tokens/s and MFU are the measured
/// ones scaled by measured over planned step time (a config's tokens and FLOPs a step are fixed).
struct PlannedThroughputSpan {
  double x0 = 0, x1 = 0;    ///< the stretch's steps on the plots' axis (step ± 0.5)
  double step_s = 0;        ///< planned step time
  double tokens_per_s = 0;  ///< global tokens a step / planned step time
  double mfu = 0;           ///< MFU at the planned step time (the metrics' convention)
  std::string profile;
};
/// The spans of the planned stretches that have steps in `metrics` (failed plans have none).
std::vector<PlannedThroughputSpan> planned_throughput_spans(const std::vector<StepMetrics>& metrics,
                                                            const std::vector<PlannedStretch>& stretches);

/// True when the engine's device ("cpu", "cuda:0", ...: SessionStatus::device) is the kind that
/// `profile` describes (a GPU profile on CUDA, "cpu" on the CPU): only then is the planner's step
/// a prediction of the measured one rather than of another machine.
bool profile_describes_device(const std::string& profile, const std::string& device);

}  // namespace odyssey::studio
