// CollectiveWatchdog: one polling thread per GPU group, started lazily (see collective_watchdog.h).
// defines: CollectiveWatchdog members
#include "engine/parallel/collective_watchdog.h"

#include <cstdio>

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace odyssey {

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

std::string first_line(const std::string& text) {
  const auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

CollectiveWatchdog::CollectiveWatchdog(std::chrono::milliseconds timeout, std::shared_ptr<AbortSignal> abort,
                                       std::function<void()> abort_group, std::chrono::microseconds poll,
                                       std::optional<c10::Device> device)
    : timeout_(timeout), abort_(std::move(abort)), abort_group_(std::move(abort_group)), poll_(poll), device_(device) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::watch(const char* op, c10::intrusive_ptr<c10d::Work> work, Runnable runnable) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (!runnable) deadline = std::chrono::steady_clock::now() + timeout_;
  watched_.push_back({op, std::move(work), std::move(runnable), deadline});
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  cv_.notify_all();
}

std::optional<std::string> CollectiveWatchdog::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

size_t CollectiveWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return watched_.size();
}

void CollectiveWatchdog::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return watched_.empty() || failure_.has_value() || stop_; });
}

void CollectiveWatchdog::fail_locked(std::string why) {
  if (failure_) return;
  failure_ = std::move(why);
  watched_.clear();
}

void CollectiveWatchdog::loop() {
  // isCompleted() queries a CUDA event on the current device of this thread: the rank's GPU, not
  // device 0, where the query would open a context of this process
  const c10::OptionalDeviceGuard on_rank_device(device_);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait_for(lock, poll_, [&] { return stop_; });
    if (stop_) return;
    if (!failure_ && abort_ && abort_->raised())
      fail_locked("abandoned: rank " + std::to_string(abort_->rank()) + " failed: " + first_line(abort_->reason()));
    // Collectives of one group complete in issue order: look at the oldest. It can run once its
    // probe says the work queued before it is done (the earlier ones of the group are): its
    // deadline starts then.
    while (!failure_ && !watched_.empty()) {
      Watched& w = watched_.front();
      bool done = false;
      try {
        done = w.work->isCompleted();
        if (done)
          if (std::exception_ptr error = w.work->exception()) std::rethrow_exception(error);
        if (!done && !w.deadline && w.runnable()) w.deadline = std::chrono::steady_clock::now() + timeout_;
      } catch (const std::exception& e) {
        fail_locked(w.op + " failed: " + first_line(e.what()));
        break;
      }
      if (done) {
        watched_.pop_front();
        continue;
      }
      if (w.deadline && std::chrono::steady_clock::now() >= *w.deadline)
        fail_locked(w.op + " timed out after " + seconds_text(timeout_) +
                    " (a member of the group never joined this collective: it died, hung, or issued a "
                    "different sequence of collectives)");
      break;
    }
    if (failure_ && !group_aborted_) {
      group_aborted_ = true;
      // GPU work stuck in the collective is freed by aborting the communicator; the rank's thread
      // finds the failure at its next collective.
      if (abort_group_) {
        lock.unlock();
        try {
          abort_group_();
        } catch (...) {
        }
        lock.lock();
      }
    }
    if (watched_.empty() || failure_) cv_.notify_all();
  }
}

}  // namespace odyssey
