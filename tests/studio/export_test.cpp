// Export: a config saved from the studio is a preset that loads back to exactly that config (what
// `odyssey train FILE` will run), with comments; a bad path is reported; an existing file is
// replaced only by the dialog's Replace, a config that does not validate never, and a FIFO,
// directory or link never.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

#include "../common/file_text.h"
#include "app/studio/app_state.h"
#include "app/studio/panels.h"
#include "engine/config/preset.h"
#include "fake_engine.h"
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

TEST_CASE("the file dialogs replace an existing file only when asked, and never with a config that fails",
          "[studio][export]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "odyssey_studio_replace_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string kept = (dir / "kept.toml").string();
  std::ofstream(kept) << "# the user's own preset, with comments\n";
  AppState state;
  REQUIRE(load_preset_into(state, std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml"));
  testing::FakeEngine engine;

  // Save preset over it: refused, Replace offered for that path, the file as it was.
  state.dialog = FileDialog::SavePreset;
  CHECK_FALSE(run_file_dialog_action(state, engine, kept, false));
  CHECK_THAT(state.dialog_message, Catch::Contains(kept + " exists; press Replace"));
  CHECK(state.dialog_replace_path == kept);
  CHECK(odyssey::test::file_text(kept) == "# the user's own preset, with comments\n");
  // A config the validator refuses (3 ranks, Ulysses 2) is not written, even with Replace: the
  // studio once wrote it over the preset and then said it "does not load cleanly".
  const int64_t ranks = state.config.parallel.world_size;
  REQUIRE(state.config.parallel.ulysses_degree == 2);
  state.config.parallel.world_size = 3;
  CHECK_FALSE(run_file_dialog_action(state, engine, kept, true));
  CHECK_THAT(state.dialog_message,
             Catch::Contains("not saved: this config does not load cleanly") && Catch::Contains("world_size = 3"));
  CHECK(odyssey::test::file_text(kept) == "# the user's own preset, with comments\n");
  state.config.parallel.world_size = ranks;
  CHECK(run_file_dialog_action(state, engine, kept, true));  // Replace: the studio's preset now
  CHECK(load_preset(kept).config == state.config);

  // Export trace over an existing file: refused before the engine is asked; Replace writes it.
  state.dialog = FileDialog::ExportTrace;
  CHECK_FALSE(run_file_dialog_action(state, engine, kept, false));
  CHECK(engine.exports.empty());
  CHECK(state.dialog_replace_path == kept);
  CHECK(run_file_dialog_action(state, engine, kept, true));
  CHECK(odyssey::test::file_text(kept) == "trace");

  // A FIFO, a directory and a link are never replaced: no Replace is offered.
  const std::string fifo = (dir / "fifo.toml").string(), link = (dir / "link.toml").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  std::filesystem::create_symlink(kept, link);
  for (const FileDialog d : {FileDialog::SavePreset, FileDialog::ExportMetrics}) {
    state.dialog = d;
    for (const std::string& path : {fifo, dir.string(), link}) {
      INFO(path);
      CHECK_FALSE(run_file_dialog_action(state, engine, path, true));
      CHECK(state.dialog_replace_path.empty());
      CHECK_FALSE(state.dialog_message.empty());
    }
  }
  CHECK(std::filesystem::is_fifo(fifo));
  CHECK(odyssey::test::file_text(kept) == "trace");
  CHECK(engine.exports.size() == 1);
  std::filesystem::remove_all(dir);
}
