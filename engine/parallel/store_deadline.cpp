// StoreDeadline: a registry of the store calls in flight and one watcher thread that ends the
// process when one overstays. defines: StoreDeadline, store_deadline_for
#include "engine/parallel/store_deadline.h"

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace odyssey {
namespace {

struct Call {
  std::chrono::steady_clock::time_point due;
  std::chrono::milliseconds deadline;
  std::string what, store;
};

struct Registry {
  std::mutex mutex;
  std::map<uint64_t, Call> calls;
  uint64_t next = 1;
  bool watching = false;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the watcher may outlive main's statics
  return *r;
}

[[noreturn]] void end_process(const Call& call) {
  const char* rank = std::getenv("RANK");
  const std::string text = std::string("\nodyssey: rank ") + (rank ? rank : "?") + ": the job's store at " +
                           call.store + " gave no answer to " + call.what + " within " +
                           std::to_string(call.deadline.count() / 1000) +
                           " s (parallel.timeout_s + 10 s): rank 0's process, which serves it, is stopped or hung (or "
                           "another program listens on that port); this process ends, as the job cannot go on "
                           "without it\n";
  const ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
  ::_exit(1);
}

void watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [id, call] : r.calls)
      if (now >= call.due) end_process(call);
  }
}

}  // namespace

std::chrono::milliseconds store_deadline_for(std::chrono::milliseconds timeout) {
  return timeout + std::chrono::seconds(10);
}

StoreDeadline::StoreDeadline(std::chrono::milliseconds deadline, std::string what, std::string store_address) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  id_ = r.next++;
  r.calls[id_] = Call{std::chrono::steady_clock::now() + deadline, deadline, std::move(what), std::move(store_address)};
  if (!r.watching) {
    r.watching = true;
    std::thread(watch).detach();
  }
}

StoreDeadline::~StoreDeadline() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.calls.erase(id_);
}

}  // namespace odyssey
