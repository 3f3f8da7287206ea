// RNG capture/restore around checkpoint recompute (see rng_state.h).
// defines: capture_rng_state, RngFork
#include "engine/memory/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "engine/telemetry/memory_tracker.h"

namespace odyssey {
namespace {

at::Tensor get_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

RngState capture_rng_state(at::Device device) {
  CategoryScope category(MemCategory::Other);
  RngState state;
  state.cpu = get_state(at::detail::getDefaultCPUGenerator());
  if (device.is_cuda()) {
    state.device_type = device;
    state.device = get_state(at::globalContext().defaultGenerator(device));
  }
  return state;
}

RngFork::RngFork(const RngState& state) : saved_(capture_rng_state(state.device_type)) {
  set_state(at::detail::getDefaultCPUGenerator(), state.cpu);
  if (state.device.defined()) set_state(at::globalContext().defaultGenerator(state.device_type), state.device);
}

RngFork::~RngFork() {
  set_state(at::detail::getDefaultCPUGenerator(), saved_.cpu);
  if (saved_.device.defined()) set_state(at::globalContext().defaultGenerator(saved_.device_type), saved_.device);
}

}  // namespace odyssey
