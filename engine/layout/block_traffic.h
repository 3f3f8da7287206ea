// Device-memory bytes per token that a decoder block's elementwise work moves in each of its
// phases, counted from the engine's ops, for the planner's step time (engine/planner/step_time.cpp
// charges them at hardware.device_memory_gbps). defines: BlockShapeForTraffic, BlockTokenBytes,
// untied_kv_accumulator_token_bytes, block_token_bytes
#pragma once

#include <cstdint>

#include "engine/layout/heads.h"

namespace odyssey {

/// What the count reads: the block's widths, the activations' dtype and the path its attention
/// and MLP take.
struct BlockShapeForTraffic {
  int64_t d = 0, q_dim = 0, kv_dim = 0, f = 0;  ///< model, all query heads, one of K/V, MLP widths
  int64_t c = 2;                                ///< bytes of an activation (the compute dtype)
  int64_t P = 1;                                ///< Ulysses degree: above 1 the all-to-alls stage copies
  bool untied = false;                          ///< Untied stages (engine/parallel/untied_attention.cpp)
  bool tiled_mlp = false;                       ///< engine/memory/tiled_mlp.cpp
  bool qk_norm = false;                         ///< per-head RMSNorm of q and k (Qwen3)
  bool kept_replay = false;  ///< the recompute replays a kept attention result (memory.keep_attention)
  /// of the blocks, the fraction whose kept attention is packed into one buffer for the host
  /// (memory.offload_kept_attention: pack_kept_attention copies the output into it)
  double kept_packed_fraction = 0;
  /// the Untied backward's fp32 dK/dV accumulators, bytes a token (untied_kv_accumulator_token_bytes)
  double untied_kv_accumulation = 0;
};

/// Bytes per token of a block's elementwise work (norms, RoPE, SwiGLU, residual sums, the sums
/// autograd makes of several gradients, layout copies) in each phase. The GEMMs' and the attention
/// kernels' own reads and writes are not counted: those kernels run under their FLOPs.
struct BlockTokenBytes {
  double forward_attention = 0, forward_mlp = 0;
  double recompute = 0;  ///< the checkpointed forward again in backward (no residual sum after the MLP)
  double backward_attention = 0, backward_mlp = 0;
};

/// The Untied backward's fp32 dK/dV accumulators, bytes per local token
/// (engine/parallel/untied_attention.cpp): a KV range that several stages read, or whose stages
/// gather K/V per query head, is zero-filled (4 B an element, dK and dV), each such stage adds its
/// kernel's gradients into it (add_: read 4 and c, write 4; gathered: the cast to fp32, then an
/// ordered index_add, 2 + c + 12 a query head's element), and the range's sums go back to the
/// compute dtype (read 4, write c). An element of a range of n KV heads per rank is P x n x hd a
/// local token (the head layout holds P times the rank's tokens). 0 where every range is one stage's.
inline double untied_kv_accumulator_token_bytes(const UntiedStagePlan& p, int64_t compute_bytes) {
  const double c = static_cast<double>(compute_bytes), per_head = static_cast<double>(p.P * p.hd);
  double bytes = 0;
  bool accumulating = false;
  for (int64_t t = 0; t < p.stages; ++t) {
    const auto i = static_cast<size_t>(t);
    if (p.kv_new[i]) {
      accumulating = !p.kv_direct[i];
      if (accumulating) bytes += 2.0 * (4.0 + (4.0 + c)) * per_head * static_cast<double>(p.kv_count[i]);
    }
    if (!accumulating) continue;
    bytes += p.kv_gathered[i] ? 2.0 * (2.0 + c + 12.0) * per_head * static_cast<double>(p.k)
                              : 2.0 * (8.0 + c) * per_head * static_cast<double>(p.kv_count[i]);
  }
  return bytes;
}

/// The count: each tensor an op reads or writes costs its elements times their bytes. Memory
/// reason: at a few bytes per FLOP these passes run at the device's bandwidth, not at its FLOPs:
/// for the 1B at 32K tokens on an H200 they are about 35 ms of a 1.04 s step (the profile of
/// 2026-11-30: the norm and SwiGLU kernels 26 ms; RoPE then 32 ms in 256 ATen launches, now one
/// kernel).
inline BlockTokenBytes block_token_bytes(const BlockShapeForTraffic& s) {
  const double c = static_cast<double>(s.c), d = static_cast<double>(s.d), q = static_cast<double>(s.q_dim),
               kv = static_cast<double>(s.kv_dim), f = static_cast<double>(s.f);
  const double qkv = q + 2.0 * kv;
  const double residual = 3.0 * c * d;         // y = x + branch: read two, write one
  const double norm_forward = 2.0 * c * d;     // ops::rmsnorm: read x, write y (and one fp32 per row)
  const double norm_backward = 3.0 * c * d;    // read dy and x, write dx
  const double rope = 2.0 * c * (q + kv);      // ops::rope_rotate over q and k: read and write once
  const double swiglu_forward = 3.0 * c * f;   // read gate and up, write h
  const double swiglu_backward = 5.0 * c * f;  // read dh, gate, up; write dgate, dup over them
  // Qwen3's per-head norms of q and k (project_qkv, head_transform), forward and backward
  const double qk_norm_forward = s.qk_norm ? 2.0 * c * (q + kv) : 0.0;
  const double qk_norm_backward = s.qk_norm ? 3.0 * c * (q + kv) : 0.0;
  // Ulysses' all-to-alls: q, k, v staged into the send buffer and o back from the receive one,
  // each way (engine/parallel/ulysses.cpp); none at P = 1
  const double a2a_staging = s.P > 1 ? 2.0 * c * (qkv + q) : 0.0;
  // memory.offload_kept_attention: the kept output copied into the host-bound payload
  const double kept_pack = s.kept_packed_fraction * 2.0 * c * q;

  BlockTokenBytes out;
  if (!s.untied) {
    // norm, (QK-norm,) RoPE of q and k, the residual sum (attention_local, run_block)
    out.forward_attention = norm_forward + qk_norm_forward + rope + residual + a2a_staging + kept_pack;
    // RoPE's inverse; autograd sums the three projections' input gradients (two sums); the norm's
    // backward; dx = dh + d(attention) in place (BlockFunction::backward)
    out.backward_attention = rope + qk_norm_backward + 2.0 * residual + norm_backward + residual + a2a_staging;
  } else {
    // The norm folded into the projections (only its 1/rms: x read once), each projection scaled
    // by it in place, RoPE (packed into the stage buffer with q and k), v and o copied between the
    // local and the stage layouts, the residual sum (untied_attention_projected)
    const double rstd = c * d;
    const double scale = 2.0 * c * qkv;
    const double layout = 2.0 * c * (kv + q);
    out.forward_attention = rstd + scale + qk_norm_forward + rope + layout + residual + kept_pack;
    // Backward projects q, k, v again (scaled, RoPE, v copied), copies o and d o into the stage
    // layout, rotates dq, dk back, copies dq, dk, dv to the local layout, scales them by 1/rms,
    // zero-fills dx, runs the norm's backward in row tiles copied over dx, and the residual sum.
    // With QK-norm, q and k are projected, scaled, normed and rotated once more for autograd's
    // graph of the head transform, whose backward runs the norms' backward too.
    const double again = scale + qk_norm_forward + rope + 2.0 * c * kv;
    const double stage_copies = 2.0 * c * (2.0 * q) + 2.0 * c * qkv;
    const double qk_graph = s.qk_norm ? 2.0 * c * (q + kv) + qk_norm_forward + rope + qk_norm_backward : 0.0;
    out.backward_attention = again + stage_copies + rope + scale + c * d + norm_backward + 2.0 * c * d + residual +
                             qk_graph + s.untied_kv_accumulation;
  }
  // a tiled MLP copies each tile's output into the whole one (tiled_mlp.cpp)
  out.forward_mlp = norm_forward + swiglu_forward + residual + (s.tiled_mlp ? 2.0 * c * d : 0.0);
  // The tiled MLP's backward runs each tile's forward again (tiled_mlp.h): SwiGLU's forward too
  out.backward_mlp = swiglu_backward + residual /* gate's and up's input gradients summed */ + norm_backward +
                     residual /* dh = dy + d(MLP) */ + (s.tiled_mlp ? swiglu_forward : 0.0);
  // The recompute: the attention half again (a kept Untied result replays: only the folded norm's
  // 1/rms and the residual; a kept standard result still projects and rotates q and k; nothing is
  // packed), then the MLP's norm and, untiled, its SwiGLU (a tiled MLP runs no tile there); no
  // residual sum after it
  const double attention_again = (s.kept_replay && s.untied) ? c * d + residual : out.forward_attention - kept_pack;
  out.recompute = attention_again + norm_forward + (s.tiled_mlp ? 0.0 : swiglu_forward);
  return out;
}

}  // namespace odyssey
