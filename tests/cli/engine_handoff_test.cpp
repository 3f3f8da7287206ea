// The two executables behind one command line: `odyssey` links no LibTorch and plans in
// milliseconds; it hands the training commands and the full help to `odyssey-engine` beside it by
// exec (same process, arguments and exit code), and says where it looked when that is missing.
// `odyssey version` names the engine's build. defines: test cases [cli][handoff]
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

TEST_CASE("odyssey version names the engine's LibTorch, its CUDA and whether Odyssey's kernels are linked",
          "[cli][handoff]") {
  const Run light = run_odyssey("--version");  // odyssey's own: the version alone, no LibTorch loaded
  require_exit(light, 0);
  const Run text = run_odyssey("version");
  require_exit(text, 0);
  CHECK(text.out.rfind(light.out, 0) == 0);
  const Run json = run_odyssey("version --json");
  require_exit(json, 0);
  const auto build = parse_json(json.out);
  REQUIRE(build.has_value());
  CHECK("odyssey " + build->at("odyssey").get<std::string>() + "\n" == light.out);
  CHECK(build->at("libtorch").get<std::string>().rfind("2.", 0) == 0);
  CHECK(build->at("cuda_devices").get<int64_t>() >= 0);
  // what CMake decided (tests/CMakeLists.txt passes it to this file), as the engine reports it:
  // independent of the machine, which decides only libtorch_cuda (the wheel) and the devices
  CHECK(build->at("cuda_kernels").get<bool>() == (ODYSSEY_TEST_CUDA_KERNELS_LINKED != 0));
  if (ODYSSEY_TEST_CUDA_KERNELS_LINKED != 0) {
    CHECK(build->at("cuda_architectures").get<std::string>() == ODYSSEY_TEST_CUDA_ARCHITECTURES);
    CHECK_THAT(text.out, Catch::Contains("Odyssey's CUDA kernels: linked"));
  } else {
    CHECK(build->at("cuda_architectures").is_null());
    CHECK_THAT(text.out, Catch::Contains("Odyssey's CUDA kernels: not linked"));
  }
  CHECK_THAT(text.out, Catch::Contains(build->at("libtorch_cuda").is_null()
                                           ? std::string("CPU only")
                                           : "with CUDA " + build->at("libtorch_cuda").get<std::string>()));
  const Run bad = run_odyssey("version --jsn");
  require_exit(bad, 2);
  CHECK_THAT(bad.err, Catch::Contains("unknown argument --jsn"));
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
