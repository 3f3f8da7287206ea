// Helpers of the CLI tests that run the real `odyssey` binary: run it and read its output, start
// it as a child (one per torchrun rank), wait for checkpoints and exits, read metrics.jsonl.
// defines: kTiny, kShort, read_text, generated_section, fresh_dir, Run, run_shell, run_odyssey, require_exit,
// spawn_odyssey, spawn_torchrun, checkpoint_step, losses, wait_for_checkpoint, wait_exit, wait_exit_or_kill,
// exit_code_after_signal, require_ranks_exit, require_ranks_exit_zero, metrics_lines
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/free_port.h"
#include "engine/util/json_read.h"
#include "test_paths.h"

namespace odyssey::test {

// tiny-cpu on one rank with a short sequence: about 25 ms a step on this machine (one intra-op
// thread: on the shared 2-core machine two threads spin against other processes, 4x slower).
inline const std::string kTiny =
    "presets/tiny-cpu.toml --set parallel.world_size=1 --set parallel.ulysses_degree=1 --set parallel.fsdp=false "
    "--set training.seq_len=128 ";

/// The tiny preset with a warmup short runs can hold.
inline const std::string kShort = kTiny + "--set training.warmup_steps=1 ";

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The generated section of a doc: the text between the line holding `<!-- NAME:begin` and the
/// marker `<!-- NAME:end -->` (both required, in that order).
inline std::string generated_section(const std::string& doc, const std::string& name) {
  const auto begin = doc.find("<!-- " + name + ":begin");
  const auto end = doc.find("<!-- " + name + ":end -->");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  REQUIRE(begin < end);
  const auto body = doc.find('\n', begin) + 1;
  return doc.substr(body, end - body);
}

inline std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/train_cli_test_" + name;
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

struct Run {
  int code = -1;
  std::string out, err;
};

/// Runs `command` in sh from the source tree: its stdout and exit code (-1 when a signal ended it).
inline Run run_shell(const std::string& command) {
  const std::string cmd = std::string("cd ") + ODYSSEY_SOURCE_DIR + " && " + command;
  Run r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline Run run_odyssey(const std::string& args) {
  // One stderr file per test process: CTest runs the cases in parallel.
  const std::string err_path =
      std::string(ODYSSEY_BINARY_DIR) + "/train_cli_test." + std::to_string(getpid()) + ".stderr";
  Run r = run_shell(std::string("OMP_NUM_THREADS=1 ") + ODYSSEY_BIN_DIR + "/odyssey " + args + " 2>" + err_path);
  r.err = read_text(err_path);
  return r;
}

/// A run must end by itself with `expected`: a crash shows as code -1 (killed by a signal).
inline void require_exit(const Run& r, int expected) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.code == expected);
}

// Starts `odyssey ARGS` as a child process (stdout/stderr to files); returns its pid. `env`:
// "NAME=value ..." exported for it.
inline pid_t spawn_odyssey(const std::string& args, const std::string& log, const std::string& env = "") {
  const pid_t pid = fork();
  if (pid == 0) {
    if (chdir(ODYSSEY_SOURCE_DIR) != 0) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    const std::string cmd = "export OMP_NUM_THREADS=1 " + env + "; exec " + ODYSSEY_BIN_DIR + "/odyssey " + args;
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// The step of DIR's latest checkpoint, or -1.
inline int64_t checkpoint_step(const std::string& dir) {
  auto v = parse_json(read_text(dir + "/checkpoints/latest.json"));
  return v && v->contains("step") ? v->at("step").get<int64_t>() : -1;
}

// step -> loss from metrics.jsonl (a later line for the same step wins: a resumed run re-runs steps
// after the last checkpoint).
inline std::map<int64_t, double> losses(const std::string& dir) {
  std::map<int64_t, double> out;
  std::istringstream lines(read_text(dir + "/metrics.jsonl"));
  std::string line;
  while (std::getline(lines, line)) {
    auto v = parse_json(line);
    REQUIRE(v.has_value());
    out[v->at("step").get<int64_t>()] = v->at("loss").get<double>();
  }
  return out;
}

// Waits until DIR's checkpoint reaches `step` (or the child exits); true when reached.
inline bool wait_for_checkpoint(pid_t pid, const std::string& dir, int64_t step) {
  for (int i = 0; i < 60000; ++i) {
    if (checkpoint_step(dir) >= step) return true;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return checkpoint_step(dir) >= step;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// One `odyssey train ARGS` process per rank of a `ranks`-rank torchrun job on loopback, one node
// (LOCAL_WORLD_SIZE = ranks); logs DIR.rank<r>.log. `env`: more "NAME=VALUE" words for every rank.
inline std::vector<pid_t> spawn_torchrun(const std::string& args, const std::string& dir, int ranks = 2,
                                         const std::string& env = "") {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < ranks; ++rank)
    pids.push_back(spawn_odyssey(args, dir + ".rank" + std::to_string(rank) + ".log",
                                 "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
                                     " WORLD_SIZE=" + std::to_string(ranks) +
                                     " LOCAL_WORLD_SIZE=" + std::to_string(ranks) +
                                     " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " " + env));
  return pids;
}

// The exit status of `pid` if it ends within `seconds`, else nullopt (it is then still running).
inline std::optional<int> wait_exit(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

/// wait_exit, and a process still running after `seconds` killed and reaped (nullopt then): a
/// failing test leaves nothing running.
inline std::optional<int> wait_exit_or_kill(pid_t pid, double seconds) {
  const std::optional<int> status = wait_exit(pid, seconds);
  if (!status) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  return status;
}

/// Sends `sig` to `pid` and returns the exit code it ends with; a process still running 10 s later
/// (killed), or one the signal ended, fails the test with `log` shown.
inline int exit_code_after_signal(pid_t pid, int sig, const std::string& log) {
  ::kill(pid, sig);
  const auto status = wait_exit_or_kill(pid, 10);
  INFO(read_text(log));
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  return WEXITSTATUS(*status);
}

/// Waits for every torchrun rank of `pids` (started by spawn_torchrun into `dir`) to exit with
/// `code` within `seconds` each (a rank still running then is killed: the test fails, nothing
/// lingers); a rank that does not shows its log (DIR.rankN.log) in the failure. Returns the logs.
inline std::vector<std::string> require_ranks_exit(const std::vector<pid_t>& pids, const std::string& dir, int code,
                                                   double seconds = 300) {
  std::vector<std::string> logs;
  for (size_t rank = 0; rank < pids.size(); ++rank) {
    const auto status = wait_exit(pids[rank], seconds);
    if (!status) {
      ::kill(pids[rank], SIGKILL);
      waitpid(pids[rank], nullptr, 0);
    }
    logs.push_back(read_text(dir + ".rank" + std::to_string(rank) + ".log"));
    INFO("rank " << rank << ": " << logs.back());
    REQUIRE(status.has_value());
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == code);
  }
  return logs;
}

inline void require_ranks_exit_zero(const std::vector<pid_t>& pids, const std::string& dir, double seconds = 300) {
  require_ranks_exit(pids, dir, 0, seconds);
}

inline int64_t metrics_lines(const std::string& dir) {
  std::istringstream lines(read_text(dir + "/metrics.jsonl"));
  int64_t n = 0;
  for (std::string line; std::getline(lines, line);) ++n;
  return n;
}

}  // namespace odyssey::test
