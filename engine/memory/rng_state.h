// The recompute's RNG state (activation checkpointing): captured in a block's forward and restored
// around its recompute in backward (torch.utils.checkpoint's preserve_rng_state / fork_rng), for
// the CPU generator and, on CUDA, the device's generator. defines: RngState, capture_rng_state,
// RngFork
#pragma once

#include <optional>

#include <ATen/ATen.h>

namespace odyssey {

/// Generator states at one instant (uint8 CPU tensors, category other).
struct RngState {
  at::Tensor cpu;                     ///< CPU default generator state
  at::Tensor device;                  ///< device default generator state (CUDA only)
  at::Device device_type = at::kCPU;  ///< which device generator `device` belongs to
};

/// Captures the CPU generator and, when `device` is CUDA, that device's generator.
RngState capture_rng_state(at::Device device);

/// For its lifetime the generators hold `state` (the forward's); on destruction the states that
/// were current before are restored, so recomputing does not disturb the RNG stream.
class RngFork {
 public:
  explicit RngFork(const RngState& state);
  ~RngFork();
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  RngState saved_;
};

}  // namespace odyssey
