// The other processes of a torchrun job, watched through the job's TCPStore: every process beats a
// counter, a process that fails declares why (first declaration wins, and ends the other
// processes' pending collectives at once), and after a collective failed `diagnose` names the
// rank that caused it (declared, silent, or the store's host gone). defines: PeerWatch,
// start_peer_watch
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <c10/util/intrusive_ptr.h>

#include "engine/parallel/abort_signal.h"

namespace c10d {
class Store;
}

namespace odyssey {

/// One per torchrun process (world size > 1), alive while its rank trains. Store keys:
/// "odyssey/beat/<r>" (a counter, bumped every kBeat) and "odyssey/failure" ("<rank>\n<input|run>\n<reason>").
///   PeerWatch watch(store, rank, world, abort, "127.0.0.1:29500", store_deadline_for(timeout));
///   try { train(); } catch (const CommError& e) { throw CommError(e.what() + watch.diagnose().text); }
class PeerWatch {
 public:
  static constexpr std::chrono::milliseconds kBeat{100};
  /// A process that beat not once in this window is taken for dead (or stopped).
  static constexpr std::chrono::milliseconds kSilence{1500};

  /// Starts the heartbeat thread. `store` is the job's store (each user gets its own clone);
  /// `abort` is the signal this process's groups watch; `store_address` names the store in messages;
  /// `deadline` bounds each call into the store (StoreDeadline: a stopped rank 0 never answers).
  PeerWatch(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, std::shared_ptr<AbortSignal> abort,
            std::string store_address, std::chrono::milliseconds deadline);
  ~PeerWatch();  // stops the thread; never throws
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// This rank failed on its own: tell the other processes (unless another rank declared first),
  /// with its exit class: `bad_input` for the input's fault (exit 2), else the run's (exit 1).
  /// Never throws (the store may be gone).
  void declare_failure(const std::string& reason, bool bad_input = false);

  struct Culprit {
    int rank = -1;           ///< -1: no other rank is at fault
    std::string text;        ///< "rank 1 failed: ...", "rank 1 stopped responding ...", ""
    bool bad_input = false;  ///< that rank failed on bad input (it exits 2, and so does the job)
  };
  /// After one of this rank's collectives failed: the rank that caused it. A declared failure
  /// first; else the ranks silent for kSilence (this waits up to that long), declared on their
  /// behalf so every survivor names the same rank; else the store's host (rank 0) when the store
  /// is unreachable. Never throws.
  Culprit diagnose();

 private:
  void beat_loop();
  /// The declared failure, if any (rank -1 when none). Caller holds mutex_.
  Culprit declared_locked();

  int rank_, world_size_;
  std::shared_ptr<AbortSignal> abort_;
  std::string store_address_;
  std::chrono::milliseconds deadline_;
  c10::intrusive_ptr<c10d::Store> beat_store_;   // the thread's own client
  c10::intrusive_ptr<c10d::Store> probe_store_;  // diagnose / declare (under mutex_)
  std::mutex mutex_;
  std::atomic<bool> stop_{false};
  bool seen_failure_ = false;  ///< another's failure seen and said so (the beat thread's own)
  std::thread thread_;
};

/// A PeerWatch made once the groups are set up; a store that cannot be reached by then (rank 0's
/// process, or torchrun's agent, which serves it, ended or stopped) throws CommError naming the
/// rank, the store and the cause, where c10d's own socket error ended the process.
std::unique_ptr<PeerWatch> start_peer_watch(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                            std::shared_ptr<AbortSignal> abort, const std::string& store_address,
                                            std::chrono::milliseconds deadline);

}  // namespace odyssey
