// Synthetic engine output for the timeline benchmark (--bench-samples) and the tests: steps of a
// 4-layer decoder's phases on N ranks, with memory that grows through forward and falls through
// backward. Clearly not a run: nothing here is measured. defines: fill_synthetic_history
#pragma once

#include <cstdint>

#include "app/studio/run_history.h"

namespace odyssey::studio {

/// Appends about `samples` memory samples (over `ranks` ranks, whole steps) with their phase spans,
/// phase names and one StepMetrics per step.
void fill_synthetic_history(RunHistory& history, int64_t samples, int ranks);

}  // namespace odyssey::studio
