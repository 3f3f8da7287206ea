// The run panel's logic against a fake engine: a toggle change reaches the session, a
// heads-per-stage change applies at the next step (and is marked there), world-size edits restart
// after the edits settle with a notice, invalid edits are held back with their field message; each
// step's config (the planned overlay's) is the one it ran with.
#include <catch2/catch.hpp>

#include "app/studio/app_state.h"
#include "fake_engine.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::studio;
using odyssey::studio::testing::FakeEngine;

namespace {

/// The default preset, loaded and started on the fake engine.
struct Started {
  AppState state;
  FakeEngine engine;
  Started() {
    REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
    REQUIRE(state.edit.issues.empty());
    std::string err;
    REQUIRE(state.run.start(engine, state.config, state.history, &err));
    engine.advance_step();
    frame_update(state, engine, 0.0);
  }
};

}  // namespace

TEST_CASE("a toggle change reaches the session through apply_live", "[studio][run]") {
  Started s;
  REQUIRE(s.state.config.memory.tiled_mlp);
  s.state.config.memory.tiled_mlp = false;  // what the checkbox does
  frame_update(s.state, s.engine, 0.1);
  REQUIRE(s.engine.live_calls.size() == 1);
  CHECK_FALSE(s.engine.live_calls[0].memory.tiled_mlp);
  CHECK(s.engine.restarts.empty());
  CHECK(s.state.run.notice() == "Applies at the next step: memory.tiled_mlp: true -> false");
  CHECK_FALSE(s.state.run.engine_config().memory.tiled_mlp);
  // Nothing new: no second call on later frames.
  frame_update(s.state, s.engine, 0.2);
  CHECK(s.engine.live_calls.size() == 1);
}

TEST_CASE("the measured bars stand beside a plan only once a step ran its config", "[studio][run]") {
  // After a change the plan panel drew the last step's peaks, measured under the old config, as
  // "rank 0 measured" beside the new config's plan (a restart's "starting" state showed 9.11 MiB
  // under the 13.4 MiB plan of FSDP off).
  Started s;
  REQUIRE(last_step_with(s.state, s.state.config) != nullptr);
  s.state.config.memory.tiled_mlp = false;  // a live change: sent, not yet run
  frame_update(s.state, s.engine, 0.1);
  REQUIRE(s.engine.live_calls.size() == 1);
  CHECK(last_step_with(s.state, s.state.config) == nullptr);
  s.engine.advance_step();  // the next step runs it
  frame_update(s.state, s.engine, 0.2);
  const StepMetrics* last = last_step_with(s.state, s.state.config);
  REQUIRE(last != nullptr);
  CHECK(last->step == 2);
  // a run on the CPU under an H100 profile: that plan is of another machine
  AppState gpu_profile;
  FakeEngine engine;
  REQUIRE(load_preset_into(gpu_profile, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  gpu_profile.config.hardware = *find_hardware_profile("h100-sxm");
  gpu_profile.config.hardware.profile = "h100-sxm";
  std::string err;
  REQUIRE(gpu_profile.run.start(engine, gpu_profile.config, gpu_profile.history, &err));
  engine.advance_step();
  frame_update(gpu_profile, engine, 0.0);
  REQUIRE(gpu_profile.status.device == "cpu");
  CHECK(last_step_with(gpu_profile, gpu_profile.config) == nullptr);
}

TEST_CASE("two live changes that land on one step are both said applied there", "[studio][run]") {
  // Their marker reads "A; B": the notice, which names the last, waited for a marker of B alone.
  Started s;
  s.state.config.memory.tiled_mlp = false;
  frame_update(s.state, s.engine, 0.1);
  s.state.config.memory.heads_per_stage = 4;
  frame_update(s.state, s.engine, 0.2);
  REQUIRE(s.engine.live_calls.size() == 2);
  s.engine.advance_step();
  frame_update(s.state, s.engine, 0.3);
  REQUIRE(s.state.history.markers().size() == 1);
  CHECK(s.state.history.markers()[0].what == "memory.tiled_mlp: true -> false; memory.heads_per_stage: 2 -> 4");
  CHECK(s.state.run.notice() == "Applied from step 2: memory.heads_per_stage: 2 -> 4");
}

TEST_CASE("a heads-per-stage change applies at the next step and is marked there", "[studio][run]") {
  Started s;
  REQUIRE(s.state.config.memory.heads_per_stage == 2);
  const auto choices = heads_per_stage_choices(s.state.config);
  REQUIRE(choices == std::vector<int64_t>{2, 4, 8});
  s.state.config.memory.heads_per_stage = 4;  // the slider's next value
  frame_update(s.state, s.engine, 0.1);
  REQUIRE(s.engine.live_calls.size() == 1);
  CHECK(s.engine.live_calls[0].memory.heads_per_stage == 4);
  // Not yet in effect: the engine is still inside step 2's boundary.
  CHECK(s.engine.active.memory.heads_per_stage == 2);
  CHECK(s.state.history.markers().empty());

  s.engine.advance_step();  // step 2 starts with the change
  frame_update(s.state, s.engine, 0.2);
  CHECK(s.engine.active.memory.heads_per_stage == 4);
  REQUIRE(s.state.history.markers().size() == 1);
  const ChangeMarker& m = s.state.history.markers()[0];
  CHECK(m.step == 2);
  CHECK_FALSE(m.restart);
  CHECK(m.what == "memory.heads_per_stage: 2 -> 4");
  CHECK(s.state.history.metrics().back().config_version == 1);
  // the notice says where it took effect ("Applies at the next step" stayed after it had)
  CHECK(s.state.run.notice() == "Applied from step 2: memory.heads_per_stage: 2 -> 4");
  // The planned overlay of each step plans the config that step ran with.
  CHECK(s.state.history.config_at(1).memory.heads_per_stage == 2);
  CHECK(s.state.history.config_at(2).memory.heads_per_stage == 4);
  CHECK(s.state.history.config_at(7).memory.heads_per_stage == 4);
}

TEST_CASE("two live changes before one step boundary share one marker", "[studio][run]") {
  Started s;
  s.state.config.memory.tiled_mlp = false;
  frame_update(s.state, s.engine, 0.1);
  s.state.config.memory.tiled_loss = false;
  frame_update(s.state, s.engine, 0.2);
  REQUIRE(s.engine.live_calls.size() == 2);
  s.engine.advance_step();  // the boundary applies the latest, which holds both
  s.engine.advance_step();
  frame_update(s.state, s.engine, 0.3);
  REQUIRE(s.state.history.markers().size() == 1);
  CHECK(s.state.history.markers()[0].step == 2);
  CHECK(s.state.history.markers()[0].what == "memory.tiled_mlp: true -> false; memory.tiled_loss: true -> false");
  CHECK(s.engine.active.memory.tiled_mlp == false);
  CHECK(s.engine.active.memory.tiled_loss == false);
}

TEST_CASE("a world-size edit restarts the run once the edits settle, with a notice", "[studio][run]") {
  Started s;
  s.state.config.parallel.world_size = 4;
  frame_update(s.state, s.engine, 1.0);
  CHECK(s.engine.restarts.empty());
  CHECK(s.state.run.restart_pending());
  CHECK(s.state.run.notice().find("Restarting the run when edits settle") == 0);
  // A further edit within the settle time postpones the restart.
  s.state.config.parallel.world_size = 6;
  frame_update(s.state, s.engine, 1.5);
  frame_update(s.state, s.engine, 2.0);
  CHECK(s.engine.restarts.empty());
  frame_update(s.state, s.engine, 1.5 + RunDriver::kRestartSettleS + 0.01);
  REQUIRE(s.engine.restarts.size() == 1);
  CHECK(s.engine.restarts[0].parallel.world_size == 6);
  CHECK(s.engine.live_calls.empty());
  CHECK(s.state.run.notice() == "Restarted the run: parallel.world_size: 2 -> 6");
  s.engine.advance_step();
  frame_update(s.state, s.engine, 3.0);
  REQUIRE(s.state.history.markers().size() == 1);
  CHECK(s.state.history.markers()[0].restart);
  const int64_t restarted_at = s.state.history.markers()[0].step;
  CHECK(s.state.history.config_at(restarted_at).parallel.world_size == 6);
  CHECK(s.state.history.config_at(restarted_at - 1).parallel.world_size == 2);
}

TEST_CASE("an invalid edit shows the validator's message at its field and is not sent", "[studio][run]") {
  Started s;
  s.state.config.parallel.world_size = 3;  // not a multiple of the Ulysses degree 2
  frame_update(s.state, s.engine, 0.1);
  const auto* msgs = s.state.edit.messages.find("parallel.world_size");
  REQUIRE(msgs);
  REQUIRE(msgs->size() == 1);
  CHECK(msgs->front() ==
        "must be a multiple of parallel.ulysses_degree = 2 so that each data-parallel replica holds whole Ulysses "
        "groups (try 2 or 4)");
  frame_update(s.state, s.engine, 5.0);
  CHECK(s.engine.live_calls.empty());
  CHECK(s.engine.restarts.empty());
  CHECK(s.state.run.notice() == "Not applied to the run: the configuration has problems (see the fields)");
  // Fixing the field clears the message.
  s.state.config.parallel.world_size = 2;
  frame_update(s.state, s.engine, 5.1);
  CHECK(s.state.edit.messages.find("parallel.world_size") == nullptr);
  CHECK(s.state.edit.issues.empty());
}

TEST_CASE("a live change the engine refuses falls back to a restart", "[studio][run]") {
  Started s;
  s.engine.refuse_live = true;
  s.state.config.memory.tiled_loss = false;
  frame_update(s.state, s.engine, 0.0);
  CHECK(s.engine.live_calls.size() == 1);
  CHECK(s.state.run.restart_pending());
  frame_update(s.state, s.engine, 0.0);  // retried as a restart, waiting to settle
  frame_update(s.state, s.engine, 1.0);
  REQUIRE(s.engine.restarts.size() == 1);
  CHECK_FALSE(s.engine.restarts[0].memory.tiled_loss);
}

TEST_CASE("hardware edits change the plan, not the run", "[studio][run]") {
  Started s;
  REQUIRE(apply_hardware_profile(s.state.config, "h100-sxm"));
  frame_update(s.state, s.engine, 0.0);
  frame_update(s.state, s.engine, 5.0);
  CHECK(s.engine.live_calls.empty());
  CHECK(s.engine.restarts.empty());
  CHECK_FALSE(s.state.run.restart_pending());
}

TEST_CASE("run history files samples per rank and reads phase names once", "[studio][run]") {
  Started s;
  for (int i = 0; i < 4; ++i) s.engine.advance_step();
  frame_update(s.state, s.engine, 0.0);
  const RunHistory& h = s.state.history;
  REQUIRE(h.ranks().size() == 2);
  CHECK(h.ranks()[0].size() == 5);
  CHECK(h.metrics().size() == 5);
  CHECK(h.span_count() == 10);
  REQUIRE(h.spans_of(3));
  CHECK(h.spans_of(3)->spans.size() == 2);
  CHECK(h.spans_of(99) == nullptr);
  CHECK(h.phase_name(1) == "fwd/block.0/attn");
  CHECK(h.phase_name(99) == "?");
  const auto [lo, hi] = h.ranks()[1].step_range(3);
  CHECK(hi - lo == 1);
  CHECK(h.ranks()[1].step[lo] == 3);
}

TEST_CASE("a config the planner says does not fit is not started until the user starts it anyway",
          "[studio][run][fit]") {
  // An unfit run grew the studio until the OOM killer ended it: now the planner's verdict comes
  // first, with the numbers, and "Start anyway" (force_unfit) is the way past it.
  AppState state;
  FakeEngine engine;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  state.config.hardware.device_memory_gib = 0.001;  // 1 MiB a device: the tiny model needs more
  std::string err;
  CHECK_FALSE(state.run.start(engine, state.config, state.history, &err));
  CHECK(engine.starts.empty());
  CHECK_THAT(err, Catch::Contains("the planner predicts this run does not fit: a device peak of"));
  REQUIRE(state.run.unfit().has_value());
  CHECK(*state.run.unfit() == state.config);
  CHECK_THAT(state.run.notice(), Catch::StartsWith("Not started: the planner predicts"));
  REQUIRE(state.run.force_unfit(engine, state.history, &err));
  REQUIRE(engine.starts.size() == 1);
  CHECK(engine.starts[0] == state.config);
  CHECK_FALSE(state.run.unfit().has_value());
}

TEST_CASE("a config at training.device = auto is checked against the RAM where the engine runs it on the CPU",
          "[studio][run][fit]") {
  // A GPU preset left at "auto" on a machine without a GPU was planned against the GPU profile's
  // capacity, started on the CPU and grew the studio until the OOM killer ended it. Profiles of
  // 64 TiB a device and 1 PiB of host pass the profile's checks; 1G tokens plan 2 ranks of 2046 GiB
  // and 1024 GiB of host, beyond the RAM of any machine the tests run on.
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  state.config.training.device = DeviceKind::Auto;
  state.config.hardware.device_memory_gib = 65536;
  state.config.hardware.host_memory_gib = 1048576;
  state.config.training.seq_len = int64_t{1} << 30;
  FakeEngine cpu_only;
  std::string err;
  CHECK_FALSE(state.run.start(cpu_only, state.config, state.history, &err));
  CHECK(cpu_only.starts.empty());
  CHECK_THAT(err, Catch::Contains("on the CPU (2 ranks x ") && Catch::Contains("and this machine has"));
  // where the engine finds a GPU, "auto" runs there: the profile's capacity is the check
  AppState gpu_state;
  REQUIRE(load_preset_into(gpu_state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  gpu_state.config = state.config;
  FakeEngine with_gpu;
  with_gpu.has_cuda = true;
  CHECK(gpu_state.run.start(with_gpu, gpu_state.config, gpu_state.history, &err));
  CHECK(with_gpu.starts.size() == 1);
}

TEST_CASE("a live edit after which the run would not fit is held back until applied anyway", "[studio][run][fit]") {
  AppState state;
  FakeEngine engine;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  state.config.hardware.device_memory_gib = 0.001;
  std::string err;
  REQUIRE(state.run.start(engine, state.config, state.history, &err, /*force=*/true));  // the user forced this one
  engine.advance_step();
  frame_update(state, engine, 0.0);
  state.config.memory.tiled_mlp = false;  // another config: the verdict is asked again
  frame_update(state, engine, 0.1);
  CHECK(engine.live_calls.empty());
  REQUIRE(state.run.unfit().has_value());
  CHECK_THAT(state.run.notice(), Catch::StartsWith("Not applied to the run: the planner predicts"));
  frame_update(state, engine, 0.2);  // said once, not sent on later frames
  CHECK(engine.live_calls.empty());
  REQUIRE(state.run.force_unfit(engine, state.history, &err));
  REQUIRE(engine.live_calls.size() == 1);
  CHECK_FALSE(engine.live_calls[0].memory.tiled_mlp);
}
