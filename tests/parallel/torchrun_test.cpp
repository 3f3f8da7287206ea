// torchrun conventions end to end on loopback: two processes (this test binary re-executed as a
// hidden worker) with RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT join one job
// through a TCPStore and train with run_training (the one loop); their losses equal the in-process
// rank threads' losses. Rank 0 alone under an agent store: a run that ends in --out meanwhile.
// defines: test cases [torchrun]
#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "../common/agent_store.h"
#include "../common/engine_test_util.h"
#include "../common/free_port.h"
#include "engine/train/run.h"
#include "test_paths.h"

extern char** environ;

using namespace odyssey;
using namespace odyssey::test;

namespace {

constexpr int64_t kSteps = 3;

/// The job both runs train: 2 ranks, Ulysses 2 with FSDP, Untied Ulysses, checkpointing.
RunConfig job_config() {
  RunConfig c = tiny_config(/*layers=*/2, /*seq=*/64);
  c.model.d_model = 64;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 8;
  c.parallel.world_size = 2;
  c.parallel.ulysses_degree = 2;
  c.parallel.fsdp = true;
  c.parallel.timeout_s = 60;
  c.memory.untied_ulysses = true;
  c.memory.heads_per_stage = 4;
  c.memory.activation_checkpointing = true;
  return c;
}

std::vector<double> job_losses() {
  RunOptions opt;
  opt.steps = kSteps;
  opt.checkpoints = false;
  const RunOutcome o = run_training(job_config(), opt);
  INFO(o.error);
  REQUIRE(o.status == RunOutcome::Status::Finished);
  REQUIRE(o.next_step == kSteps);  // every process knows where it ended, rank 0 or not
  std::vector<double> losses;
  for (const auto& m : o.metrics) losses.push_back(m.loss);
  return losses;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  REQUIRE(n > 0);
  return std::string(buf, static_cast<size_t>(n));
}

/// Starts this binary as the hidden worker with torchrun's variables for `rank`.
pid_t spawn_worker(const std::string& exe, int rank, int port, const std::string& out) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("RANK=", 0) == 0 || kv.rfind("WORLD_SIZE=", 0) == 0 || kv.rfind("LOCAL_RANK=", 0) == 0 ||
        kv.rfind("MASTER_", 0) == 0)
      continue;
    env_strings.push_back(kv);
  }
  env_strings.push_back("RANK=" + std::to_string(rank));
  env_strings.push_back("LOCAL_RANK=" + std::to_string(rank));
  env_strings.push_back("WORLD_SIZE=2");
  env_strings.push_back("MASTER_ADDR=127.0.0.1");
  env_strings.push_back("MASTER_PORT=" + std::to_string(port));
  env_strings.push_back("ODYSSEY_TORCHRUN_TEST_OUT=" + out);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string a0 = exe, a1 = "torchrun worker: train the job and write rank 0's losses";
  std::vector<char*> argv{a0.data(), a1.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) == 0);
  return pid;
}

}  // namespace

TEST_CASE("torchrun worker: train the job and write rank 0's losses", "[.torchrun_worker]") {
  const char* out = std::getenv("ODYSSEY_TORCHRUN_TEST_OUT");
  REQUIRE(out != nullptr);
  REQUIRE(job_mode(job_config().parallel) == JobMode::Torchrun);
  const std::vector<double> losses = job_losses();
  if (std::string(std::getenv("RANK")) != "0") {
    REQUIRE(losses.empty());  // only the process running rank 0 reports the steps
    return;
  }
  std::ofstream f(out);
  f.precision(17);
  for (double l : losses) f << l << "\n";
}

TEST_CASE("torchrun: two processes on loopback match the in-process rank threads' losses", "[torchrun]") {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
  const std::vector<double> threads = job_losses();
  REQUIRE(threads.size() == static_cast<size_t>(kSteps));

  const std::string out = std::string(ODYSSEY_BIN_DIR) + "/torchrun_test_losses_" + std::to_string(::getpid()) + ".txt";
  std::remove(out.c_str());
  const std::string exe = self_exe();
  const int port = free_port();
  const pid_t p0 = spawn_worker(exe, 0, port, out);
  const pid_t p1 = spawn_worker(exe, 1, port, out);
  int s0 = 0, s1 = 0;
  ::waitpid(p0, &s0, 0);
  ::waitpid(p1, &s1, 0);
  CHECK(WIFEXITED(s0));
  CHECK(WEXITSTATUS(s0) == 0);
  CHECK(WIFEXITED(s1));
  CHECK(WEXITSTATUS(s1) == 0);

  std::ifstream f(out);
  std::vector<double> processes;
  for (double l; f >> l;) processes.push_back(l);
  std::remove(out.c_str());
  REQUIRE(processes.size() == threads.size());
  for (size_t i = 0; i < threads.size(); ++i) {
    INFO("step " << i << ": threads " << threads[i] << ", processes " << processes[i]);
    // Same collectives in the same order; the intra-op thread count may differ (configure_threads),
    // which reorders ATen's sums: the loss tolerance of this model (engine_test_util.h). Later
    // steps add AdamW's flips of near-zero-gradient elements, which move the loss by those
    // elements' gradients times lr: negligible against it.
    CHECK(std::abs(processes[i] - threads[i]) <= loss_tolerance(job_config(), 1) * std::abs(threads[i]));
  }
}

TEST_CASE("torchrun: a run that ends in --out while rank 0 waits for its peers is refused and left whole",
          "[torchrun]") {
  // Rank 0 of a 2-process job, in this process, under torchrun's agent store (served here); the
  // test posts rank 1's verdicts. Between rank 0's check of --out (first agreement point) and its
  // lock (third), another run ends there. Rank 0 refuses under the lock before opening any file:
  // it used to write a failed summary.json over the run it found.
  const int port = free_port();
  auto agent = serve_agent_store(port);
  struct TorchrunVariables {  // set for rank 0, unset again whatever happens
    explicit TorchrunVariables(int port) {
      ::setenv("RANK", "0", 1);
      ::setenv("LOCAL_RANK", "0", 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    }
    ~TorchrunVariables() {
      for (const char* v :
           {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"})
        ::unsetenv(v);
    }
  } variables(port);
  const std::string dir = std::string(ODYSSEY_BIN_DIR) + "/torchrun_ended_meanwhile_" + std::to_string(::getpid());
  REQUIRE(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
  struct RemovedAtEnd {  // the run directory goes whether the case passes, fails or throws
    std::string dir;
    ~RemovedAtEnd() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
  } removed_at_end{dir};
  RunOptions opt;
  opt.out_dir = dir;
  opt.steps = 1;
  opt.checkpoints = false;
  RunOutcome outcome;
  std::thread rank0([&] { outcome = run_training(job_config(), opt); });
  const std::string round = "/worker/attempt_0/odyssey/start/";
  const std::vector<uint8_t> can_start{'0'};
  const std::string earlier = "{\"step\":1,\"loss\":5.5}\n";
  std::vector<uint8_t> verdict;
  try {
    const auto wait = std::chrono::milliseconds(60000);
    agent->wait({round + "0/0"}, wait);                    // rank 0 checked --out: empty
    agent->set(round + "0/1", agent->get(round + "0/0"));  // rank 1 can start, running rank 0's job
    agent->wait({round + "1/0"}, wait);                    // rank 0 made --out
    std::ofstream(dir + "/metrics.jsonl") << earlier;      // another run ends there now
    agent->set(round + "1/1", can_start);
    agent->wait({round + "2/0"}, wait);  // rank 0's verdict under the lock
    verdict = agent->get(round + "2/0");
    if (agent->add(round + "2/read", 1) == 2) agent->set(round + "2/all_read", can_start);  // rank 1 read it
  } catch (...) {
    rank0.join();  // it ends within the job's 60 s timeout
    INFO(outcome.error);
    throw;
  }
  rank0.join();
  const std::string posted(verdict.begin(), verdict.end());
  CHECK(posted.rfind("2--out " + dir + " holds a run", 0) == 0);  // refused, exit 2, with the reason
  CHECK(outcome.status == RunOutcome::Status::Failed);
  CHECK(outcome.bad_input);
  CHECK_THAT(outcome.error, Catch::Contains("holds a run"));
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::stringstream kept;
  kept << metrics.rdbuf();
  CHECK(kept.str() == earlier);
  CHECK(!std::ifstream(dir + "/summary.json").good());  // no failed summary over the run it found
}
