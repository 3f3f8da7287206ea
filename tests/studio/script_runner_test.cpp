// Screenshot mode's schedule against the fake engine: it starts the run, makes --change-at edits
// through the UI path when their step arrives, waits for the steps, pauses, then captures.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "app/studio/script_runner.h"
#include "fake_engine.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::studio;
using odyssey::studio::testing::FakeEngine;

namespace {

/// Frames of `script` against the fake engine, which steps once every `frames_per_step` frames
/// while it runs, until the picture is taken (at most 5000 frames, 1 ms apart: the capture waits
/// for the planner's background ladder, which needs real time). Whether it was taken.
bool run_until_captured(AppState& state, FakeEngine& engine, ScriptRunner& script, int frames_per_step = 1) {
  double t = 0;
  for (int frame = 0; frame < 5000; ++frame) {
    if (engine.status().state == SessionState::Running && frame % frames_per_step == frames_per_step - 1)
      engine.advance_step();
    frame_update(state, engine, t);
    if (script.step(state, engine, t)) return true;
    t += 0.016;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

/// The tiny preset opened into `state` as the studio opens it, training `steps` steps (warm-up 1).
void open_tiny(AppState& state, int64_t steps) {
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  state.config.training.steps = steps;
  state.config.training.warmup_steps = 1;
  refresh_validation(state);
  REQUIRE(state.edit.issues.empty());
}

/// A screenshot run of the tiny preset for `steps` steps with one scripted edit `assignment` at
/// step `at`, run until its picture is taken; the run must have failed: its error.
std::string failed_edit_error(int64_t steps, int64_t at, const std::string& assignment) {
  StudioOptions o;
  o.run_steps = steps;
  o.frames = 1;
  o.changes = {{at, assignment}};
  AppState state;
  open_tiny(state, steps);
  FakeEngine engine;
  ScriptRunner script(o);
  REQUIRE(run_until_captured(state, engine, script));
  CHECK(script.failed());
  return script.error();
}

}  // namespace

TEST_CASE("screenshot mode trains the steps, applies scripted changes live, then captures", "[studio][script]") {
  StudioOptions o;
  o.run_steps = 4;
  o.frames = 3;
  o.changes = {{2, "memory.tiled_mlp=false"}};
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  FakeEngine engine;
  ScriptRunner script(o);
  double t = 0;
  auto frame = [&] {
    frame_update(state, engine, t);
    const bool capture = script.step(state, engine, t);
    t += 0.016;
    return capture;
  };
  CHECK_FALSE(frame());  // starts the run
  REQUIRE(engine.starts.size() == 1);
  int captures = 0, frames = 0;
  // The capture also waits for the planner's background ladder: give it real time.
  while (frames++ < 5000) {
    if (engine.status().state == SessionState::Running) engine.advance_step();
    if (frame()) {
      ++captures;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(state.plan.get(state.config).extras_ready);
  CHECK(captures == 1);
  CHECK_FALSE(script.failed());
  CHECK(engine.pauses == engine.resumes + 1);  // each pause for the edit lifted; the last for the picture
  CHECK(state.history.metrics().size() >= 4);
  REQUIRE(engine.live_calls.size() == 1);
  CHECK_FALSE(engine.live_calls[0].memory.tiled_mlp);
  REQUIRE(state.history.markers().size() == 1);
  CHECK(state.history.markers()[0].what == "memory.tiled_mlp: true -> false");
}

TEST_CASE("scripted edits for the same step land one at a time, each marked at its own step", "[studio][script]") {
  StudioOptions o;
  o.run_steps = 3;
  o.frames = 1;
  o.changes = {{1, "memory.tiled_mlp=false"}, {1, "memory.tiled_loss=false"}};
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  FakeEngine engine;
  ScriptRunner script(o);
  REQUIRE(run_until_captured(state, engine, script, /*frames_per_step=*/3));
  REQUIRE(state.history.markers().size() == 2);
  CHECK(state.history.markers()[0].what == "memory.tiled_mlp: true -> false");
  CHECK(state.history.markers()[1].what == "memory.tiled_loss: true -> false");
  CHECK(state.history.markers()[0].step < state.history.markers()[1].step);
  // on an engine already running the next step between frames: steps 2 and 3, one after the other
  AppState flight_state;
  REQUIRE(load_preset_into(flight_state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  FakeEngine flight;
  flight.step_in_flight = true;
  ScriptRunner flight_script(o);
  REQUIRE(run_until_captured(flight_state, flight, flight_script, /*frames_per_step=*/2));
  CHECK_FALSE(flight_script.failed());
  REQUIRE(flight_state.history.markers().size() == 2);
  CHECK(flight_state.history.markers()[0].step == 2);
  CHECK(flight_state.history.markers()[1].step == 3);
}

TEST_CASE("a scripted edit at step S applies from step S + 1 on an engine already running the next step",
          "[studio][script]") {
  // The real engine starts step S + 1 as step S ends, so an edit made once the UI saw step S
  // applied from S + 2 (`--change-at 2` marked at step 4). The run is paused at the boundary after
  // S, the edit made and sent there, and the run resumed.
  for (const int64_t at : {1, 2, 4}) {
    INFO("--change-at " << at);
    StudioOptions o;
    o.run_steps = 6;
    o.frames = 1;
    o.changes = {{at, "memory.tiled_mlp=false"}};
    AppState state;
    open_tiny(state, 6);
    FakeEngine engine;
    engine.step_in_flight = true;
    ScriptRunner script(o);
    REQUIRE(run_until_captured(state, engine, script, /*frames_per_step=*/2));
    CHECK_FALSE(script.failed());
    REQUIRE(state.history.markers().size() == 1);
    CHECK(state.history.markers()[0].step == at + 1);
    CHECK(state.history.markers()[0].what == "memory.tiled_mlp: true -> false");
    CHECK(engine.resumes >= 1);  // the pause for the edit was lifted
  }
}

TEST_CASE("screenshot mode reports a run that cannot start and still captures", "[studio][script]") {
  StudioOptions o;
  o.run_steps = 2;
  o.frames = 1;
  AppState state;
  FakeEngine engine;
  engine.refuse_start = true;  // a valid config the engine cannot start (a Session that fails to build)
  ScriptRunner script(o);
  frame_update(state, engine, 0);
  REQUIRE(state.edit.issues.empty());
  CHECK_FALSE(script.step(state, engine, 0));
  CHECK(script.failed());
  CHECK(script.error() == "the run did not start: cannot start here");
  CHECK(run_until_captured(state, engine, script));  // the picture is still taken
}

TEST_CASE("scripted assignments go through the schema", "[studio][script]") {
  AppState state;
  std::string err;
  REQUIRE(apply_assignment(state, "training.seq_len=3M", &err));
  CHECK(state.config.training.seq_len == 3 << 20);
  CHECK_FALSE(apply_assignment(state, "memory.no_such_key=1", &err));
  CHECK(err == "unknown key memory.no_such_key");
  CHECK_FALSE(apply_assignment(state, "memory.tiled_mlp=maybe", &err));
  CHECK(err.find("memory.tiled_mlp = ") == 0);
  CHECK(state.config.memory.tiled_mlp == false);
  CHECK_FALSE(apply_assignment(state, "nonsense", &err));
}

TEST_CASE("screenshot runs and --set refuse what odyssey train refuses", "[studio][script]") {
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  std::string err;
  // A model.hf_path that is no directory: no field shows it, and the studio trained the flavor's
  // model as if it were not there.
  const RunConfig before = state.config;
  CHECK_FALSE(apply_assignment(state, "model.hf_path=nope", &err));
  CHECK_THAT(err, Catch::Contains("model.hf_path") && Catch::Contains("nope is not a directory"));
  CHECK(state.config == before);

  // More --run-steps than the preset trains: refused before the run, not cut short silently.
  StudioOptions o;
  o.run_steps = state.config.training.steps + 1;
  CHECK_THAT(scripted_run_problem(o, state),
             Catch::Contains("the preset trains " + std::to_string(state.config.training.steps) + " steps"));
  o.run_steps = 2;
  CHECK(scripted_run_problem(o, state).empty());
  // A preset with a mistyped key opens (to be fixed), but neither runs nor offers Start.
  const std::string typo = std::string(ODYSSEY_BINARY_DIR) + "/studio_typo.toml";
  {
    std::ifstream in(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml");
    std::stringstream text;
    text << in.rdbuf();
    std::string preset = text.str();
    const size_t at = preset.find("\nsteps = ");
    REQUIRE(at != std::string::npos);
    preset.replace(at, 9, "\nstepz = ");  // a typo: training.steps keeps its default
    std::ofstream(typo) << preset;
  }
  AppState broken;
  REQUIRE(load_preset_into(broken, typo));
  REQUIRE_FALSE(broken.edit.file_problems.empty());
  CHECK_THAT(scripted_run_problem(o, broken), Catch::Contains("has problems its fields cannot show"));
  CHECK_THAT(start_blocker(broken), Catch::Contains("The preset file has problems"));
  CHECK(start_blocker(state).empty());
  FakeEngine engine;
  ScriptRunner script(o);
  frame_update(broken, engine, 0);
  CHECK_FALSE(script.step(broken, engine, 0));
  CHECK(script.failed());
  CHECK(engine.starts.empty());
}

TEST_CASE("a scripted edit the run ends before fails the screenshot run", "[studio][script]") {
  // The run finishes (training.steps = 2) before step 3's edit: the screenshot run fails, naming it.
  CHECK_THAT(failed_edit_error(/*steps=*/2, /*at=*/3, "memory.tiled_mlp=false"),
             Catch::Contains("--change-at 3:memory.tiled_mlp=false: not made: the run ended at step"));
}

TEST_CASE("a scripted run of a config that breaks a rule fails to start, and so does such an edit",
          "[studio][script]") {
  // ulysses_degree 3 does not divide tiny's 8 heads: the planner cannot plan it (it threw through
  // the run's start and aborted the studio), and a user's Start is off for it.
  StudioOptions o;
  o.run_steps = 2;
  o.frames = 1;
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  std::string err;
  REQUIRE(apply_assignment(state, "parallel.ulysses_degree=3", &err));
  REQUIRE_FALSE(state.edit.issues.empty());
  CHECK(scripted_run_problem(o, state).empty());  // no input error: the picture shows the field
  FakeEngine engine;
  ScriptRunner script(o);
  frame_update(state, engine, 0);
  CHECK_FALSE(script.step(state, engine, 0));
  CHECK(script.failed());
  CHECK_THAT(script.error(), Catch::Contains("the run did not start: the config breaks a rule: ") &&
                                 Catch::Contains("parallel.ulysses_degree"));
  CHECK(engine.starts.empty());
  // The run's own start refuses it too, with the planner's reason, rather than throwing.
  RunDriver driver;
  CHECK_FALSE(driver.start(engine, state.config, state.history, &err));
  CHECK_THAT(err, Catch::Contains("the planner cannot plan this config"));
  CHECK(engine.starts.empty());

  // An edit at step 1 that breaks the rule: held back at its field, and the screenshot run fails.
  CHECK_THAT(failed_edit_error(/*steps=*/3, /*at=*/1, "parallel.ulysses_degree=3"),
             Catch::Contains("--change-at 1:parallel.ulysses_degree=3: not made: the config breaks a rule"));
}
