// PeerWatch: heartbeats, failure declarations and the post-mortem of a failed collective in a
// torchrun job, all through the job's TCPStore. defines: PeerWatch
#include "engine/parallel/peer_watch.h"

#include <cstdio>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "engine/parallel/collective_watchdog.h"  // seconds_text, first_line
#include "engine/parallel/comm.h"
#include "engine/parallel/store_deadline.h"

namespace odyssey {
namespace {

const std::string kFailureKey = "odyssey/failure";

std::string beat_key(int rank) { return "odyssey/beat/" + std::to_string(rank); }
// set by a process once it has seen another's declared failure
std::string ack_key(int rank) { return "odyssey/failure_seen/" + std::to_string(rank); }

/// A declared failure as the store holds it: "RANK\nCLASS\nREASON", CLASS "input" or "run".
std::vector<uint8_t> failure_value(int rank, bool bad_input, const std::string& reason) {
  const std::string text = std::to_string(rank) + "\n" + (bad_input ? "input" : "run") + "\n" + reason;
  return std::vector<uint8_t>(text.begin(), text.end());
}

struct DeclaredFailure {
  int rank = -1;  ///< -1: unreadable
  bool bad_input = false;
  std::string reason;
};
DeclaredFailure parse_failure(const std::vector<uint8_t>& value) {
  const std::string text(value.begin(), value.end());
  const size_t nl = text.find('\n'), nl2 = nl == std::string::npos ? nl : text.find('\n', nl + 1);
  if (nl2 == std::string::npos) return {-1, false, text};
  try {
    return {std::stoi(text.substr(0, nl)), text.substr(nl + 1, nl2 - nl - 1) == "input", text.substr(nl2 + 1)};
  } catch (const std::exception&) {
    return {-1, false, text};
  }
}

}  // namespace

PeerWatch::PeerWatch(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                     std::shared_ptr<AbortSignal> abort, std::string store_address, std::chrono::milliseconds deadline)
    : rank_(rank),
      world_size_(world_size),
      abort_(std::move(abort)),
      store_address_(std::move(store_address)),
      deadline_(deadline) {
  const StoreDeadline bound(deadline_, "the peer watch's set-up", store_address_);
  beat_store_ = store->clone();
  probe_store_ = store->clone();
  for (auto* s : {&beat_store_, &probe_store_}) (*s)->setTimeout(kSilence);
  beat_store_->add(beat_key(rank_), 1);  // alive from the start
  thread_ = std::thread([this] { beat_loop(); });
}

PeerWatch::~PeerWatch() {
  stop_ = true;
  // The thread sleeps in kBeat slices, and each call into the store is bounded (StoreDeadline: a
  // store that never answers ends the process), so the join is bounded.
  if (thread_.joinable()) thread_.join();
}

void PeerWatch::beat_loop() {
  while (!stop_) {
    try {
      const StoreDeadline bound(deadline_, "a heartbeat", store_address_);
      beat_store_->add(beat_key(rank_), 1);
      if (beat_store_->check({kFailureKey})) {
        const DeclaredFailure f = parse_failure(beat_store_->get(kFailureKey));
        // Another rank failed: end this process's pending collectives now, naming it and keeping
        // its exit class (the store may be gone when the collective's failure asks), and say so
        // to the failing process, which waits for that before it ends (and with it, when it is
        // rank 0's, the store).
        if (f.rank >= 0 && f.rank != rank_) {
          if (abort_ && !abort_->raised()) abort_->raise(f.rank, f.reason, f.bad_input);
          if (!seen_failure_) beat_store_->add(ack_key(rank_), 1);
          seen_failure_ = true;
        }
      }
    } catch (const std::exception&) {
      // The store is gone (rank 0's process ended): nothing more to beat or learn, and every
      // further attempt would log c10d's warning again. diagnose() says what it means.
      return;
    }
    for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(kBeat / 10);
  }
}

void PeerWatch::declare_failure(const std::string& reason, bool bad_input) {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    const StoreDeadline bound(deadline_ + kSilence, "this process's failure report", store_address_);
    const std::vector<uint8_t> value = failure_value(rank_, bad_input, reason);
    if (probe_store_->compareSet(kFailureKey, std::vector<uint8_t>{}, value) != value) return;  // another's first
    // Every other process learns it from the store within a beat: wait for each to say it has
    // (kSilence at most: a dead or stopped one never will), so that this process's exit, and
    // with it the store when it serves it, never comes before the others have read the class.
    std::vector<std::string> seen;
    for (int r = 0; r < world_size_; ++r)
      if (r != rank_) seen.push_back(ack_key(r));
    const auto give_up = std::chrono::steady_clock::now() + kSilence;
    while (!probe_store_->check(seen) && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(kBeat / 2);
  } catch (const std::exception&) {
    // Nobody left to tell.
  }
}

PeerWatch::Culprit PeerWatch::declared_locked() {
  if (!probe_store_->check({kFailureKey})) return {};
  const DeclaredFailure f = parse_failure(probe_store_->get(kFailureKey));
  if (f.rank < 0 || f.rank == rank_) return {};
  return {f.rank, "rank " + std::to_string(f.rank) + " failed: " + f.reason, f.bad_input};
}

PeerWatch::Culprit PeerWatch::diagnose() {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    // kSilence of it is the heartbeats' window below
    const StoreDeadline bound(deadline_ + kSilence, "the questions after a failed collective", store_address_);
    Culprit declared = declared_locked();
    if (declared.rank >= 0) return declared;
    auto beats = [&] {
      std::vector<int64_t> b(world_size_, 0);
      for (int r = 0; r < world_size_; ++r)
        if (r != rank_) b[r] = probe_store_->add(beat_key(r), 0);
      return b;
    };
    const std::vector<int64_t> before = beats();
    std::this_thread::sleep_for(kSilence);
    declared = declared_locked();  // a rank may have declared meanwhile
    if (declared.rank >= 0) return declared;
    const std::vector<int64_t> after = beats();
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_ || after[r] != before[r]) continue;
      // Declare it on the silent rank's behalf: every survivor then names the same rank.
      const std::string reason =
          "its process stopped responding (no heartbeat for " + seconds_text(kSilence) + ": killed, crashed or hung)";
      const std::vector<uint8_t> now =
          probe_store_->compareSet(kFailureKey, std::vector<uint8_t>{}, failure_value(r, false, reason));
      const DeclaredFailure first = parse_failure(now);
      if (first.rank >= 0 && first.rank != rank_)
        return {first.rank, "rank " + std::to_string(first.rank) + " failed: " + first.reason, first.bad_input};
      return {r, "rank " + std::to_string(r) + " failed: " + reason};
    }
    return {};
  } catch (const std::exception& e) {
    if (rank_ == 0) return {};
    return {0, "rank 0 failed: the job's store at " + store_address_ + ", which its process serves, is unreachable (" +
                   std::string(e.what()).substr(0, std::string(e.what()).find('\n')) + ")"};
  }
}

std::unique_ptr<PeerWatch> start_peer_watch(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                            std::shared_ptr<AbortSignal> abort, const std::string& store_address,
                                            std::chrono::milliseconds deadline) {
  try {
    return std::make_unique<PeerWatch>(store, rank, world_size, std::move(abort), store_address, deadline);
  } catch (const std::exception& e) {
    std::string cause = e.what();
    if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) cause = c10_error->what_without_backtrace();
    throw CommError("torchrun job: rank " + std::to_string(rank) +
                    " cannot watch its peers through the job's store at " + store_address +
                    ": its server (rank 0's process, or torchrun's agent) ended or stopped after the groups were set "
                    "up (" +
                    first_line(cause) + ")");
  }
}

}  // namespace odyssey
