// The watchdog of a GPU process group's collectives. The rank's thread never waits on a
// collective from the host: it makes the compute stream wait (work->wait() for NCCL) and goes on
// queueing work, and this thread watches every issued collective until it completes. One past
// parallel.timeout_s, a failed one, or the job's abort signal (another rank failed) poisons the
// group and aborts its communicator (freeing GPU work stuck in the collective); the rank learns
// it at its next collective or step boundary, with the operation, the group and the reason.
// A collective's deadline runs from when it can run: the GPU work queued before it done (its
// `runnable` probe, an event recorded behind that work) and the group's earlier collectives
// complete. The host queues work far ahead of the GPU (a whole forward or backward: over an hour
// for the 8B at 5M), so a deadline from the issue would fail healthy collectives.
// defines: CollectiveWatchdog
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "engine/parallel/abort_signal.h"

namespace c10d {
class Work;
}

namespace odyssey {

/// "1.5 s": a collective's timeout as its failure messages print it.
std::string seconds_text(std::chrono::milliseconds ms);
/// The first line of a (possibly multi-line, backtrace-laden) c10 error message.
std::string first_line(const std::string& text);

/// Usage: CollectiveWatchdog dog(timeout, abort, [&] { backend->abort(); });
///        work->wait(); dog.watch("all_gather", work);   // host goes on
///        if (auto why = dog.failure()) throw CommError(where + *why);
/// Thread-safe. The polling thread starts with the first watch() and stops with the watchdog.
class CollectiveWatchdog {
 public:
  /// `abort_group` runs once, on the watchdog's thread, when it gives up on a collective.
  /// `device`: the rank's GPU, made the polling thread's current device before its first query
  /// (a thread starts on device 0, and a CUDA event query there would open a context on GPU 0 in
  /// every rank's process: on an 8-GPU node 7 contexts, about 0.5 GiB each, no plan holds).
  CollectiveWatchdog(std::chrono::milliseconds timeout, std::shared_ptr<AbortSignal> abort,
                     std::function<void()> abort_group, std::chrono::microseconds poll = std::chrono::microseconds(500),
                     std::optional<c10::Device> device = std::nullopt);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  /// True once the GPU work queued before a collective is done (a CUDA event's query); throws on
  /// a device error.
  using Runnable = std::function<bool()>;
  /// Watches `work` (issued as `op`) until it completes or its deadline passes. The deadline is
  /// the timeout from the moment the watchdog sees it can run: `runnable` true while every
  /// collective watched before it has completed; without a probe, from now.
  void watch(const char* op, c10::intrusive_ptr<c10d::Work> work, Runnable runnable = nullptr);
  /// Why the group failed ("all_gather timed out after 300 s (...)", "abandoned: rank 3 failed:
  /// ...", "all_to_all failed: ..."), or nullopt while none has.
  std::optional<std::string> failure() const;
  /// Collectives issued and not yet seen complete.
  size_t pending() const;
  /// Blocks until every watched collective completed or the group failed (end of a step, tests).
  void drain();

 private:
  struct Watched {
    std::string op;
    c10::intrusive_ptr<c10d::Work> work;
    Runnable runnable;                                              ///< empty: runnable from the watch
    std::optional<std::chrono::steady_clock::time_point> deadline;  ///< set once it can run
  };
  void loop();
  void fail_locked(std::string why);

  std::chrono::milliseconds timeout_;
  std::shared_ptr<AbortSignal> abort_;
  std::function<void()> abort_group_;
  std::chrono::microseconds poll_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Watched> watched_;
  std::optional<std::string> failure_;
  bool stop_ = false;
  bool group_aborted_ = false;
  std::optional<c10::Device> device_;  ///< the polling thread's current device (the rank's GPU)
  std::thread thread_;
};

}  // namespace odyssey
