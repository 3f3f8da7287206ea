// RoPE fused with the head-chunk packing that precedes the Untied Ulysses all-to-all, on the GPU
// (rope_pack.cu) and as an fp64 CPU reference (rope_pack_reference.cpp).
// defines: RopePackShape, rope_pack_forward, rope_pack_backward, rope_pack_send_elements,
//          rope_pack_stage_head, check_rope_pack_shape, rope_pack_forward_reference,
//          rope_pack_backward_reference
#pragma once

#include "kernels/kernel_common.h"

namespace odyssey::kernels {

/// One stage of one projection (q or k) on one rank.
/// Input  x    [batch, seq, heads, head_dim]          (this rank's sequence shard, all heads)
/// Output send [ranks, batch, seq, stage_heads / ranks, head_dim]   (rank-major all-to-all layout:
///        slot p goes to rank p; implementation-notes section 1, "[P, B, S/P, H/P, D]")
/// Stage head i (0 <= i < stage_heads) is sent as slot p = i / m, local head j = i % m with
/// m = stage_heads / ranks, and reads input head  head_begin + (i / head_repeat) * head_stride.
///   contiguous stage t of h heads:   head_begin = t*h, head_stride = 1, head_repeat = 1
///   UPipe order (rank r gets r*g+t): head_begin = t,   head_stride = g, head_repeat = 1
///   KV heads replicated to P ranks:  head_begin = 0,   head_stride = 1, head_repeat = P / n_kv_heads
struct RopePackShape {
  int64_t batch = 1;        ///< B
  int64_t seq = 1;          ///< s: local tokens of this rank
  int64_t heads = 1;        ///< H (n_heads for q, n_kv_heads for k)
  int64_t head_dim = 2;     ///< hd, even (rotate-half pairs element k with k + hd/2)
  int64_t ranks = 1;        ///< P: Ulysses degree
  int64_t stage_heads = 1;  ///< heads of this stage over all ranks, a multiple of ranks
  int64_t head_begin = 0;   ///< input head of stage head 0
  int64_t head_stride = 1;  ///< input-head step between distinct stage heads
  int64_t head_repeat = 1;  ///< consecutive stage heads reading the same input head (GQA replication)
};

/// Throws KernelError naming the field and value when the shape is inconsistent.
void check_rope_pack_shape(const RopePackShape& shape, const char* op);

/// Elements of the send buffer: batch * seq * stage_heads * head_dim.
int64_t rope_pack_send_elements(const RopePackShape& shape);

/// Input head read by stage head i.
ODYSSEY_HD inline int64_t rope_pack_stage_head(const RopePackShape& s, int64_t i) {
  return s.head_begin + (i / s.head_repeat) * s.head_stride;
}

/// Rotary frequencies: inv_freq[k] for k < head_dim/2, or nullptr for theta^(-2k/head_dim).
/// Angles are pos * inv_freq in fp64 (exact at million-token positions), cos/sin rounded to fp32.
///
/// Forward: send = pack(rotate(x, positions)). positions: [batch, seq] int64 global positions.
///   rope_pack_forward(KernelDtype::BF16, q, pos, nullptr, 500000.0, shape, q_send, stream);
void rope_pack_forward(KernelDtype dtype, const void* x, const int64_t* positions, const float* inv_freq, double theta,
                       const RopePackShape& shape, void* send, cudaStream_t stream);

/// Backward: dx[heads of the stage] (=|+=) inverse-rotate(unpack(dsend)); other heads untouched.
/// Replicated stage heads (head_repeat > 1) are summed into their input head in a fixed order.
/// accumulate=false overwrites the stage's heads, true adds to them (GQA groups over stages).
void rope_pack_backward(KernelDtype dtype, const void* dsend, const int64_t* positions, const float* inv_freq,
                        double theta, const RopePackShape& shape, void* dx, bool accumulate, cudaStream_t stream);

/// CPU references of both (host pointers, fp64 angles and arithmetic, results rounded to dtype).
void rope_pack_forward_reference(KernelDtype dtype, const void* x, const int64_t* positions, const float* inv_freq,
                                 double theta, const RopePackShape& shape, void* send);
void rope_pack_backward_reference(KernelDtype dtype, const void* dsend, const int64_t* positions, const float* inv_freq,
                                  double theta, const RopePackShape& shape, void* dx, bool accumulate);

}  // namespace odyssey::kernels
