// A bound on every call into a torchrun job's TCPStore. c10d bounds its waits, but not a reply its
// server never sends (rank 0's process stopped or hung, or another program on the port), where a
// client waits in recv() forever: with rank 0 stopped the other ranks hung past any timeout.
// defines: StoreDeadline, store_deadline_for
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace odyssey {

/// How long a call into the job's store may take: the job's patience (parallel.timeout_s, which
/// bounds every wait of the job) and 10 s for the reply to come back on a loaded host.
std::chrono::milliseconds store_deadline_for(std::chrono::milliseconds timeout);

/// Watches one call into the job's store, from construction to destruction: one that is not done
/// by `deadline` ends the process (exit 1) with a line naming the call, the store and rank 0's
/// process, which serves it. Without the store's host the job cannot go on, and a process of
/// another rank holds none of the run's outputs (rank 0's process writes them); rank 0's own calls
/// reach a server in its own process. Cheap: one lock to register, a watcher thread per process.
///   { StoreDeadline d(deadline, "a heartbeat", "127.0.0.1:29500"); store->add(key, 1); }
class StoreDeadline {
 public:
  StoreDeadline(std::chrono::milliseconds deadline, std::string what, std::string store_address);
  ~StoreDeadline();
  StoreDeadline(const StoreDeadline&) = delete;
  StoreDeadline& operator=(const StoreDeadline&) = delete;

 private:
  uint64_t id_ = 0;
};

}  // namespace odyssey
