// Export: a config saved from the studio is a preset that loads back to exactly that config (what
// `odyssey train FILE` will run), with comments; a bad path is reported.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/studio/app_state.h"
#include "app/studio/panels.h"
#include "engine/config/preset.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::studio;

TEST_CASE("a saved preset loads back to the edited config", "[studio][export]") {
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  state.config.memory.heads_per_stage = 4;
  state.config.training.seq_len = 768;
  state.config.memory.tiled_loss = false;
  const std::string path = (std::filesystem::temp_directory_path() / "odyssey_studio_export_test.toml").string();
  std::string msg;
  REQUIRE(export_preset(state.config, path, &msg));
  CHECK(msg == "Saved " + path + "; run it with: odyssey train " + path);
  const LoadedPreset back = load_preset(path);
  CHECK(back.ok());
  CHECK(back.config == state.config);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("# [memory]") != std::string::npos);
  CHECK(text.str().find("heads_per_stage = 4") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("saving to an impossible path says so", "[studio][export]") {
  std::string msg;
  CHECK_FALSE(export_preset(RunConfig{}, "/nonexistent-dir/x.toml", &msg));
  CHECK(msg.find("/nonexistent-dir/x.toml") != std::string::npos);
  CHECK_FALSE(export_preset(RunConfig{}, "", &msg));
  CHECK(msg == "give a file name, e.g. presets/my-run.toml");
}
