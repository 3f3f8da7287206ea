// Offload of checkpointed block inputs to the host pool: put() after a block's forward, take()
// before its recompute, prefetch() of the previous block while the current one recomputes.
// defines: OffloadStore
#pragma once

#include <cstdint>
#include <map>

#include <ATen/ATen.h>

namespace odyssey {

/// Holds the offloaded inputs of one step, keyed by layer. On CPU the "host copy" is a clone made
/// under PoolScope(Host) (category offloaded) so the tracker shows device bytes falling and host
/// bytes rising by exactly the input size. On CUDA it is a synchronous copy to pageable host
/// memory for now; the pinned slab and copy/prefetch streams plug in here (GPU issue): put() would
/// issue a D2H copy on the offload stream, prefetch() an H2D copy on the prefetch stream, take()
/// wait on the prefetch event.
class OffloadStore {
 public:
  explicit OffloadStore(at::Device device) : device_(device) {}

  /// Copies x [B, s, d] into the host pool. The caller drops its device reference, freeing it.
  void put(int64_t layer, const at::Tensor& x);
  /// Starts bringing `layer` back to the device (CPU: copies now). No-op when absent or already on
  /// its way. The host copy is freed once the device copy exists.
  void prefetch(int64_t layer);
  /// The device copy of `layer`'s input (prefetched or brought back now); the store forgets it.
  at::Tensor take(int64_t layer);

  bool holds(int64_t layer) const { return slots_.count(layer) > 0; }
  /// Drops everything (end of step, or after a failed step).
  void clear() { slots_.clear(); }
  /// Bytes currently in the host pool / brought back and waiting on the device.
  int64_t host_bytes() const;
  int64_t device_bytes() const;
  /// Inputs offloaded since construction (tests: proves offload really happened).
  int64_t total_offloaded() const { return total_offloaded_; }

 private:
  struct Slot {
    at::Tensor host;    ///< [B, s, d] in the host pool, until brought back
    at::Tensor device;  ///< [B, s, d] prefetched device copy, until taken
  };
  at::Device device_;
  std::map<int64_t, Slot> slots_;
  int64_t total_offloaded_ = 0;
};

}  // namespace odyssey
