// The Eval panel's model on eval.json files as `odyssey eval` writes them: the fixtures under
// tests/fixtures/eval/ are real output of the scenario of tests/cli/eval_cli_test.cpp (a run of the
// tiny preset after 2 steps, and its Hugging Face export with --no-needle), whose schema that test
// checks against the live command. Parsed fields, each broken rule's message, the run directory's
// scan (newest first, re-read on change, the selection kept), the command offered without an
// eval, and the heatmap's colours.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/studio/eval_results.h"
#include "engine/config/preset.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::studio;
namespace fs = std::filesystem;

namespace {

std::string fixture_path(const std::string& name) {
  return std::string(ODYSSEY_SOURCE_DIR) + "/tests/fixtures/eval/" + name + "/eval.json";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

/// Sets a file's modification time to `seconds` since the epoch (the scan's order).
void set_mtime(const std::string& path, int64_t seconds) {
  const timespec times[2] = {{static_cast<time_t>(seconds), 0}, {static_cast<time_t>(seconds), 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("odyssey_studio_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

/// The fixture's text with `from` replaced by `to` (exactly once).
std::string edited(const std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(from, at + 1) == std::string::npos);
  return text.substr(0, at) + to + text.substr(at + from.size());
}

}  // namespace

TEST_CASE("eval.json of a run: every field the panel shows", "[studio][eval]") {
  EvalResult e;
  std::string error;
  REQUIRE(parse_eval_json(read_text(fixture_path("run_step2")), "eval.json", &e, &error));
  CHECK(error.empty());
  CHECK(e.source_kind == "run");
  CHECK(e.source_path == "runs/tiny");
  REQUIRE(e.step);
  CHECK(*e.step == 2);
  CHECK(e.data == "data/heldout.odoc");
  CHECK(e.seq_len == 128);
  CHECK(e.device == "cpu");
  CHECK(e.memory == "checkpointing, offload, tiled MLP, tiled loss, Untied Ulysses 2 heads/stage");
  CHECK(e.document_positions == "restart");
  CHECK(e.sequences == 5);
  CHECK(e.tokens == 586);
  CHECK(e.unused_tokens == 73);
  CHECK(e.loss == Approx(3.6233).margin(5e-5));  // the CLI's table prints 3.6233
  // --first-bucket 8 at 128 tokens: [0, 8), [8, 32), [32, 128); the CLI's table: 307, 145, 134.
  REQUIRE(e.buckets.size() == 3);
  const int64_t edges[4] = {0, 8, 32, 128}, tokens[3] = {307, 145, 134};
  const double losses[3] = {3.5946, 3.6447, 3.6659};
  for (size_t i = 0; i < 3; ++i) {
    INFO("bucket " << i);
    CHECK(e.buckets[i].from == edges[i]);
    CHECK(e.buckets[i].to == edges[i + 1]);
    CHECK(e.buckets[i].tokens == tokens[i]);
    REQUIRE(e.buckets[i].loss);
    CHECK(*e.buckets[i].loss == Approx(losses[i]).margin(5e-5));  // 4 decimals in the table
  }
  REQUIRE(e.needle);
  const EvalNeedle& n = *e.needle;
  CHECK(n.trials == 2);
  CHECK(n.seed == 1234);
  CHECK(n.passkeys.size() == 2);
  CHECK(n.answer_tokens == 5);
  CHECK(n.lengths == std::vector<int64_t>{64, 128});
  CHECK(n.depths == std::vector<int64_t>{0, 25, 50, 75, 100});
  REQUIRE(n.cells.size() == 10);
  // Lengths outer, depths inner: row 1 column 2 is 128 tokens at 50%.
  CHECK(n.cell(1, 2).length == 128);
  CHECK(n.cell(1, 2).depth == 50);
  CHECK(n.cell(1, 2).trials == 2);
  for (const EvalNeedleCell& c : n.cells) CHECK(c.accuracy == double(c.correct) / double(c.trials));
  CHECK(n.accuracy == 0.0);
  REQUIRE(n.heatmap);
  CHECK(*n.heatmap == "runs/tiny/eval/needle.png");
}

TEST_CASE("eval.json of a Hugging Face directory without the needle grid", "[studio][eval]") {
  EvalResult e;
  std::string error;
  REQUIRE(parse_eval_json(read_text(fixture_path("hf_no_needle")), "eval.json", &e, &error));
  CHECK(e.source_kind == "hf");
  CHECK_FALSE(e.step);
  CHECK_FALSE(e.needle);
  CHECK(e.buckets.size() == 3);
  CHECK(e.tokens == 586);
}

TEST_CASE("eval.json: an empty bucket has no loss", "[studio][eval]") {
  // odyssey eval writes "loss": null for a bucket that scored nothing (a document shorter than it).
  const std::string text = edited(edited(read_text(fixture_path("hf_no_needle")), R"("tokens":586)", R"("tokens":452)"),
                                  R"({"from":32,"to":128,"tokens":134,"loss":3.6659127740717645})",
                                  R"({"from":32,"to":128,"tokens":0,"loss":null})");
  EvalResult e;
  std::string error;
  REQUIRE(parse_eval_json(text, "eval.json", &e, &error));
  CHECK_FALSE(e.buckets[2].loss);
  CHECK(e.buckets[2].tokens == 0);
}

TEST_CASE("eval.json: a broken file names the file, the key, the value and the rule", "[studio][eval]") {
  const std::string good = read_text(fixture_path("run_step2"));
  const std::string f = "runs/x/eval/eval.json";
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"", f + ": not JSON ("},
      {good.substr(0, good.size() / 2), f + ": not JSON ("},
      {"[1, 2]", f + ": not an eval.json of odyssey eval (the document is not a JSON object)"},
      {edited(good, R"("ok":true)", R"("ok":false)"), f + ": ok = false: must be true"},
      {edited(good, R"("seq_len":128,)", ""), f + ": seq_len: missing (every eval.json of odyssey eval has it)"},
      {edited(good, R"("seq_len":128)", R"("seq_len":128.5)"), f + ": seq_len = 128.5: must be a whole number"},
      {edited(good, R"("kind":"run")", R"("kind":"disk")"), f + ": source.kind = \"disk\": must be \"run\""},
      {edited(good, R"("step":2)", R"("step":null)"), f + ": source.step = null: must be a whole number"},
      {edited(good, R"("loss":3.5945904852901296)", R"("loss":"low")"),
       f + ": buckets[0].loss = \"low\": must be a number"},
      {edited(good, R"("loss":3.6659127580585764)", R"("loss":-1.5)"),
       f + ": buckets[2].loss = -1.5: must be a number in [0, 1e+09]"},
      {edited(good, R"("from":8,"to":32)", R"("from":9,"to":32)"),
       f + ": buckets[1].from = 9: must equal the previous bucket's end, 8 (buckets are contiguous)"},
      {edited(good, R"("from":8,"to":32,"tokens":145,"loss":3.6447137043393893)",
              R"("from":8,"to":32,"tokens":145,"loss":null)"),
       f + ": buckets[1].loss = null: null, but the bucket scored 145 tokens"},
      {edited(good, R"("tokens":586)", R"("tokens":587)"),
       f + ": tokens = 587: must be the buckets' tokens summed, 586"},
      {edited(good, R"({"length":64,"depth":75,"trials":2,"correct":0,"accuracy":0.0})",
              R"({"length":64,"depth":75,"trials":2,"correct":5,"accuracy":0.0})"),
       f + ": needle.cells[3].correct = 5: more than the cell's trials, 2"},
      {edited(good, R"({"length":64,"depth":75,"trials":2,"correct":0,"accuracy":0.0})",
              R"({"length":64,"depth":75,"trials":2,"correct":1,"accuracy":0.0})"),
       f + ": needle.cells[3].accuracy = 0.0: must equal correct / trials = 1/2"},
      {edited(good, R"({"length":64,"depth":75,"trials":2,"correct":0,"accuracy":0.0},)", ""),
       f + ": needle.cells: holds 9 cells; the grid of 2 lengths x 5 depths needs 10"},
      {edited(good, R"({"length":64,"depth":75,)", R"({"length":64,"depth":70,)"),
       f + ": needle.cells[3].depth = 70: must be 75 (cells run lengths outer, depths inner)"},
      {edited(good, R"("lengths":[64,128])", R"("lengths":[128,64])"),
       f + ": needle.lengths[1] = 64: must be larger than the one before (ascending)"},
      {edited(good, R"("depths":[0,25,50,75,100])", R"("depths":[0,25,50,75,101])"),
       f + ": needle.depths[4] = 101: must be at most 100"},
      {edited(good, R"("heatmap":"runs/tiny/eval/needle.png")", R"("heatmap":3)"),
       f + ": needle.heatmap = 3: must be the PNG's path, or null"},
      {edited(good, R"("needle":{)", R"("needle":7,"x":{)"), f + ": needle = 7: must be an object, or null"},
  };
  for (const Case& c : cases) {
    INFO(c.text.substr(0, 120));
    EvalResult e;
    std::string error;
    CHECK_FALSE(parse_eval_json(c.text, f, &e, &error));
    CHECK_THAT(error, Catch::StartsWith(c.message));
  }
}

TEST_CASE("eval library: a run directory's evals, newest first, re-read when they change", "[studio][eval]") {
  const std::string dir = fresh_dir("eval_library");
  const std::string run = read_text(fixture_path("run_step2"));
  EvalLibrary lib;
  // Nothing there yet: the directory exists, no checkpoint, no eval.
  REQUIRE(lib.refresh(dir, 0.0));
  CHECK(lib.dir_exists());
  CHECK_FALSE(lib.has_checkpoint());
  CHECK(lib.files().empty());
  CHECK(lib.selected() == -1);
  CHECK(lib.selected_file() == nullptr);
  // Within kRescanS nothing is looked at; a forced refresh looks.
  write_text(dir + "/checkpoints/latest.json", "{}");
  write_text(dir + "/eval/eval.json", run);
  set_mtime(dir + "/eval/eval.json", 2000);
  write_text(dir + "/eval-step1/eval.json", edited(run, R"("step":2)", R"("step":1)"));
  set_mtime(dir + "/eval-step1/eval.json", 1000);
  write_text(dir + "/broken/eval.json", "{\"ok\": true");
  set_mtime(dir + "/broken/eval.json", 3000);
  write_text(dir + "/checkpoints/step_00000002/model.bin", "x");  // folders without an eval.json are skipped
  CHECK_FALSE(lib.refresh(dir, EvalLibrary::kRescanS / 2));
  CHECK(lib.files().empty());
  REQUIRE(lib.refresh(dir, EvalLibrary::kRescanS / 2, true));
  CHECK(lib.has_checkpoint());
  REQUIRE(lib.files().size() == 3);
  CHECK(lib.files()[0].name == "broken/eval.json");  // newest first
  CHECK(lib.files()[1].name == "eval/eval.json");
  CHECK(lib.files()[2].name == "eval-step1/eval.json");
  CHECK(lib.files()[1].path == dir + "/eval/eval.json");
  CHECK(lib.selected() == 0);
  CHECK_FALSE(lib.files()[0].result);
  CHECK_THAT(lib.files()[0].error, Catch::StartsWith(dir + "/broken/eval.json: not JSON ("));
  REQUIRE(lib.files()[2].result);
  CHECK(*lib.files()[2].result->step == 1);
  // The losses are compared with the evaluation before, when its buckets are the same.
  CHECK(lib.older_alike(1) == 2);
  CHECK(lib.older_alike(2) == -1);  // the oldest
  CHECK(lib.older_alike(0) == -1);  // unreadable
  CHECK(lib.older_alike(7) == -1);

  // The selection follows its file across rescans; a rewritten file is read again.
  lib.select(2);
  write_text(dir + "/eval-step1/eval.json", edited(run, R"("step":2)", R"("step":7)"));
  set_mtime(dir + "/eval-step1/eval.json", 4000);
  REQUIRE(lib.refresh(dir, 10.0));
  REQUIRE(lib.selected_file());
  CHECK(lib.selected_file()->name == "eval-step1/eval.json");
  CHECK(lib.selected() == 0);  // now the newest
  REQUIRE(lib.selected_file()->result);
  CHECK(*lib.selected_file()->result->step == 7);
  // Its file gone, the selection moves to the newest left.
  fs::remove_all(dir + "/eval-step1");
  REQUIRE(lib.refresh(dir, 20.0));
  REQUIRE(lib.files().size() == 2);
  CHECK(lib.selected_file()->name == "broken/eval.json");
  lib.select(5);  // out of range: ignored
  CHECK(lib.selected() == 0);

  // Another directory is looked at at once; a missing one has nothing.
  REQUIRE(lib.refresh(dir + "/nothing", 20.5));
  CHECK_FALSE(lib.dir_exists());
  CHECK(lib.files().empty());
  fs::remove_all(dir);
}

TEST_CASE("eval library: only evaluations with the same buckets compare", "[studio][eval]") {
  const std::string dir = fresh_dir("eval_alike");
  const std::string run = read_text(fixture_path("run_step2"));
  write_text(dir + "/a/eval.json", run);
  set_mtime(dir + "/a/eval.json", 1000);
  // The same evaluation with a first bucket of 16: [0, 16), [16, 128) (tokens moved along).
  write_text(dir + "/b/eval.json",
             edited(edited(run, R"({"from":0,"to":8,"tokens":307,)", R"({"from":0,"to":16,"tokens":307,)"),
                    R"({"from":8,"to":32,"tokens":145,)", R"({"from":16,"to":32,"tokens":145,)"));
  set_mtime(dir + "/b/eval.json", 2000);
  EvalLibrary lib;
  REQUIRE(lib.refresh(dir, 0.0));
  REQUIRE(lib.files().size() == 2);
  REQUIRE(lib.files()[0].result);
  REQUIRE(lib.files()[1].result);
  CHECK_FALSE(same_buckets(*lib.files()[0].result, *lib.files()[1].result));
  CHECK(lib.older_alike(0) == -1);
  CHECK(same_buckets(*lib.files()[1].result, *lib.files()[1].result));
  fs::remove_all(dir);
}

TEST_CASE("eval library: an eval.json that is no regular file is refused, not read", "[studio][eval]") {
  const std::string dir = fresh_dir("eval_fifo");
  fs::create_directories(dir + "/eval");
  REQUIRE(::mkfifo((dir + "/eval/eval.json").c_str(), 0600) == 0);          // no writer: a blocking read would hang
  write_text(dir + "/eval.json", read_text(fixture_path("hf_no_needle")));  // the directory is itself an --out
  EvalLibrary lib;
  REQUIRE(lib.refresh(dir, 0.0));
  REQUIRE(lib.files().size() == 2);
  const auto fifo = std::find_if(lib.files().begin(), lib.files().end(),
                                 [](const EvalFile& f) { return f.name == "eval/eval.json"; });
  REQUIRE(fifo != lib.files().end());
  CHECK_FALSE(fifo->result);
  CHECK_THAT(fifo->error, Catch::Contains(dir + "/eval/eval.json") && Catch::Contains("regular file"));
  const auto top =
      std::find_if(lib.files().begin(), lib.files().end(), [](const EvalFile& f) { return f.name == "eval.json"; });
  REQUIRE(top != lib.files().end());
  CHECK(top->result);
  fs::remove_all(dir);
}

TEST_CASE("eval command: what the panel offers when the run has no eval", "[studio][eval]") {
  const LoadedPreset tiny = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml");
  REQUIRE(tiny.ok());
  CHECK(eval_command(tiny.config, "presets/tiny-cpu.toml", "runs/tiny-cpu", false) ==
        "odyssey train presets/tiny-cpu.toml --out runs/tiny-cpu\n"
        "odyssey eval runs/tiny-cpu --data HELDOUT.odoc --seq-len 512 --tokenizer TOKENIZER.json");
  CHECK(eval_command(tiny.config, "presets/tiny-cpu.toml", "runs/tiny-cpu", true) ==
        "odyssey eval runs/tiny-cpu --data HELDOUT.odoc --seq-len 512 --tokenizer TOKENIZER.json");
  // A model directory carries its tokenizer; lengths in K; a path with a space or a quote is quoted.
  RunConfig cfg = tiny.config;
  cfg.model.hf_path = "models/llama";
  cfg.training.seq_len = 131072;
  CHECK(eval_command(cfg, "p.toml", "my runs/it's", true) ==
        "odyssey eval 'my runs/it'\\''s' --data HELDOUT.odoc --seq-len 128K");
}

TEST_CASE("eval heatmap colours: needle.png's ramp, red to yellow to green", "[studio][eval]") {
  // IM_COL32 layout: 0xAABBGGRR. The ramp's three stops (app/cli/eval_heatmap.h).
  auto rgba = [](uint32_t r, uint32_t g, uint32_t b) { return r | g << 8 | b << 16 | 0xFFu << 24; };
  CHECK(accuracy_color(0.0) == rgba(215, 48, 39));
  CHECK(accuracy_color(0.5) == rgba(254, 224, 139));
  CHECK(accuracy_color(1.0) == rgba(26, 152, 80));
  CHECK(accuracy_color(-1.0) == accuracy_color(0.0));  // clamped
  CHECK(accuracy_color(0.25) ==
        rgba(235, 136, 89));  // halfway red -> yellow: (215+254)/2, (48+224)/2, (39+139)/2, rounded
}
