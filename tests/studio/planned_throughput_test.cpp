// The throughput panel's planned line: the run's configs planned once each (the started one, then
// each live change's), laid over the steps that ran with them in the step metrics' own units.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "app/studio/planned_throughput.h"
#include "app/studio/run_history.h"
#include "engine/config/preset.h"
#include "engine/planner/planner.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::studio;

namespace {

StepMetrics step(int64_t n, int64_t version, double step_s, double tokens, double mfu) {
  StepMetrics m;
  m.step = n;
  m.config_version = version;
  m.step_time_s = step_s;
  m.tokens_per_s = tokens / step_s;
  m.mfu = mfu;
  return m;
}

}  // namespace

TEST_CASE("the planned throughput: one plan per config, over the steps that ran with it", "[studio][throughput]") {
  const LoadedPreset tiny = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml");
  REQUIRE(tiny.ok());
  const RunConfig started = tiny.config;
  RunHistory h;
  h.reset(started);
  RunConfig changed = started;
  changed.memory.tiled_mlp = !started.memory.tiled_mlp;
  // steps 0-2 with the started config, a live change landing at step 3, steps 3-4 with it
  h.ingest_metrics({step(0, 0, 2.0, 1000, 0.10), step(1, 0, 2.0, 1000, 0.10), step(2, 0, 2.0, 1000, 0.10)});
  h.note_live_change("memory.tiled_mlp: flipped", changed);
  h.ingest_metrics({step(3, 1, 4.0, 1000, 0.05), step(4, 1, 4.0, 1000, 0.05)});
  REQUIRE(h.markers().size() == 1);

  // A stub planner: each config's step from the real one, counted, so nothing is planned per step.
  int plans = 0;
  auto planner = [&plans](const RunConfig& cfg) {
    ++plans;
    return plan_memory(cfg).time.step_s;
  };
  const std::vector<PlannedStretch> stretches = planned_stretches(h, planner);
  CHECK(plans == 2);
  REQUIRE(stretches.size() == 2);
  CHECK(stretches[0].first_step == 0);
  CHECK(stretches[1].first_step == 3);
  CHECK(stretches[0].ok);
  CHECK(stretches[0].step_s == plan_memory(started).time.step_s);
  CHECK(stretches[1].step_s == plan_memory(changed).time.step_s);
  CHECK(stretches[0].profile == started.hardware.profile);

  // Over the metrics: each stretch spans its steps ± 0.5; tokens/s and MFU at the planned step are
  // the measured ones scaled by measured over planned step time (a config's tokens and FLOPs a step
  // do not change). Exact up to one rounding each: relative 1e-12.
  const auto spans = planned_throughput_spans(h.metrics(), stretches);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].x0 == -0.5);
  CHECK(spans[0].x1 == 2.5);
  CHECK(spans[1].x0 == 2.5);
  CHECK(spans[1].x1 == 4.5);
  CHECK(spans[0].step_s == stretches[0].step_s);
  CHECK(spans[0].tokens_per_s == Approx(1000 / stretches[0].step_s).epsilon(1e-12));
  CHECK(spans[0].mfu == Approx(0.10 * 2.0 / stretches[0].step_s).epsilon(1e-12));
  CHECK(spans[1].tokens_per_s == Approx(1000 / stretches[1].step_s).epsilon(1e-12));
  CHECK(spans[1].mfu == Approx(0.05 * 4.0 / stretches[1].step_s).epsilon(1e-12));

  // A config the planner refuses keeps its reason and draws nothing; its steps get no span.
  const auto refused = planned_stretches(h, [](const RunConfig& cfg) -> double {
    if (cfg.memory.tiled_mlp != cfg.memory.tiled_loss) throw std::runtime_error("refused for the test");
    return 1.0;
  });
  REQUIRE(refused.size() == 2);
  const int bad = refused[0].ok ? 1 : 0;
  CHECK_FALSE(refused[bad].ok);
  CHECK(refused[bad].error == "refused for the test");
  CHECK(planned_throughput_spans(h.metrics(), refused).size() == 1);

  // A new run forgets the old one's configs: the panel's cache key changes with it.
  const uint64_t run = h.run_id();
  h.reset(started);
  CHECK(h.run_id() != run);
  CHECK(planned_stretches(h, planner).size() == 1);
  CHECK(planned_throughput_spans(h.metrics(), planned_stretches(h, planner)).empty());  // no steps yet
}

TEST_CASE("the planned line is drawn only on the kind of device its profile describes", "[studio][throughput]") {
  CHECK(profile_describes_device("h100-sxm", "cuda:0"));
  CHECK(profile_describes_device("h200", "cuda:3"));
  CHECK(profile_describes_device("cpu", "cpu"));
  CHECK_FALSE(profile_describes_device("h100-sxm", "cpu"));  // an H100's word over a CPU run
  CHECK_FALSE(profile_describes_device("cpu", "cuda:0"));
  CHECK_FALSE(profile_describes_device("h100-sxm", ""));  // no device reported yet
}
