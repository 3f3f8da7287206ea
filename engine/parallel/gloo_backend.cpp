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

namespace odyssey {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                    int size, std::chrono::milliseconds timeout,
                                                    const std::string& hostname, const std::string& interface) {
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "make_gloo_backend: rank ", rank,
              " is outside a group of size ", size);
  // Options::create() leaves `devices` empty (the constructor would throw "No device(s)
  // specified"): add one TCP device bound to the given address or interface. Exported helpers only.
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
