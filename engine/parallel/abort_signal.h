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
  void raise(int rank, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (raised_.load()) return;
    rank_ = rank;
    reason_ = reason;
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

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> raised_{false};
  int rank_ = -1;
  std::string reason_;
};

}  // namespace odyssey
