// odyssey-studio's command line: every option parses, bad values are named with their rule.
#include <catch2/catch.hpp>

#include "app/studio/cli_options.h"
#include "test_paths.h"

using namespace odyssey::studio;

namespace {
bool parse(std::vector<const char*> args, StudioOptions* o, std::string* err) {
  args.insert(args.begin(), "odyssey-studio");
  return parse_studio_args(static_cast<int>(args.size()), args.data(), o, err);
}
}  // namespace

TEST_CASE("studio options parse", "[studio][cli]") {
  StudioOptions o;
  std::string err;
  REQUIRE(parse({"presets/x.toml",
                 "--screenshot",
                 "out.png",
                 "--frames",
                 "7",
                 "--run-steps",
                 "30",
                 "--scale",
                 "2",
                 "--panel",
                 "Timeline",
                 "--size",
                 "1280x720",
                 "--set",
                 "training.seq_len=3M",
                 "--change-at",
                 "20:memory.tiled_mlp=false",
                 "--change-at",
                 "5:memory.tiled_loss=false",
                 "--timeout",
                 "30"},
                &o, &err));
  CHECK(o.preset == "presets/x.toml");
  CHECK(o.screenshot == "out.png");
  CHECK(o.frames == 7);
  CHECK(o.run_steps == 30);
  CHECK(o.scale == 2.0f);
  REQUIRE(o.panel);
  CHECK(*o.panel == PanelId::Timeline);
  CHECK(o.width == 1280);
  CHECK(o.height == 720);
  CHECK(o.sets == std::vector<std::string>{"training.seq_len=3M"});
  REQUIRE(o.changes.size() == 2);
  CHECK(o.changes[0].step == 5);  // sorted by step
  CHECK(o.changes[1].assignment == "memory.tiled_mlp=false");
  CHECK(o.timeout_s == 30);
}

TEST_CASE("studio defaults open the default preset", "[studio][cli]") {
  StudioOptions o;
  std::string err;
  REQUIRE(parse({}, &o, &err));
  CHECK(o.preset == "presets/tiny-cpu.toml");
  CHECK(o.screenshot.empty());
  CHECK(o.scale == 1.0f);
  CHECK_FALSE(o.panel);
}

TEST_CASE("studio options name what is wrong", "[studio][cli]") {
  StudioOptions o;
  std::string err;
  CHECK_FALSE(parse({"--scale", "9"}, &o, &err));
  CHECK(err == "--scale 9: needs a number between 0.5 and 4");
  CHECK_FALSE(parse({"--panel", "graphs"}, &o, &err));
  CHECK(err == "--panel graphs: unknown panel (config, plan, run, timeline, throughput, log, eval)");
  CHECK_FALSE(parse({"--frames", "x"}, &o, &err));
  CHECK(err == "--frames x: needs a whole number between 1 and 100000");
  CHECK_FALSE(parse({"--change-at", "memory.tiled_mlp=false"}, &o, &err));
  CHECK(err.find("needs STEP:section.key=value") != std::string::npos);
  CHECK_FALSE(parse({"--size", "10x10"}, &o, &err));
  CHECK_FALSE(parse({"--screenshot"}, &o, &err));
  CHECK(err == "--screenshot needs a file name");
  // a PNG that could not be written is refused before any frame (or --run-steps' training) runs
  CHECK_FALSE(parse({"--screenshot", "/nonexistent_folder/s.png"}, &o, &err));
  CHECK(err == "--screenshot /nonexistent_folder/s.png: the folder /nonexistent_folder does not exist");
  CHECK_FALSE(parse({"--screenshot", "/tmp"}, &o, &err));
  CHECK(err == "--screenshot /tmp: is a folder; name the PNG file to write");
  CHECK_FALSE(parse({"a.toml", "b.toml"}, &o, &err));
  CHECK(err == "unexpected argument b.toml (one preset at most)");
  CHECK_FALSE(parse({"--bogus"}, &o, &err));
  CHECK(err == "unknown option --bogus");
  // An option of one value given twice is refused, as odyssey's commands refuse it (the last won).
  CHECK_FALSE(parse({"--frames", "5", "--frames", "7"}, &o, &err));
  CHECK(err == "--frames given twice (5, then 7): give it once");
  CHECK_FALSE(parse({"--screenshot", "/tmp/a.png", "--screenshot", "/tmp/b.png"}, &o, &err));
  CHECK(err == "--screenshot given twice (/tmp/a.png, then /tmp/b.png): give it once");
  CHECK(parse({"--set", "training.steps=3", "--set", "training.lr=0.1"}, &o, &err));  // --set adds up
  // An option where a value belongs is refused, as odyssey's commands refuse it: `--screenshot
  // --panel plan` wrote a PNG named "--panel" and lost the option; "--" too. A value that truly
  // begins with "--" is written as a path, and a negative number is still a value.
  CHECK_FALSE(parse({"--screenshot", "--panel", "plan"}, &o, &err));
  CHECK(err ==
        "--screenshot needs a value, and the next argument is the option --panel: give --screenshot its value (for "
        "a file or folder of that name, --screenshot ./--panel)");
  CHECK_FALSE(parse({"--set", "--frames", "3"}, &o, &err));
  CHECK(err == "--set needs section.key=value, and the next argument is the option --frames");
  CHECK_FALSE(parse({"--panel", "--"}, &o, &err));
  CHECK(err == "--panel needs a value, and the next argument is the option --: give --panel its value");  // no path
  CHECK_FALSE(parse({"--scale", "-1"}, &o, &err));
  CHECK(err == "--scale -1: needs a number between 0.5 and 4");
  // A screenshot replaces only an earlier PNG: never the preset it opened, a FIFO or a device.
  const std::string preset = std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml";
  CHECK_FALSE(parse({preset.c_str(), "--screenshot", preset.c_str()}, &o, &err));
  CHECK(err == "--screenshot " + preset +
                   ": exists and is not a PNG; a screenshot replaces only an earlier picture: remove it, or name "
                   "another file");
  CHECK_FALSE(parse({"--screenshot", "/dev/null"}, &o, &err));
  CHECK_THAT(err, Catch::Contains("is not a regular file"));
  // What screenshot mode reads is refused without it (it was dropped unseen), and a scripted edit
  // is checked now: its key, its value, and a step the run still trains.
  CHECK_FALSE(parse({"--run-steps", "5"}, &o, &err));
  CHECK(err == "--run-steps works in screenshot mode only: add --screenshot FILE (or leave it out)");
  CHECK_FALSE(parse({"--screenshot", "s.png", "--run-steps", "3", "--change-at", "1:memory.bogus=1"}, &o, &err));
  CHECK(err == "--change-at 1:memory.bogus=1: unknown key memory.bogus");
  CHECK_FALSE(
      parse({"--screenshot", "s.png", "--run-steps", "3", "--change-at", "1:memory.tiled_mlp=maybe"}, &o, &err));
  CHECK_THAT(err, Catch::StartsWith("--change-at 1:memory.tiled_mlp=maybe: memory.tiled_mlp = \"maybe\": must be"));
  CHECK_FALSE(
      parse({"--screenshot", "s.png", "--run-steps", "2", "--change-at", "50:memory.tiled_mlp=false"}, &o, &err));
  CHECK_THAT(err, Catch::Contains("step 50 is not before --run-steps 2"));
  CHECK_FALSE(parse({"--screenshot", "s.png", "--change-at", "1:memory.tiled_mlp=false"}, &o, &err));
  CHECK(err == "--change-at needs --run-steps N: its edits are made while those steps train");
  CHECK_FALSE(parse({"--bench-samples", "100000000"}, &o, &err));
  CHECK_THAT(err, Catch::Contains("between 1 and 10000000"));
  // NaN passes every comparison; it once reached ImGui's font scale and aborted the app.
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "1e999"}) {
    INFO(bad);
    CHECK_FALSE(parse({"--scale", bad}, &o, &err));
    CHECK(err == std::string("--scale ") + bad + ": needs a number between 0.5 and 4");
    CHECK_FALSE(parse({"--timeout", bad}, &o, &err));
  }
}
