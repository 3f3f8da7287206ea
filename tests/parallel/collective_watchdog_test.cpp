// The GPU group's collectives without a GPU: a BackendComm in its CUDA mode over a fake c10d
// backend whose works complete when the test says so. The host never waits for a collective; the
// watchdog sees each one complete, gives up on one past the timeout, on one that failed, and on
// the job's abort signal, aborts the communicator once, and the next collective names the failure.
// defines: test cases [watchdog]
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "engine/parallel/collective_watchdog.h"
#include "engine/parallel/process_group_comm.h"

using namespace odyssey;
using namespace std::chrono_literals;

namespace {

/// A collective that completes (or fails) when the test says so.
class FakeWork : public c10d::Work {
 public:
  bool isCompleted() override { return done_.load(); }
  std::exception_ptr exception() const override { return error_; }
  bool wait(std::chrono::milliseconds) override {
    ++stream_waits;  // NCCL: the current stream waits on the end event; the host does not
    return true;
  }
  void complete() { done_.store(true); }
  void fail(const std::string& why) {
    error_ = std::make_exception_ptr(std::runtime_error(why));
    done_.store(true);
  }
  std::atomic<int> stream_waits{0};

 private:
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
};

/// A backend whose all-gathers and all-reduces return the FakeWork the test queued.
class FakeBackend : public c10d::Backend {
 public:
  FakeBackend() : c10d::Backend(0, 2) {}
  const std::string getBackendName() const override { return "fake"; }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor&, at::Tensor&, const c10d::AllgatherOptions&) override {
    return next();
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) override {
    return next();
  }
  void abort() override { ++aborts; }
  c10::intrusive_ptr<FakeWork> queue() {
    auto w = c10::make_intrusive<FakeWork>();
    works.push_back(w);
    return w;
  }
  std::vector<c10::intrusive_ptr<FakeWork>> works;
  size_t issued = 0;
  std::atomic<int> aborts{0};

 private:
  c10::intrusive_ptr<c10d::Work> next() { return works.at(issued++); }
};

GroupSpec spec(std::chrono::milliseconds timeout) {
  GroupSpec s;
  s.name = "world";
  s.instance = "world";
  s.rank = 0;
  s.size = 2;
  s.timeout = timeout;
  return s;
}

bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return cond();
}

}  // namespace

TEST_CASE("gpu group: the host issues collectives without waiting, the watchdog sees them complete",
          "[parallel][watchdog]") {
  auto backend = c10::make_intrusive<FakeBackend>();
  auto w1 = backend->queue(), w2 = backend->queue();
  BackendComm comm(backend, spec(60000ms), nullptr, /*cuda=*/true);
  at::Tensor in = at::ones({4}), out = at::empty({8});
  comm.all_gather(out, in);  // returns although w1 is not complete
  CHECK(w1->stream_waits == 1);
  CHECK(comm.pending_collectives() == 1);
  comm.all_reduce_sum(in);
  CHECK(comm.pending_collectives() == 2);
  w1->complete();
  w2->complete();
  comm.drain();
  CHECK(comm.pending_collectives() == 0);
  CHECK(backend->aborts == 0);
  CHECK_FALSE(comm.poisoned());
}

TEST_CASE("gpu group: a collective past the timeout aborts the communicator and the next one names it",
          "[parallel][watchdog]") {
  auto backend = c10::make_intrusive<FakeBackend>();
  backend->queue();  // never completes: a peer that died or hung
  backend->queue();
  BackendComm comm(backend, spec(300ms), nullptr, /*cuda=*/true);
  at::Tensor in = at::ones({4}), out = at::empty({8});
  const auto t0 = std::chrono::steady_clock::now();
  // The host does not wait for it (the case above checks it pending under a 60 s timeout; here a
  // loaded host may stall this thread past the 0.3 s deadline before a pending count is read).
  comm.all_gather(out, in);
  REQUIRE(eventually([&] { return backend->aborts.load() == 1; }));
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);  // not before its deadline
  CHECK_THROWS_WITH(comm.all_reduce_sum(in), Catch::Contains("rank 0 (global rank 0) in group world of 2: all_gather "
                                                             "timed out after 0.3 s") &&
                                                 Catch::Contains("found at all_reduce_sum"));
  CHECK(comm.poisoned());
  CHECK_THROWS_WITH(comm.all_reduce_sum(in), Catch::Contains("all_gather timed out"));
  CHECK(backend->aborts == 1);  // once
}

TEST_CASE("gpu group: a collective that failed, and another rank's failure, end the group", "[parallel][watchdog]") {
  {
    auto backend = c10::make_intrusive<FakeBackend>();
    auto w = backend->queue();
    backend->queue();
    BackendComm comm(backend, spec(60000ms), nullptr, /*cuda=*/true);
    at::Tensor in = at::ones({4}), out = at::empty({8});
    comm.all_gather(out, in);
    w->fail("NCCL error: unhandled system error");
    REQUIRE(eventually([&] { return backend->aborts.load() == 1; }));
    CHECK_THROWS_WITH(comm.all_reduce_sum(in),
                      Catch::Contains("all_gather failed: NCCL error: unhandled system error"));
  }
  {
    auto backend = c10::make_intrusive<FakeBackend>();
    backend->queue();
    auto abort = std::make_shared<AbortSignal>();
    BackendComm comm(backend, spec(60000ms), abort, /*cuda=*/true);
    at::Tensor in = at::ones({4});
    comm.all_reduce_sum(in);
    abort->raise(3, "out of memory at step 7\nbacktrace...");
    REQUIRE(eventually([&] { return backend->aborts.load() == 1; }));
    CHECK_THROWS_WITH(comm.all_reduce_sum(in), Catch::Contains("abandoned: rank 3 failed: out of memory at step 7") &&
                                                   !Catch::Contains("backtrace"));
  }
}

TEST_CASE("collective watchdog: drain waits for the pending ones and returns at a failure", "[parallel][watchdog]") {
  std::atomic<int> aborts{0};
  CollectiveWatchdog dog(30ms, nullptr, [&] { ++aborts; });
  auto done = c10::make_intrusive<FakeWork>(), stuck = c10::make_intrusive<FakeWork>();
  done->complete();
  dog.watch("all_to_all", done);
  dog.watch("all_to_all", stuck);
  dog.drain();  // returns at the timeout of the stuck one
  REQUIRE(dog.failure().has_value());
  CHECK(*dog.failure() ==
        "all_to_all timed out after 0.03 s (a member of the group never joined this collective: it died, "
        "hung, or issued a different sequence of collectives)");
  CHECK(aborts == 1);
  CHECK(dog.pending() == 0);
}

TEST_CASE("collective watchdog: a deadline runs from when the collective can run, not from its issue",
          "[parallel][watchdog]") {
  // The host queues collectives far ahead of the GPU: one whose preceding GPU work is still
  // running (its probe false) is not late however long it waits; once it can run, it has the
  // whole timeout. A later collective of the group can run only after the earlier completed, so
  // its clock starts then, though its own probe was true all along. (Only lower bounds on times:
  // a loaded host may run this thread late, never the watchdog early.)
  std::atomic<int> aborts{0};
  std::atomic<bool> first_ready{false};
  CollectiveWatchdog dog(
      400ms, nullptr, [&] { ++aborts; }, std::chrono::microseconds(500));
  auto first = c10::make_intrusive<FakeWork>(), second = c10::make_intrusive<FakeWork>();
  dog.watch("all_gather", first, [&] { return first_ready.load(); });
  dog.watch("reduce_scatter_sum", second, [] { return true; });
  std::this_thread::sleep_for(1200ms);  // three timeouts queued behind GPU work: not a failure
  CHECK_FALSE(dog.failure().has_value());
  CHECK(dog.pending() == 2);
  const auto first_done = std::chrono::steady_clock::now();
  first_ready = true;
  first->complete();  // the GPU reached the gather, which completed
  REQUIRE(eventually([&] { return dog.failure().has_value(); }));
  CHECK(std::chrono::steady_clock::now() - first_done >= 400ms);  // the second's whole timeout
  CHECK_THAT(*dog.failure(), Catch::StartsWith("reduce_scatter_sum timed out after 0.4 s"));
  CHECK(aborts == 1);
}

TEST_CASE("collective watchdog: a probe that fails (a device error) fails the group", "[parallel][watchdog]") {
  std::atomic<int> aborts{0};
  CollectiveWatchdog dog(60000ms, nullptr, [&] { ++aborts; });
  dog.watch("all_to_all", c10::make_intrusive<FakeWork>(),
            []() -> bool { throw std::runtime_error("CUDA error: an illegal memory access was encountered"); });
  REQUIRE(eventually([&] { return dog.failure().has_value(); }));
  CHECK(*dog.failure() == "all_to_all failed: CUDA error: an illegal memory access was encountered");
  CHECK(aborts == 1);
}
