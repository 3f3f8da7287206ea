// The shared "stop" flag of the ranks of one job in one process: the first rank that fails raises
// it, every other rank's collectives notice it while waiting and give up at once (no hang).
// defines: AbortSignal
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace odyssey {

/// Raised once by the first failing rank thread (first writer wins); read by every BackendComm
/// wait loop. Thread-safe.
class AbortSignal {
 public:
  /// Marks the job failed because of `rank`; later calls keep the first rank and reason.
  /// `bad_input`: that rank failed on bad input (its exit class, 2, is the job's).
  void raise(int rank, const std::string& reason, bool bad_input = false) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (raised_.load()) return;
    rank_ = rank;
    reason_ = reason;
    bad_input_ = bad_input;
    raised_.store(true);
  }
  bool raised() const { return raised_.load(std::memory_order_relaxed); }
  int rank() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return rank_;
  }
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return reason_;
  }
  bool bad_input() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bad_input_;
  }

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> raised_{false};
  int rank_ = -1;
  std::string reason_;
  bool bad_input_ = false;
};

}  // namespace odyssey
