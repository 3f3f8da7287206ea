// The two executables behind one command line: `odyssey` links no LibTorch and plans in
// milliseconds; it hands the training commands and the full help to `odyssey-engine` beside it by
// exec (same process, arguments and exit code), and says where it looked when that is missing.
// defines: test cases [cli][handoff]
#include <cstdio>
#include <string>

#include "cli_test_util.h"

using namespace odyssey;
using namespace odyssey::test;

TEST_CASE("odyssey links no LibTorch, odyssey-engine does", "[cli][handoff]") {
  // ldd lists what the dynamic loader maps at start: loading LibTorch costs every process its
  // operator registry (0.8 s and 470 MB on a 2-core host) before main() runs
  const Run light = run_shell(std::string("ldd ") + ODYSSEY_BIN_DIR + "/odyssey 2>&1");
  INFO(light.out);
  REQUIRE(light.code == 0);
  CHECK(light.out.find("libc.so") != std::string::npos);
  CHECK(light.out.find("libtorch") == std::string::npos);
  CHECK(light.out.find("libc10") == std::string::npos);
  const Run engine = run_shell(std::string("ldd ") + ODYSSEY_BIN_DIR + "/odyssey-engine 2>&1");
  INFO(engine.out);
  REQUIRE(engine.code == 0);
  CHECK(engine.out.find("libtorch") != std::string::npos);
}

TEST_CASE("a training command runs in odyssey-engine with its own arguments and exit code", "[cli][handoff]") {
  const Run help = run_odyssey("train --help");
  require_exit(help, 0);
  CHECK(help.out.find("usage: odyssey train PRESET") != std::string::npos);
  // bad input through the handoff: the engine's message and exit code 2, unchanged
  const Run bad = run_odyssey("train tests/fixtures/does-not-exist.toml --steps 1");
  require_exit(bad, 2);
  CHECK(bad.err.find("does-not-exist.toml") != std::string::npos);
  // the full help lists the commands of both executables
  const Run all = run_odyssey("--help");
  require_exit(all, 0);
  for (const char* name : {"odyssey check", "odyssey plan", "odyssey tune", "odyssey train", "odyssey eval"})
    CHECK(all.out.find(name) != std::string::npos);
  // a command neither knows: the engine's refusal, exit 2
  const Run unknown = run_odyssey("no-such-command");
  require_exit(unknown, 2);
  CHECK(unknown.err.find("unknown command 'no-such-command'") != std::string::npos);
}

TEST_CASE("odyssey without odyssey-engine beside it plans, and names the engine a training command needs",
          "[cli][handoff]") {
  const std::string dir = fresh_dir("handoff_alone");
  REQUIRE(std::system(("mkdir -p '" + dir + "' && cp '" + ODYSSEY_BIN_DIR + "/odyssey' '" + dir + "/'").c_str()) == 0);
  const Run plan = run_shell("'" + dir + "/odyssey' plan presets/tiny-cpu.toml --json 2>&1");
  INFO(plan.out);
  CHECK(plan.code == 0);
  CHECK(plan.out.find("\"peak_bytes\"") != std::string::npos);
  const Run train = run_shell("'" + dir + "/odyssey' train presets/tiny-cpu.toml --steps 1 2>&1");
  INFO(train.out);
  CHECK(train.code == 1);
  // the path it looked at: odyssey's own folder as the kernel resolves it (/proc/self/exe)
  CHECK(train.out.find("odyssey train: cannot run ") != std::string::npos);
  CHECK(train.out.find("handoff_alone/odyssey-engine (No such file or directory)") != std::string::npos);
}
