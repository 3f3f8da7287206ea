// torchrun's elastic agent standing in for a test: the job's TCPStore served on loopback before
// any rank starts, as TORCHELASTIC_USE_AGENT_STORE=True has it. defines: serve_agent_store
#pragma once

#include <cstdint>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace odyssey::test {

/// A TCPStore server on 127.0.0.1:`port` that waits for no worker, as torchrun's agent serves it.
inline c10::intrusive_ptr<c10d::TCPStore> serve_agent_store(int port) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = true;
  options.waitWorkers = false;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

}  // namespace odyssey::test
