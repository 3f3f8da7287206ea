// Device-memory bytes per logit that the loss's elementwise passes move, counted from the engine's
// three loss paths, for the planner's step time (engine/planner/step_time.cpp charges them at
// hardware.device_memory_gbps). defines: LossLogitBytes, unfused_loss_logit_bytes,
// tiled_loss_by_hand_logit_bytes, fused_loss_logit_bytes
#pragma once

#include <cstdint>

namespace odyssey {

/// Bytes per logit ([tokens, V] elements) in the loss's forward and backward phases. The head
/// GEMMs' own reads and writes are not counted: at 2 x dim FLOPs a logit they run under their FLOPs.
struct LossLogitBytes {
  double forward = 0;
  double backward = 0;
  double total() const { return forward + backward; }
};

/// The fp32 copy of compute-dtype logits (`head_logits`: read c, write 4), none in fp32.
inline double fp32_upcast_bytes(int64_t compute_bytes) {
  return compute_bytes == 4 ? 0.0 : 4.0 + static_cast<double>(compute_bytes);
}

/// The untiled loss (engine/model/head.cpp: head_logits, at::cross_entropy_loss, autograd's
/// backward). Forward: the fp32 copy, then log_softmax over rows too long for on-chip memory (reads
/// the row for its max, its sum and its output: 12, writes 4). Backward: the NLL gradient's
/// zero-filled [tokens, V] (4), log_softmax's backward (reads the gradient twice and the output
/// once, writes 4: 16), the cast back to the compute dtype (read 4, write c). Memory reason: with
/// the [tokens, V] fp32 tensors they are the loss's time beyond its GEMMs (the 1B at 32K on an
/// H200: 48 B a logit, 4.2e9 logits, about 47 ms of its 122).
inline LossLogitBytes unfused_loss_logit_bytes(int64_t compute_bytes) {
  const double upcast = fp32_upcast_bytes(compute_bytes);
  return {upcast + 16.0, 4.0 + 16.0 + upcast};
}

/// The tiled loss without the fused kernel (engine/memory/tiled_loss.cpp's tile loop: the CPU, or
/// CUDA without the kernels), all in the forward: the fp32 copy, log_softmax (16), exp_ and mul_ in
/// place (8 each), the cast of the gradient to the compute dtype.
inline LossLogitBytes tiled_loss_by_hand_logit_bytes(int64_t compute_bytes) {
  const double upcast = fp32_upcast_bytes(compute_bytes);
  return {upcast + 16.0 + 8.0 + 8.0 + upcast, 0.0};
}

/// The fused kernel (kernels/linear_cross_entropy.cu), all in the forward: the statistics kernel
/// reads the fp32 logits tile (4), the gradient kernel reads it again (4) and writes the gradient
/// in the compute dtype (c; over the tile itself in fp32). The GEMMs write the fp32 tile.
inline LossLogitBytes fused_loss_logit_bytes(int64_t compute_bytes) {
  return {8.0 + static_cast<double>(compute_bytes), 0.0};
}

}  // namespace odyssey
