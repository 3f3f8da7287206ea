// The one translation unit that includes ProcessGroupGloo.hpp, against Odyssey's declaration-only
// Gloo headers (engine/parallel/gloo_shim; see its README.md and docs/gloo.md for why it is sound).
// defines: make_gloo_backend
// The torch_cpu target already exports USE_C10D_GLOO to every consumer (Caffe2Targets.cmake);
// define it here too so this file does not depend on that.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "engine/parallel/gloo_backend.h"

#include <csignal>
#include <cstdlib>
#include <mutex>

namespace odyssey {

namespace {

// c10d's process-wide flight recorder (on by default in 2.11, 2000 entries) inserts each new group
// into a std::map outside its mutex on the group's first collective
// (FlightRecorder::recordWithResetEnabled, all_pg_status_): in-process rank threads starting their
// groups at the same instant crashed there (SIGSEGV in _Rb_tree_insert_and_rebalance). It is off
// unless the user asks for it (TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE set). Set at
// static initialisation: this translation unit is linked into every binary that creates a group,
// its initialiser runs before main (so before any rank thread or group exists; setenv is not
// thread-safe), and every path to a group (rank threads, torchrun, tests' own launchers) is covered.
struct FlightRecorderOff {
  FlightRecorderOff() {
    if (std::getenv("TORCH_FR_BUFFER_SIZE") == nullptr && std::getenv("TORCH_NCCL_TRACE_BUFFER_SIZE") == nullptr)
      ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  }
};
const FlightRecorderOff flight_recorder_off;

// Gloo's TCP transport writes to peers' sockets without MSG_NOSIGNAL: once a peer has gone (a rank
// that failed, a group torn down after a timeout) the write raises SIGPIPE, whose default action
// kills the whole process instead of letting the write fail and the collective report the peer.
// Python, and so every PyTorch job, runs with SIGPIPE ignored; a process that creates a Gloo group
// does the same (set once, on the first group; `odyssey plan | head` and friends keep the default).
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] { std::signal(SIGPIPE, SIG_IGN); });
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    std::chrono::milliseconds timeout, const std::string& hostname,
                                                    const std::string& interface) {
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "make_gloo_backend: rank ", rank, " is outside a group of size ",
              size);
  // Options::create() leaves `devices` empty (the constructor would throw "No device(s)
  // specified"): add one TCP device bound to the given address or interface. Exported helpers only.
  ignore_sigpipe_once();
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!interface.empty())
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  else if (!hostname.empty())
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  else  // this machine's hostname, falling back to loopback
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  // One worker thread: Odyssey's collectives are blocking, so a second worker would only wait.
  options->threads = 1;
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  return c10::static_intrusive_pointer_cast<c10d::Backend>(backend);
}

}  // namespace odyssey
