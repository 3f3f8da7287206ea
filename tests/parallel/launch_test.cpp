// Rank launch: group layout, rank threads with world/sp/dp groups, error propagation, emulation's
// context, torchrun's environment, a TCPStore join on loopback and the start its processes agree on.
// defines: test cases [launch]
#include <catch2/catch.hpp>

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../common/agent_store.h"
#include "../common/engine_test_util.h"
#include "../common/child_process.h"
#include "../common/free_port.h"
#include "engine/parallel/job.h"
#include "engine/parallel/peer_watch.h"
#include "engine/parallel/rank_launch.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/train/trainer.h"

using namespace odyssey;
using odyssey::test::free_port;

namespace {

ParallelConfig parallel_config(int world, int degree, double timeout_s = 30.0) {
  ParallelConfig p;
  p.world_size = world;
  p.ulysses_degree = degree;
  p.timeout_s = timeout_s;
  return p;
}

/// Runs `rank_fn(i)` on `count` threads, one per process of a loopback job; each one's exception
/// text ("" when it finished).
std::vector<std::string> run_process_threads(int count, const std::function<void(int)>& rank_fn) {
  std::vector<std::string> errors(static_cast<size_t>(count));
  std::vector<std::thread> ranks;
  for (int r = 0; r < count; ++r)
    ranks.emplace_back([&, r] {
      try {
        rank_fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return errors;
}

/// Runs `rank_fn(r)` on two threads, one per rank of a loopback job; each rank's exception text.
std::vector<std::string> run_two_rank_threads(const std::function<void(int)>& rank_fn) {
  return run_process_threads(2, rank_fn);
}

}  // namespace

TEST_CASE("rank layout: SP groups are contiguous blocks, DP groups strided", "[launch]") {
  // 8 ranks, P = 4: sp.0 = {0,1,2,3}, sp.1 = {4,5,6,7}; dp.j = {j, j+4}.
  const RankLayout l6 = layout_of(6, 8, 4);
  CHECK(l6.sp_group == 1);
  CHECK(l6.sp_rank == 2);
  CHECK(l6.dp_group == 2);
  CHECK(l6.dp_rank == 1);
  CHECK(l6.dp_size == 2);
  const RankLayout l1 = layout_of(1, 4, 1);  // pure data parallel: every rank its own SP group
  CHECK(l1.sp_size == 1);
  CHECK(l1.dp_rank == 1);
  CHECK(l1.dp_size == 4);
  CHECK_THROWS_WITH(layout_of(0, 6, 4), Catch::Contains("parallel.world_size = 6") &&
                                            Catch::Contains("multiple of parallel.ulysses_degree = 4"));
  CHECK_THROWS_WITH(layout_of(4, 4, 2), Catch::Contains("rank 4 is outside [0, 4)"));
}

TEST_CASE("rank threads: 4 ranks, Ulysses 2 x data parallel 2, each group sums its own members", "[launch]") {
  MemoryTracker::instance().install_cpu_allocator();
  std::mutex m;
  std::vector<std::vector<double>> seen(4);
  std::vector<int> bound_rank(4, -1);
  run_rank_threads(parallel_config(4, 2), at::kCPU, [&](RankContext& ctx) {
    bound_rank[ctx.rank] = current_rank();  // RankScope set by the launcher
    at::Tensor sp_sum = at::full({1}, static_cast<double>(ctx.rank));
    ctx.sp->all_reduce_sum(sp_sum);
    at::Tensor dp_sum = at::full({1}, static_cast<double>(ctx.rank));
    ctx.dp->all_reduce_sum(dp_sum);
    at::Tensor world_sum = at::full({1}, static_cast<double>(ctx.rank));
    ctx.world->all_reduce_sum(world_sum);
    std::lock_guard<std::mutex> lock(m);
    seen[ctx.rank] = {static_cast<double>(ctx.sp_rank),
                      static_cast<double>(ctx.dp_rank),
                      sp_sum.item<double>(),
                      dp_sum.item<double>(),
                      world_sum.item<double>(),
                      static_cast<double>(ctx.sp->size()),
                      static_cast<double>(ctx.dp->size())};
  });
  // sp.0 = {0,1} sums 1, sp.1 = {2,3} sums 5; dp.0 = {0,2} sums 2, dp.1 = {1,3} sums 4; world 6.
  CHECK(seen[0] == std::vector<double>{0, 0, 1, 2, 6, 2, 2});
  CHECK(seen[1] == std::vector<double>{1, 0, 1, 4, 6, 2, 2});
  CHECK(seen[2] == std::vector<double>{0, 1, 5, 2, 6, 2, 2});
  CHECK(seen[3] == std::vector<double>{1, 1, 5, 4, 6, 2, 2});
  CHECK(bound_rank == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("collective backends: each group names its library, and ranks share GPUs only when they name one twice",
          "[launch]") {
  std::mutex m;
  std::vector<std::string> names;
  run_rank_threads(parallel_config(4, 2), at::kCPU, [&](RankContext& ctx) {
    std::lock_guard<std::mutex> lock(m);
    names.push_back(ctx.world->backend() + " " + ctx.sp->backend() + " " + ctx.dp->backend());
  });
  CHECK(names == std::vector<std::string>(4, "gloo gloo gloo"));  // CPU ranks: Gloo in every group
  CHECK(make_solo_rank_context(at::kCPU).world->backend() == "none");
  CHECK(make_emulated_rank_context(parallel_config(8, 4), at::kCPU).sp->backend() == "emulated");
  // Ranks share a GPU when two of them name the same device (their groups then run on Gloo, as
  // NCCL refuses two ranks on one device); a rank without a GPU names none.
  CHECK_FALSE(any_gpu_shared({"GPU-a", "GPU-b", "GPU-c"}));
  CHECK(any_gpu_shared({"GPU-a", "GPU-b", "GPU-a"}));
  CHECK_FALSE(any_gpu_shared({"", "", ""}));
  CHECK_FALSE(any_gpu_shared({}));

  // Through the job's store, every rank reaches the same answer from what each rank sees: four
  // ranks each shown its own GPU (srun's --gpus-per-task: each sees "GPU 0", distinct devices)
  // do not share; four ranks on two GPUs (LOCAL_RANK mod 2) do, and so does one device for all.
  const std::vector<std::vector<std::string>> layouts = {{"GPU-0a", "GPU-1b", "GPU-2c", "GPU-3d"},
                                                         {"GPU-0a", "GPU-1b", "GPU-0a", "GPU-1b"},
                                                         {"GPU-x", "GPU-x", "GPU-x", "GPU-x"}};
  const std::vector<bool> expected = {false, true, true};
  for (size_t i = 0; i < layouts.size(); ++i) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<int> answers(4, -1);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 4; ++r)
      ranks.emplace_back([&, r] {
        answers[static_cast<size_t>(r)] = ranks_share_gpus(store, r, 4, layouts[i][static_cast<size_t>(r)]) ? 1 : 0;
      });
    for (auto& t : ranks) t.join();
    CAPTURE(i);
    CHECK(answers == std::vector<int>(4, expected[i] ? 1 : 0));
  }
  // the job's first wait of its ranks for one another: ranks that never came are named
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(std::chrono::milliseconds(200));
  CHECK_THROWS_WITH(ranks_share_gpus(store, 0, 3, "GPU-a"),
                    Catch::Contains("rank 0: ranks 1, 2 never reached the collective groups' set-up"));
}

TEST_CASE("comm options: a timeout is whole milliseconds rounded up, never 0 (which c10d reads as none)", "[launch]") {
  // parallel.timeout_s below a millisecond is refused by the schema; the rounding still never
  // makes a positive timeout 0 ms, an endless wait (0.0004 s rounded to nearest gave 0 and hung).
  ParallelConfig parallel;
  for (const auto& [seconds, ms] : std::vector<std::pair<double, int64_t>>{
           {0.0004, 1}, {0.001, 1}, {0.0015, 2}, {1.0, 1000}, {2.0001, 2001}, {300.0, 300000}}) {
    parallel.timeout_s = seconds;
    INFO(seconds << " s");
    CHECK(comm_options(parallel).timeout == std::chrono::milliseconds(ms));
  }
}

TEST_CASE("rank threads: world size 1 runs on a thread with solo groups", "[launch]") {
  int calls = 0;
  run_rank_threads(parallel_config(1, 1), at::kCPU, [&](RankContext& ctx) {
    ++calls;
    at::Tensor t = at::ones({2});
    ctx.world->all_reduce_sum(t);
    if (ctx.world->size() != 1 || t[0].item<double>() != 1.0) throw std::runtime_error("solo group misbehaves");
  });
  CHECK(calls == 1);
}

TEST_CASE("rank threads: a throwing rank aborts the others and is reported with its rank", "[launch]") {
  std::atomic<int> abandoned{0};
  const auto start = std::chrono::steady_clock::now();
  try {
    run_rank_threads(parallel_config(4, 2, /*timeout_s=*/120.0), at::kCPU, [&](RankContext& ctx) {
      if (ctx.rank == 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        throw std::runtime_error("data file truncated");
      }
      at::Tensor t = at::ones({4});
      try {
        ctx.world->all_reduce_sum(t);  // never completes: rank 3 is gone
      } catch (const CommError&) {
        ++abandoned;
        throw;
      }
    });
    FAIL("run_rank_threads returned although rank 3 threw");
  } catch (const RankError& e) {
    CHECK(e.rank() == 3);
    CHECK_THAT(e.what(), Catch::StartsWith("rank 3: data file truncated"));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(abandoned == 3);
  CHECK(seconds < 20.0);  // the 120 s collective timeout was not waited out
}

TEST_CASE("rank threads: a thread that cannot start ends the launch with why, not the process", "[launch]") {
  // std::thread's constructor throws where the address space or thread limit is spent (ulimit -v
  // under a batch system): the exception destroyed the started ranks' joinable threads, which ends
  // the process (std::terminate, SIGABRT), and a started rank would have waited for the missing
  // one in its group's rendezvous. In a child whose address space ends a little past what it maps
  // now, room for no thread stack or for exactly one: rank 0's thread, then rank 1's, cannot start.
  pthread_attr_t attr;
  REQUIRE(::pthread_getattr_default_np(&attr) == 0);
  size_t stack = 0, guard = 0;
  ::pthread_attr_getstacksize(&attr, &stack);
  ::pthread_attr_getguardsize(&attr, &guard);
  ::pthread_attr_destroy(&attr);
  REQUIRE(stack > 0);
  const rlim_t room_for_one = static_cast<rlim_t>(stack + guard) + (rlim_t{1} << 20);
  for (const auto& [room, rank] : std::vector<std::pair<rlim_t, int>>{{rlim_t{1} << 20, 0}, {room_for_one, 1}}) {
    INFO("room " << room << " bytes past the mappings, the thread of rank " << rank << " cannot start");
    const std::string text = odyssey::test::text_from_child([room = room]() -> std::string {
      // glibc keeps the stacks of joined threads (the earlier tests') and starts new threads on
      // them without mapping: threads parked here hold every cached stack while the limit holds.
      std::mutex park_mutex;
      std::condition_variable park_cv;
      bool unpark = false;
      std::vector<std::thread> parked;
      for (int i = 0; i < 64; ++i)
        parked.emplace_back([&] {
          std::unique_lock<std::mutex> lock(park_mutex);
          park_cv.wait(lock, [&] { return unpark; });
        });
      std::string said = "(started)";
      said.reserve(4096);  // no allocation of its own once the limit holds
      if (odyssey::test::limit_address_space_growth(room)) {
        try {
          run_rank_threads(parallel_config(2, 2, 30.0), at::kCPU, [](RankContext&) {});
        } catch (const std::exception& e) {
          said = e.what();
        }
      }
      {
        std::lock_guard<std::mutex> lock(park_mutex);
        unpark = true;
      }
      park_cv.notify_all();
      for (std::thread& t : parked) t.join();
      return said;
    });
    INFO(text);
    REQUIRE(text != "(crash)");  // not a signal
    CHECK_THAT(text, Catch::Contains("cannot start the thread of rank " + std::to_string(rank) + " of 2") &&
                         Catch::Contains("ulimit"));
  }
}

TEST_CASE("rank threads: a rank's failed step keeps its type and names the rank", "[launch]") {
  // run_on_ranks rethrows the first failing rank's own exception (its exit class), not the
  // launcher's "rank R:" text: the step's failure names the rank itself. Rank 1 alone runs out of
  // its tracked memory in step 2; rank 0's collective is abandoned after it.
  struct ResetLimit {
    ~ResetLimit() { MemoryTracker::instance().set_device_limit(1, 0); }  // slot 1's, whatever happens
  } reset;
  RunConfig cfg = odyssey::test::tiny_config();
  cfg.parallel.world_size = 2;
  cfg.parallel.fsdp = true;
  try {
    run_on_ranks(cfg, "odyssey train PRESET", [&](RankContext& ctx) {
      Trainer trainer(cfg, ctx);
      trainer.step();
      MemoryTracker& tracker = MemoryTracker::instance();
      if (ctx.rank == 1) tracker.set_device_limit(ctx.slot, tracker.device_bytes(ctx.slot) + 1);
      trainer.step();
    });
    FAIL("the step should have run out of memory on rank 1");
  } catch (const StepFailure& e) {
    INFO(e.what());
    CHECK(e.kind == StepFailure::Kind::OutOfMemory);
    CHECK(e.step == 2);
    CHECK_THAT(e.what(), Catch::StartsWith("out of memory at step 2 in phase ") && Catch::Contains(" on rank 1"));
  }
}

TEST_CASE("rank threads: a rank that hangs yields a timeout naming rank, group and collective", "[launch]") {
  // Rank 1 hangs (keeps its groups open, so rank 0 cannot see a closed connection instead) until
  // rank 0 has failed, or 30 s at most should rank 0 never fail.
  std::atomic<bool> rank0_failed{false};
  try {
    run_rank_threads(parallel_config(2, 2, /*timeout_s=*/1.0), at::kCPU, [&](RankContext& ctx) {
      at::Tensor out = at::empty({2, 3}), in = at::ones({2, 3});
      if (ctx.rank == 1) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!rank0_failed && std::chrono::steady_clock::now() < give_up)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return;
      }
      try {
        ctx.sp->all_to_all(out, in);
      } catch (...) {
        rank0_failed = true;
        throw;
      }
    });
    FAIL("no error although rank 1 never joined the all_to_all");
  } catch (const RankError& e) {
    CHECK(e.rank() == 0);
    CHECK_THAT(e.what(), Catch::Contains("rank 0 (global rank 0) in group sp.0 of 2: all_to_all timed out after 1 s"));
  }
}

TEST_CASE("emulated rank context: rank 0 of the real sizes with stand-in groups", "[launch]") {
  const RankContext ctx = make_emulated_rank_context(parallel_config(8, 4), at::kCPU);
  CHECK(ctx.emulated);
  CHECK(ctx.rank == 0);
  CHECK(ctx.world_size == 8);
  CHECK(ctx.sp_size == 4);
  CHECK(ctx.dp_size == 2);
  CHECK(ctx.world->size() == 8);
  CHECK(ctx.sp->size() == 4);
  CHECK(ctx.sp->emulated());
  at::Tensor shard = at::ones({3}), full = at::empty({24});
  ctx.world->all_gather(full, shard);  // exact shape of the real gather
  CHECK(full.sum().item<double>() == 24.0);
}

TEST_CASE("torchrun environment: parsed, validated, absent", "[launch]") {
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK_FALSE(torchrun_env().has_value());
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29555", 1);
  const auto env = torchrun_env();
  REQUIRE(env.has_value());
  CHECK(env->rank == 1);
  CHECK(env->world_size == 2);
  CHECK(env->local_rank == 1);
  CHECK(env->master_port == 29555);
  ::setenv("MASTER_PORT", "port", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("MASTER_PORT=port must be a whole number from 1 to 1048576"));
  ::setenv("MASTER_PORT", "29555", 1);
  // the bound the message names is the one refused; signs and spaces are not numbers here
  ::setenv("WORLD_SIZE", "2000000", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("WORLD_SIZE=2000000 must be a whole number from 1 to 1048576"));
  ::setenv("WORLD_SIZE", " 2", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("WORLD_SIZE= 2 must be a whole number"));
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "+1", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("RANK=+1 must be a whole number"));
  ::setenv("RANK", "1", 1);
  ::setenv("MASTER_ADDR", "", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("MASTER_ADDR is set but empty"));
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("RANK", "2", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("RANK=2 must be below WORLD_SIZE=2"));
  ::unsetenv("WORLD_SIZE");
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("WORLD_SIZE is unset while RANK is set"));
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "1", 1);
  // a launcher that sets RANK and WORLD_SIZE alone: each process would take the node's first GPU
  ::unsetenv("LOCAL_RANK");
  CHECK_THROWS_WITH(torchrun_env(),
                    Catch::Contains("LOCAL_RANK is unset while WORLD_SIZE=2") && Catch::Contains("SLURM_LOCALID"));
  ::setenv("WORLD_SIZE", "1", 1);  // one process: its GPU is the first
  ::setenv("RANK", "0", 1);
  CHECK(torchrun_env()->local_rank == 0);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "1", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  CHECK_FALSE(torchrun_env()->use_agent_store);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "3", 1);
  CHECK(torchrun_env()->use_agent_store);
  CHECK(torchrun_env()->restart_count == 3);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "yes", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("TORCHELASTIC_USE_AGENT_STORE=yes must be True or False"));
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  // LOCAL_WORLD_SIZE: the node's ranks (more than its GPUs: they share them over Gloo)
  CHECK(torchrun_env()->local_world_size == 1);
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  CHECK(torchrun_env()->local_world_size == 4);
  ::setenv("LOCAL_WORLD_SIZE", "1", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("LOCAL_RANK=1 must be below LOCAL_WORLD_SIZE=1"));
  ::setenv("LOCAL_WORLD_SIZE", "four", 1);
  CHECK_THROWS_WITH(torchrun_env(), Catch::Contains("LOCAL_WORLD_SIZE=four must be a whole number"));
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"})
    ::unsetenv(v);
  CHECK_THROWS_WITH(join_torchrun({0, 2, 0, "127.0.0.1", 29555}, parallel_config(4, 2), at::kCPU),
                    Catch::Contains("WORLD_SIZE=2 must equal parallel.world_size = 4"));
  // an emulated rank 0 runs in one process of its own: under torchrun it would be a real rank
  ParallelConfig emulated = parallel_config(2, 2);
  emulated.emulate = true;
  CHECK_THROWS_WITH(join_torchrun({0, 2, 0, "127.0.0.1", 29555}, emulated, at::kCPU),
                    Catch::Contains("parallel.emulate = true runs rank 0 of the job alone") &&
                        Catch::Contains("RANK=0, WORLD_SIZE=2"));
  // an interface Gloo could not find is named with its variable, before any store is joined
  ::setenv("GLOO_SOCKET_IFNAME", "no_such_if0", 1);
  CHECK_THROWS_WITH(join_torchrun({0, 2, 0, "127.0.0.1", 29555}, parallel_config(2, 2), at::kCPU),
                    Catch::Contains("GLOO_SOCKET_IFNAME=no_such_if0 is no network interface of this host"));
  ::unsetenv("GLOO_SOCKET_IFNAME");
}

TEST_CASE("free_port: below the kernel's ephemeral range, free, a fresh one each call", "[launch]") {
  // The torchrun tests' MASTER_PORT: below the range no port-0 bind of a test running beside this
  // one can take it before the child binds it. Linux's default range starts at 32768; a range that
  // leaves fewer ports below it gets the kernel's pick, inside the range.
  int ephemeral_low = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  REQUIRE(ephemeral_low > 0);
  const bool room_below = ephemeral_low - odyssey::test::kLowestTestPort >= odyssey::test::kNeededPortRoom;
  std::set<int> seen;
  for (int i = 0; i < 8; ++i) {
    const int port = free_port();
    INFO("port " << port << ", ephemeral range from " << ephemeral_low);
    CHECK((room_below ? port >= odyssey::test::kLowestTestPort && port < ephemeral_low : port >= ephemeral_low));
    CHECK((seen.insert(port).second || !room_below));  // the kernel's picks may repeat
  }
}

TEST_CASE("torchrun join: two ranks meet through a TCPStore on loopback and run collectives", "[launch]") {
  const int port = free_port();
  std::vector<double> sums(2, 0.0);
  const auto errors = run_two_rank_threads([&](int r) {
    RankContext ctx = join_torchrun({r, 2, r, "127.0.0.1", port}, parallel_config(2, 2, 30.0), at::kCPU);
    at::Tensor t = at::full({4}, static_cast<double>(r + 1));
    ctx.world->all_reduce_sum(t);
    at::Tensor out = at::empty({2, 2}), in = at::full({2, 2}, static_cast<double>(r));
    ctx.sp->all_to_all(out, in);
    sums[r] = t[0].item<double>() + out.sum().item<double>();
  });
  INFO(errors[0] << " | " << errors[1]);
  CHECK(sums == std::vector<double>{3.0 + 2.0, 3.0 + 2.0});  // a2a: rows from rank 0 (zeros) and rank 1 (ones)
}

TEST_CASE("torchrun join: with torchrun's agent store every rank is a client under the attempt's prefix", "[launch]") {
  // What torchrun does by default: its elastic agent serves the store at MASTER_PORT before the
  // workers start (TORCHELASTIC_USE_AGENT_STORE=True), so rank 0 must not try to serve it too.
  const int port = free_port();
  auto agent = test::serve_agent_store(port);
  agent->set("/worker/attempt_0/stale", std::vector<uint8_t>{1});  // a previous attempt's keys
  std::vector<double> sums(2, 0.0);
  const auto errors = run_two_rank_threads([&](int r) {
    TorchrunEnv env{r, 2, r, "127.0.0.1", port};
    env.use_agent_store = true;
    env.restart_count = 1;
    TorchrunRank joined = join_torchrun_rank(env, parallel_config(2, 2, 30.0), at::kCPU);
    joined.store->set("probe." + std::to_string(r), std::vector<uint8_t>{static_cast<uint8_t>(r)});
    at::Tensor t = at::full({4}, static_cast<double>(r + 1));
    joined.ctx.world->all_reduce_sum(t);
    sums[r] = t[0].item<double>();
  });
  INFO(errors[0] << " | " << errors[1]);
  CHECK(sums == std::vector<double>{3.0, 3.0});
  CHECK(agent->check({"/worker/attempt_1/probe.0", "/worker/attempt_1/probe.1"}));
}

TEST_CASE("torchrun: a store gone before the peer watch starts is a CommError naming it, not c10d's socket error",
          "[launch]") {
  // Rank 0's process serves the store; killed between the groups' set-up and another process's
  // peer watch, that process ended with c10d's raw "client socket has timed out ... Exception
  // raised from throwTimeoutError at ..." after its timeout.
  const int port = free_port();
  c10::intrusive_ptr<c10d::Store> client;
  {
    auto server = test::serve_agent_store(port);
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(port);
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = std::chrono::milliseconds(1000);  // the reconnect's wait
    client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  }  // the server is gone
  const std::string address = "127.0.0.1:" + std::to_string(port);
  try {
    start_peer_watch(client, 1, 2, std::make_shared<AbortSignal>(), address, std::chrono::milliseconds(10000));
    FAIL("the peer watch started without its store");
  } catch (const CommError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("torchrun job: rank 1 cannot watch its peers through the job's store at " +
                                           address + ": its server (rank 0's process, or torchrun's agent) ended") &&
                             !Catch::Contains("Exception raised from"));
  }
}

TEST_CASE("torchrun start: a refusal one process sees ends every process at once with its reason and class",
          "[launch]") {
  // Rank 0's process alone checks and locks --out; another node may lack a file. The processes
  // agree before any starts: the refusing one rethrows its own error (agree) or has caught it
  // already (refuse, as odyssey eval does), the others throw RankRefused naming its rank, reason
  // and exit class, each well inside the 60 s timeout (before, the others waited for the refusing
  // process until the timeout, twice over).
  const auto timeout = std::chrono::milliseconds(60000);
  for (bool caught_first : {false, true})
    for (int refusing : {0, 1}) {
      INFO("refusing rank " << refusing << (caught_first ? ", through refuse" : ", through agree"));
      const int port = free_port();
      std::vector<int> refused_rank(2, -1);
      std::vector<bool> bad_input(2, false);
      const auto t0 = std::chrono::steady_clock::now();
      const auto errors = run_two_rank_threads([&](int r) {
        JobStart start(TorchrunEnv{r, 2, r, "127.0.0.1", port}, timeout);
        start.agree(nullptr, false);  // a first round all pass
        if (r == refusing && caught_first) {
          start.refuse("--data D is missing", true);
          throw std::invalid_argument("--data D is missing");
        }
        std::exception_ptr own;
        if (r == refusing) own = std::make_exception_ptr(std::invalid_argument("--data D is missing"));
        try {
          start.agree(own, r == refusing);
        } catch (const RankRefused& e) {
          refused_rank[r] = e.rank;
          bad_input[r] = e.bad_input;
          throw;
        }
        // The refusing rank's JobStart (rank 0's serves the store) goes away as its process would.
      });
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
      const int other = 1 - refusing;
      CHECK(errors[refusing] == "--data D is missing");  // its own error, rethrown as it was
      CHECK(errors[other] == "rank " + std::to_string(refusing) + " refused to start: --data D is missing");
      CHECK(refused_rank[other] == refusing);
      CHECK(bad_input[other]);  // exit 2, as the refusing process classed it
      CHECK(refused_rank[refusing] == -1);
    }
}

TEST_CASE("torchrun start: a second process with a RANK already taken is refused alone, and the job goes on",
          "[launch]") {
  // Three processes of a world of 2, two of them started with RANK=1: without the claim both
  // posted rank 1's verdict, the agreement passed and both joined rank 1's collectives. Now the
  // later of the two (whichever that is) refuses at once with the rank named and posts nothing;
  // rank 0 and the first rank 1 agree twice, as a job's start does.
  const int port = free_port();
  const auto timeout = std::chrono::milliseconds(60000);
  const int ranks[] = {0, 1, 1};
  std::atomic<int> agreed{0}, rank_one_done{0};
  const auto errors = run_process_threads(3, [&](int i) {
    struct Done {  // counts a rank-1 process out however it ends
      std::atomic<int>* count;
      ~Done() {
        if (count) ++*count;
      }
    } done{ranks[i] == 1 ? &rank_one_done : nullptr};
    JobStart start(TorchrunEnv{ranks[i], 2, ranks[i], "127.0.0.1", port}, timeout);
    start.agree(nullptr, false);
    start.agree(nullptr, false);
    ++agreed;
    // Rank 0's process serves the store: it stays until both rank-1 processes have ended.
    for (int waited = 0; ranks[i] == 0 && rank_one_done < 2 && waited < 600; ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  });
  INFO(errors[0] << " | " << errors[1] << " | " << errors[2]);
  CHECK(errors[0].empty());
  CHECK(agreed == 2);
  CHECK(errors[1].empty() != errors[2].empty());  // exactly one of the two rank-1 processes refused
  CHECK_THAT(errors[1] + errors[2], Catch::Contains("RANK=1: another process of this torchrun job") &&
                                        Catch::Contains("127.0.0.1:" + std::to_string(port)));
}

TEST_CASE("torchrun join: a second RANK=0 that cannot serve the store is refused as the launch's mistake", "[launch]") {
  // It failed like a wait that ran out (exit 1, "one has not started"); the port is held by the
  // first RANK=0, which serves the store and waits for the job's processes.
  const int port = free_port();
  std::string first_error;
  std::thread first([&] {
    try {
      connect_job_store(TorchrunEnv{0, 2, 0, "127.0.0.1", port}, std::chrono::milliseconds(4000));
    } catch (const std::exception& e) {
      first_error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // it holds the port by now
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_MATCHES(
      connect_job_store(TorchrunEnv{0, 2, 0, "127.0.0.1", port}, std::chrono::milliseconds(4000)),
      std::invalid_argument,
      Catch::Message("torchrun job: rank 0 cannot serve the job's store at 127.0.0.1:" + std::to_string(port) +
                     ": another process already serves one on that port (a second process started "
                     "with RANK=0, or another job on MASTER_PORT=" +
                     std::to_string(port) + "); each process needs its own RANK, each job its own MASTER_PORT"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));  // at once, not after the wait
  first.join();
  CHECK_THAT(first_error, Catch::Contains("one has not started"));  // the first waited for rank 1 in vain
}

TEST_CASE("torchrun start: a process that never says whether it can start is named when the wait ends", "[launch]") {
  // torchrun's agent serves the store, so rank 0 joins it at once; rank 1 never comes (it ended
  // before its first agreement point, or is stuck).
  const int port = free_port();
  auto agent = test::serve_agent_store(port);
  TorchrunEnv env{0, 2, 0, "127.0.0.1", port};
  env.use_agent_store = true;
  JobStart start(env, std::chrono::milliseconds(1000));
  CHECK_THROWS_WITH(start.agree(nullptr, false),
                    Catch::Contains("torchrun job: rank 0 waited 1 s (parallel.timeout_s) for rank 1 to say "
                                    "whether it can start"));
  CHECK(agent->check({"/worker/attempt_0/odyssey/start/0/0"}));  // its own verdict, posted
}
