// OffloadStore: checkpointed block inputs in the host pool (see offload.h).
// defines: OffloadStore methods
#include "engine/memory/offload.h"

#include <stdexcept>
#include <string>

#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

void OffloadStore::put(int64_t layer, const at::Tensor& x) {
  PoolScope pool(MemPool::Host);
  CategoryScope category(MemCategory::Offloaded);
  Slot slot;
  // Memory: the device copy is released by the caller; only this host copy survives the forward.
  slot.host = x.device().is_cpu() ? x.detach().clone() : x.detach().to(at::kCPU);  // [B, s, d] host
  slots_[layer] = std::move(slot);
  ++total_offloaded_;
}

void OffloadStore::prefetch(int64_t layer) {
  auto it = slots_.find(layer);
  if (it == slots_.end() || it->second.device.defined()) return;
  {
    PoolScope pool(MemPool::Device);
    CategoryScope category(MemCategory::SavedActivations);
    const at::Tensor& host = it->second.host;
    it->second.device = device_.is_cpu() ? host.clone() : host.to(device_);  // [B, s, d] device
  }
  it->second.host = at::Tensor();  // host copy no longer needed
}

at::Tensor OffloadStore::take(int64_t layer) {
  if (!holds(layer))
    throw std::logic_error("offload: the input of block " + std::to_string(layer) + " was never offloaded");
  prefetch(layer);
  at::Tensor device = std::move(slots_[layer].device);
  slots_.erase(layer);
  return device;
}

int64_t OffloadStore::host_bytes() const {
  int64_t bytes = 0;
  for (const auto& [layer, slot] : slots_)
    if (slot.host.defined()) bytes += slot.host.nbytes();
  return bytes;
}

int64_t OffloadStore::device_bytes() const {
  int64_t bytes = 0;
  for (const auto& [layer, slot] : slots_)
    if (slot.device.defined()) bytes += slot.device.nbytes();
  return bytes;
}

}  // namespace odyssey
