// odyssey tune as scripts use it, through the built binary: the choice, the runner-up and the
// changes (text and --json); -o writes a preset that check accepts, plan shows fitting and tune
// leaves as it is, with no size of a technique it turned off; an existing -o is refused without --overwrite; bad arguments and a config that
// nothing makes fit exit 2; plan shows the tuner's choice and runner-up; -o never writes through a
// link, a FIFO or a planted temporary; output the system refuses is exit 1; --headroom sets the
// device memory the tuner keeps free.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cli_test_util.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// The case: the 1B at 32K on the H200, whose preset runs the whole single-GPU stack.
const std::string k1bH200 = "presets/llama3.2-1b-1xh100.toml --set hardware.profile=h200 --set training.seq_len=32K";

Json parse_out(const Run& r) {
  std::string error;
  auto v = parse_json(r.out, &error);
  INFO("stdout: " << r.out.substr(0, 400) << "\nparse error: " << error);
  REQUIRE(v.has_value());
  return *v;
}

/// A path in the build tree no other test process uses.
std::string scratch(const std::string& name) {
  const std::string path = std::string(ODYSSEY_BINARY_DIR) + "/tune_cli_test." + std::to_string(getpid()) + "." + name;
  std::remove(path.c_str());
  return path;
}

}  // namespace

TEST_CASE("odyssey tune --json: the choice and the runner-up with their step times and peaks", "[cli][tune]") {
  const Run r = run_odyssey("tune " + k1bH200 + " --json");
  require_exit(r, 0);
  const Json v = parse_out(r);
  const Json& tune = v.at("tune");
  const Json& choice = tune.at("choice");
  const Json& runner_up = tune.at("runner_up");
  CHECK(choice.at("fits").get<bool>());
  CHECK(runner_up.at("fits").get<bool>());
  CHECK(choice.at("step_s").get<double>() > 0);
  CHECK(runner_up.at("step_s").get<double>() >= choice.at("step_s").get<double>());
  CHECK(choice.at("peak_bytes").get<int64_t>() > 0);
  CHECK(runner_up.at("peak_bytes").get<int64_t>() > 0);
  CHECK(choice.at("techniques").get<std::string>() != runner_up.at("techniques").get<std::string>());
  // fits without recompute, so it runs none: the changes turn checkpointing off, and only [memory] changes
  CHECK_FALSE(choice.at("memory").at("activation_checkpointing").get<bool>());
  // a word key is its word, as a preset spells it, not the word's TOML text
  CHECK(choice.at("memory").at("lse_attention_kernel").get<std::string>() == "auto");
  // and what "auto" resolves to where the candidate runs: each path's kernel, as `plan --json`
  // gives it for the preset with the candidate's changes
  for (const Json* candidate : {&choice, &runner_up}) {
    std::string sets;
    for (const auto& change : candidate->at("changes"))
      sets += " --set " + change.at("key").get<std::string>() + "=" + change.at("after").get<std::string>();
    const Run plan = run_odyssey("plan " + k1bH200 + sets + " --json");
    require_exit(plan, 0);
    const Json planned = parse_out(plan).at("time").at("attention_kernels");
    INFO(candidate->at("techniques").get<std::string>() << ":" << sets);
    CHECK(candidate->at("attention_kernels") == planned);
    int64_t blocks = 0;
    for (const auto& use : planned) blocks += use.at("blocks").get<int64_t>();
    CHECK(blocks == 16);
  }
  bool checkpointing_off = false;
  for (const auto& change : choice.at("changes")) {
    const std::string key = change.at("key").get<std::string>();
    CHECK(key.rfind("memory.", 0) == 0);
    checkpointing_off = checkpointing_off ||
                        (key == "memory.activation_checkpointing" && change.at("after").get<std::string>() == "false");
  }
  CHECK(checkpointing_off);
  CHECK(tune.at("configured").at("step_s").get<double>() > choice.at("step_s").get<double>());
  CHECK(tune.at("dropped").get<int64_t>() == static_cast<int64_t>(tune.at("dropped_sets").size()));
  for (const auto& dropped : tune.at("dropped_sets")) {
    CHECK_FALSE(dropped.at("fits").get<bool>());
    CHECK(dropped.at("step_s").get<double>() <= choice.at("step_s").get<double>());
  }
  CHECK(tune.at("evaluated").get<int64_t>() >= tune.at("distinct").get<int64_t>());
  CHECK(v.at("search_ms").get<double>() > 0);
  CHECK(v.at("written").is_null());
}

TEST_CASE(
    "odyssey tune -o: the tuned preset passes check, plans fitting and tunes to itself, and an existing file is "
    "kept unless --overwrite",
    "[cli][tune]") {
  const std::string out = scratch("tuned.toml");
  const Run r = run_odyssey("tune " + k1bH200 + " -o " + out);
  require_exit(r, 0);
  CHECK(r.out.find("fastest that fits (odyssey tune): ") != std::string::npos);
  CHECK(r.out.find("runner-up (") != std::string::npos);
  CHECK(r.out.find("changes against the preset:\n  memory.") != std::string::npos);
  CHECK(r.out.find("wrote " + out) != std::string::npos);
  require_exit(run_odyssey("check " + out), 0);
  const Run plan = run_odyssey("plan " + out + " --json");
  require_exit(plan, 0);
  const Json p = parse_out(plan);
  CHECK(p.at("fits").get<bool>());
  CHECK(p.at("tune").at("choice").at("changes").empty());  // the tuned preset is its own choice
  const Run again = run_odyssey("tune " + out);
  require_exit(again, 0);
  CHECK(again.out.find("changes against the preset: none") != std::string::npos);

  const std::string written = read_text(out);
  const Run refused = run_odyssey("tune presets/tiny-cpu.toml -o " + out);
  require_exit(refused, 2);
  CHECK(refused.err.find(out + " exists; pass --overwrite to replace it") != std::string::npos);
  CHECK(refused.out.empty());
  CHECK(read_text(out) == written);
  require_exit(run_odyssey("tune presets/tiny-cpu.toml -o " + out + " --overwrite"), 0);
  CHECK(read_text(out) != written);
  CHECK(read_text(out).find("flavor = \"tiny\"") != std::string::npos);
  std::remove(out.c_str());
}

TEST_CASE("odyssey tune -o: a technique the choice turns off leaves no size behind for check to note", "[cli][tune]") {
  // The 8B Untied preset (heads_per_stage = 8) at 128K, where the choice runs standard attention.
  const std::string out = scratch("turned_off.toml");
  const Run r = run_odyssey("tune presets/llama3-8b-5m-8xh100-untied.toml --set training.seq_len=128K -o " + out);
  require_exit(r, 0);
  CHECK(r.out.find("memory.untied_ulysses = true -> false") != std::string::npos);
  CHECK(r.out.find("memory.heads_per_stage = 8 -> ") != std::string::npos);
  const Run check = run_odyssey("check " + out);
  require_exit(check, 0);
  INFO(check.out << check.err);
  CHECK(check.out.find("note:") == std::string::npos);
  CHECK(check.err.find("note:") == std::string::npos);
  std::remove(out.c_str());
}

TEST_CASE("odyssey tune -o: links, FIFOs and a file in the way of its temporary are refused, a mode is kept",
          "[cli][tune]") {
  const std::string target = scratch("victim.txt"), link = scratch("link.toml"), dangling = scratch("dangling.toml"),
                    fifo = scratch("fifo.toml"), out = scratch("out.toml");
  std::remove(link.c_str());
  std::remove(dangling.c_str());
  std::remove((out + ".tmp").c_str());
  { std::ofstream(target) << "kept\n"; }
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  REQUIRE(::symlink((target + ".none").c_str(), dangling.c_str()) == 0);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A link planted where -o writes its temporary would have been followed.
  REQUIRE(::symlink(target.c_str(), (out + ".tmp").c_str()) == 0);
  const struct {
    std::string args, says;
  } cases[] = {
      {"-o " + link + " --overwrite", link + " is a symbolic link"},
      {"-o " + dangling, dangling + " is a symbolic link"},
      {"-o " + fifo + " --overwrite", fifo + " is not a regular file"},
      {"-o " + out, out + ".tmp exists, and -o writes through that name"},
      // a name the folder takes whose temporary (4 bytes more) it does not: said first, naming it
      {"-o " + out.substr(0, out.rfind('/')) + "/" + std::string(248, 'a') + ".tom",
       std::string(248, 'a') + ".tom: a file name of 252 bytes, and -o writes through"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const Run r = run_odyssey("tune presets/tiny-cpu.toml " + c.args);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(c.says));
  }
  CHECK(read_text(target) == "kept\n");
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  std::remove((out + ".tmp").c_str());
  // A private preset replaced stays private.
  { std::ofstream(out) << "old\n"; }
  REQUIRE(::chmod(out.c_str(), 0600) == 0);
  require_exit(run_odyssey("tune presets/tiny-cpu.toml -o " + out + " --overwrite"), 0);
  REQUIRE(::stat(out.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // A description with a line break and a control character: the header comment stays one line.
  const std::string preset = scratch("newline.toml"), tuned = scratch("newline-tuned.toml");
  {
    std::ofstream(preset)
        << "description = \"first\\nsecond\\u0001\"\n[model]\nflavor = \"tiny\"\n[training]\nseq_len = 512\n";
  }
  require_exit(run_odyssey("tune " + preset + " -o " + tuned), 0);
  require_exit(run_odyssey("check " + tuned), 0);
  CHECK_THAT(read_text(tuned), Catch::StartsWith("# Odyssey preset: first second \n"));
  for (const std::string& path : {target, link, dangling, fifo, out, preset, tuned}) std::remove(path.c_str());
}

TEST_CASE("odyssey plan: standard output the system refuses is a failure (exit 1), not a success", "[cli][tune]") {
  // /dev/full refuses every write with ENOSPC, as a full disk does.
  for (const std::string& command :
       {std::string("plan presets/tiny-cpu.toml --json"), std::string("check presets/tiny-cpu.toml")}) {
    INFO(command);
    const int status = std::system((std::string("cd ") + ODYSSEY_SOURCE_DIR + " && " + ODYSSEY_BIN_DIR + "/odyssey " +
                                    command + " > /dev/full 2> /dev/null")
                                       .c_str());
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
  }
  // A run writes its progress as it goes: the message gives the failed call's reason, never a
  // stale errno of a later call ("No such file or directory" once).
  const Run train = run_shell(std::string("cd ") + ODYSSEY_SOURCE_DIR + " && " + ODYSSEY_BIN_DIR +
                              "/odyssey train presets/tiny-cpu.toml --steps 1 --no-checkpoint --out " +
                              scratch("stdout_full_run") + " 2>&1 > /dev/full");  // stderr read
  CHECK(train.code == 1);
  CHECK_THAT(train.out, Catch::Contains("odyssey train: cannot write to standard output (") &&
                            (Catch::Contains("No space left on device") || Catch::Contains("an earlier write failed")));
}

TEST_CASE("odyssey tune: bad arguments exit 2 with the reason and nothing on stdout", "[cli][tune]") {
  const std::string missing_dir = scratch("no-such-dir") + "/tuned.toml";
  const struct {
    std::string args;
    std::string says;
  } cases[] = {
      {"tune", "expected one preset, got 0"},
      {"tune presets/tiny-cpu.toml presets/tiny-cpu.toml", "expected one preset, got 2"},
      {"tune presets/tiny-cpu.toml --steps 3", "unknown option --steps"},
      {"tune presets/tiny-cpu.toml -o", "-o needs a value"},
      {"tune presets/tiny-cpu.toml -o a.toml --output b.toml", "-o given twice (a.toml, then b.toml): give it once"},
      {"tune presets/tiny-cpu.toml --overwrite", "--overwrite needs -o OUT.toml"},
      {"tune presets/tiny-cpu.toml -o " + missing_dir, "does not exist"},
      {"tune presets/tiny-cpu.toml -o " + std::string(ODYSSEY_BINARY_DIR), "is a directory"},
      {"tune presets/tiny-cpu.toml --set memory.tiled_mlp=maybe", "memory.tiled_mlp"},
      {"tune presets/tiny-cpu.toml --headroom 3", "--headroom 3: give the device memory to keep free"},
      {"tune presets/tiny-cpu.toml --headroom 60%", "from 0% to 50%"},
      {"tune presets/tiny-cpu.toml --headroom=-1GiB", "--headroom -1GiB: give"},
      {"tune presets/tiny-cpu.toml --headroom 4TB", "in GiB or MiB"},
      {"tune presets/tiny-cpu.toml --headroom nan%", "--headroom nan%"},
      {"tune presets/tiny-cpu.toml --headroom 1% --headroom 2%", "--headroom given twice"},
      {"tune presets/tiny-cpu.toml --headroom=", "--headroom needs a share of the device (5%) or bytes (4GiB)"},
      {"tune presets/tiny-cpu.toml --headroom 0x10%", "--headroom 0x10%: give"},
      {"tune presets/tiny-cpu.toml --headroom 9GiB",
       "--headroom 9GiB: more than half the device's 16.00 GiB (hardware.device_memory_gib)"},
      {"plan presets/tiny-cpu.toml --headroom 5%", "unknown option --headroom"},
      {"tune no/such/preset.toml", "no/such/preset.toml"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const Run r = run_odyssey(c.args);
    require_exit(r, 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(c.says) != std::string::npos);
  }
}

TEST_CASE("odyssey tune --headroom: the device memory kept free, as a share or in GiB, in text and --json",
          "[cli][tune]") {
  const Run plan = run_odyssey("plan " + k1bH200 + " --json");
  require_exit(plan, 0);
  const int64_t capacity = parse_out(plan).at("device_capacity").get<int64_t>();
  const struct {
    std::string option;
    int64_t headroom;
  } cases[] = {
      {"", std::llround(0.03 * static_cast<double>(capacity))},  // the default: 3% of the device
      {" --headroom 0%", 0},
      {" --headroom=50%", std::llround(0.5 * static_cast<double>(capacity))},
      {" --headroom 4GiB", int64_t{4} << 30},
      {" --headroom 512MiB", int64_t{512} << 20},
  };
  for (const auto& c : cases) {
    INFO(c.option);
    const Run r = run_odyssey("tune " + k1bH200 + c.option + " --json");
    require_exit(r, 0);
    const Json tune = parse_out(r).at("tune");
    CHECK(tune.at("headroom_bytes").get<int64_t>() == c.headroom);
    CHECK(tune.at("choice").at("peak_bytes").get<int64_t>() + c.headroom <= capacity);
  }
  // 45 of 100 GiB free: the default's choice (60.91 GiB) is dropped for the headroom alone, and the
  // text says so beside what is kept; its JSON fits the plan and not the tuner
  const std::string device100 = k1bH200 + " --set hardware.device_memory_gib=100 --headroom 45GiB";
  const Run big = run_odyssey("tune " + device100);
  require_exit(big, 0);
  CHECK(big.out.find("(the tuner keeps 45.00 GiB of the device free: odyssey tune --headroom)") != std::string::npos);
  CHECK(big.out.find("tiled loss: device peak 60.91 GiB of 100.00 GiB leaves 39.09 GiB free, under the 45.00 GiB "
                     "headroom") != std::string::npos);
  const Run big_json = run_odyssey("tune " + device100 + " --json");
  require_exit(big_json, 0);
  bool dropped_for_headroom = false;
  const Json big_tune = parse_out(big_json).at("tune");  // held: a range-for over a temporary's member dangles
  for (const auto& dropped : big_tune.at("dropped_sets"))
    if (dropped.at("techniques").get<std::string>() == "tiled loss") {
      dropped_for_headroom = true;
      CHECK(dropped.at("fits_plan").get<bool>());
      CHECK_FALSE(dropped.at("fits").get<bool>());
    }
  CHECK(dropped_for_headroom);
  const Run none = run_odyssey("tune " + k1bH200 + " --headroom 0%");
  require_exit(none, 0);
  CHECK(none.out.find("the tuner keeps") == std::string::npos);
  // a device on which every table the plan fits leaves less than the headroom (its lowest peak is
  // 7.37 GiB): exit 2, naming the headroom, not the advisor
  const Run full = run_odyssey("tune " + k1bH200 + " --set hardware.device_memory_gib=10 --headroom 50%");
  require_exit(full, 2);
  CHECK(full.out.empty());
  CHECK(full.err.find("device peak 7.37 GiB of 10.00 GiB leaves 2.63 GiB free, under the 5.00 GiB headroom; "
                      "--headroom sets the memory kept free") != std::string::npos);
  CHECK(full.err.find("add devices") == std::string::npos);
}

TEST_CASE("odyssey tune: where no memory techniques make it fit, exit 2 with the advisor's word", "[cli][tune]") {
  const std::string out = scratch("never.toml");
  const Run r = run_odyssey("tune presets/llama3-8b-5m-8xh100-untied.toml --set training.seq_len=64M -o " + out);
  require_exit(r, 2);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("odyssey tune: nothing fits: none of the ", 0) == 0);
  CHECK(r.err.find("; the lowest peak, with ") != std::string::npos);
  const bool advisor_spoke = r.err.find("It fits with: ") != std::string::npos ||
                             r.err.find("No change of the memory techniques makes it fit") != std::string::npos;
  CHECK(advisor_spoke);
  CHECK(read_text(out).empty());  // nothing written
}

TEST_CASE("odyssey plan: the tuner's choice and runner-up beside the plan, in text and --json", "[cli][tune]") {
  const Run text = run_odyssey("plan " + k1bH200);
  require_exit(text, 0);
  const size_t choice_at = text.out.find("fastest that fits (odyssey tune): ");
  REQUIRE(choice_at != std::string::npos);
  CHECK(text.out.find("runner-up (", choice_at) != std::string::npos);
  CHECK(text.out.find("as configured (", choice_at) != std::string::npos);
  const Run json = run_odyssey("plan " + k1bH200 + " --json");
  require_exit(json, 0);
  const Json v = parse_out(json);
  // the contract's fields stay, the tuner's are added
  CHECK(v.at("fits").is_boolean());
  CHECK(v.at("peak_bytes").get<int64_t>() > 0);
  const Json& tune = v.at("tune");
  CHECK(tune.at("choice").at("step_s").get<double>() > 0);
  CHECK(tune.at("runner_up").at("step_s").get<double>() >= tune.at("choice").at("step_s").get<double>());
  CHECK(tune.at("configured").at("step_s").get<double>() == Approx(v.at("time").at("step_s").get<double>()));
  CHECK_FALSE(tune.contains("dropped_sets"));  // plan keeps its object short; tune --json lists them
}
