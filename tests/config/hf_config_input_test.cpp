// config.json as hostile input: a FIFO, a link to /dev/zero, a directory or an oversized file is
// refused at once (each read in a child process, so a regression hangs or fills memory there and
// fails here). defines: test cases [config][hf]
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "engine/config/hf_config.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

std::string fresh(const std::string& name) {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/hf_config_input_test_" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

/// read_hf_config(dir) in a child process limited to 2 GiB of memory: its error text, or
/// "(timeout)" when it did not finish within `seconds` (the child is then killed), or "(crash)".
std::string refusal_in_child(const std::string& dir, double seconds = 10) {
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    const rlimit memory{rlim_t{2} << 30, rlim_t{2} << 30};
    ::setrlimit(RLIMIT_AS, &memory);
    std::string text;
    try {
      HfConfigError error;
      text = read_hf_config(dir, &error) ? "(accepted)" : error.format();
    } catch (const std::exception& e) {  // bad_alloc from a read that never ends
      text = std::string("(exception) ") + e.what();
    }
    (void)!::write(pipefd[1], text.data(), text.size());
    ::_exit(0);  // never back into the test runner
  }
  ::close(pipefd[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  bool done = false;
  while (!(done = ::waitpid(pid, &status, WNOHANG) == pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  if (!done) return "(timeout)";
  if (!WIFEXITED(status)) return "(crash)";
  return text;
}

}  // namespace

TEST_CASE("hf config: a FIFO, a link to /dev/zero, a directory or an oversized config.json is refused at once",
          "[config][hf]") {
  // Read through ifstream, the FIFO waited for a writer forever and /dev/zero was read until the
  // memory ran out; each read here runs in a child that the test kills after 10 s.
  const std::string fifo = fresh("fifo");
  REQUIRE(::mkfifo((fifo + "/config.json").c_str(), 0644) == 0);
  CHECK_THAT(refusal_in_child(fifo), Catch::StartsWith(fifo + "/config.json: ") && Catch::Contains("is not a regular file"));
  const std::string zero = fresh("zero");
  REQUIRE(::symlink("/dev/zero", (zero + "/config.json").c_str()) == 0);
  CHECK_THAT(refusal_in_child(zero), Catch::StartsWith(zero + "/config.json: ") && Catch::Contains("is not a regular file"));
  const std::string dir = fresh("directory");
  REQUIRE(::mkdir((dir + "/config.json").c_str(), 0755) == 0);
  CHECK_THAT(refusal_in_child(dir), Catch::Contains("is a directory"));
  const std::string big = fresh("big");
  const std::string huge = "{\"model_type\": \"" + std::string(2 << 20, 'x') + "\"}";
  std::ofstream(big + "/config.json") << huge;
  CHECK_THAT(refusal_in_child(big), Catch::Contains("is " + std::to_string(huge.size()) + " bytes; a config.json is at most 1048576"));
  const std::string missing = fresh("missing");
  CHECK_THAT(refusal_in_child(missing), Catch::Contains("cannot open") && Catch::Contains("beside its safetensors"));
}
