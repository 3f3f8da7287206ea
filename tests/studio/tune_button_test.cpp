// The plan panel's "Tune: fastest that fits" without rendering: the cache's tune of the edited
// config, apply_tuned_memory replacing only the [memory] table, and a running engine taking it at
// the next step like any memory edit; a stale tune, a tune already applied and a config where
// nothing fits (or fits only into the tuner's headroom) leave the config as it was, each saying why.
#include <catch2/catch.hpp>

#include "app/studio/app_state.h"
#include "engine/config/preset.h"
#include "fake_engine.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::studio;
using odyssey::studio::testing::FakeEngine;

namespace {

RunConfig load(const std::string& name) {
  const LoadedPreset p = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/" + name + ".toml");
  REQUIRE(p.ok());
  return p.config;
}

/// The tune the plan panel reads for `cfg`: the cache's background result.
TuneResult cached_tune(PlanCache& cache, const RunConfig& cfg) {
  REQUIRE(cache.get(cfg).ok);
  cache.wait_for_extras();
  const PlanResult& r = cache.get(cfg);
  REQUIRE(r.extras_ready);
  return r.tune;
}

}  // namespace

TEST_CASE("the tune button puts the tuner's memory into the edited config, and the run takes it at the next step",
          "[studio][plan][tune]") {
  AppState state;
  FakeEngine engine;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  std::string err;
  REQUIRE(state.run.start(engine, state.config, state.history, &err));
  engine.advance_step();
  frame_update(state, engine, 0.0);

  const TuneResult tuned = cached_tune(state.plan, state.config);
  const TuneCandidate* choice = tuned.chosen();
  REQUIRE(choice != nullptr);
  REQUIRE_FALSE(choice->config.memory == state.config.memory);  // the preset runs more than it needs
  const RunConfig before = state.config;
  std::string message;
  REQUIRE(apply_tuned_memory(state.config, tuned, &message));
  CHECK(state.config.memory == choice->config.memory);
  RunConfig rest = state.config;
  rest.memory = before.memory;
  CHECK(rest == before);  // model, training, parallel, hardware and output as they were
  CHECK(message.find("Tuned to the fastest that fits (" + choice->summary() + ")") == 0);
  CHECK((message.find("memory.activation_checkpointing = true -> false") != std::string::npos) ==
        (before.memory.activation_checkpointing && !choice->config.memory.activation_checkpointing));

  frame_update(state, engine, 0.1);  // the edit reaches the engine as RunDriver sends any memory edit
  REQUIRE(engine.live_calls.size() == 1);
  CHECK(engine.live_calls[0].memory == choice->config.memory);
  CHECK(engine.restarts.empty());
  engine.advance_step();
  CHECK(engine.active.memory == choice->config.memory);

  // Pressed again on the tuned config: nothing to change.
  const TuneResult again = cached_tune(state.plan, state.config);
  CHECK_FALSE(apply_tuned_memory(state.config, again, &message));
  CHECK(message.rfind("Already the fastest memory that fits", 0) == 0);
  CHECK(state.config.memory == choice->config.memory);
}

TEST_CASE("the tune button leaves the config alone for a stale tune and where nothing fits", "[studio][plan][tune]") {
  PlanCache cache;
  RunConfig cfg = load("tiny-cpu");
  const TuneResult tuned = cached_tune(cache, cfg);
  RunConfig edited = cfg;
  edited.training.seq_len = 1024;  // an edit after the tune was made
  std::string message;
  CHECK_FALSE(apply_tuned_memory(edited, tuned, &message));
  CHECK(edited.memory == cfg.memory);
  CHECK(message == "The tune is still running for this edit.");

  RunConfig huge = load("llama3-8b-5m-8xh100-untied");
  huge.training.seq_len = int64_t{64} << 20;
  const TuneResult none = cached_tune(cache, huge);
  REQUIRE(none.chosen() == nullptr);
  const RunConfig unchanged = huge;
  CHECK_FALSE(apply_tuned_memory(huge, none, &message));
  CHECK(huge == unchanged);
  CHECK(message == std::string("Nothing fits: ") + kNothingFitsHint);

  // A device on which the lowest peak fits by the plan but leaves under the tuner's 3% free: the
  // message names the headroom, not the advisor's "add devices".
  RunConfig tight = load("tiny-cpu");
  TuneOptions no_headroom;
  no_headroom.headroom_share = 0;
  // on a device nothing fits, each technique set stands for its variant of the lowest peak
  tight.hardware.device_memory_gib = 1.0 / 1024;
  REQUIRE(tune(tight, no_headroom).chosen() == nullptr);
  const int64_t lowest = tune(tight, no_headroom).lowest_peak()->peak.peak_bytes;
  tight.hardware.device_memory_gib = static_cast<double>(lowest) / 0.99 / (1 << 30);
  REQUIRE(tune(tight, no_headroom).chosen() != nullptr);
  const TuneResult into_headroom = cached_tune(cache, tight);
  REQUIRE(into_headroom.chosen() == nullptr);
  REQUIRE(into_headroom.lowest_peak()->peak.fits());
  CHECK_FALSE(apply_tuned_memory(tight, into_headroom, &message));
  CHECK(message.rfind("Nothing fits with the tuner's headroom free. By the plan alone ", 0) == 0);
  CHECK(message.find(" free, under the ") != std::string::npos);
  CHECK(message.find("`odyssey tune --headroom 0%` takes the plan's verdict") != std::string::npos);
}
