// RoPE's rotation by precomputed cos/sin tables in one pass each way, for the paths that rotate q
// and k where they lie (standard attention, Ulysses): on the GPU (rope_rotate.cu), fp64 reference.
// defines: RopeRotateShape, check_rope_rotate_shape, rope_rotate, rope_rotate_reference
#pragma once

#include "kernels/kernel_common.h"

namespace odyssey::kernels {

/// Input  x   [batch, seq, heads, head_dim]: any strides but a contiguous last dim (the transposed
///            view of a [batch, heads, seq, head_dim] gradient included), given in elements.
/// Output out [batch, seq, heads, head_dim] contiguous, x's dtype; must not overlap x.
/// Tables cos, sin: fp32, contiguous, [seq, head_dim / 2] shared by the batch's rows, or
///            [batch, seq, head_dim / 2] with table_per_row (each row its own positions).
struct RopeRotateShape {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t heads = 1;
  int64_t head_dim = 2;  ///< even: rotate-half pairs element k with k + head_dim / 2
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;  ///< x's strides, elements
  bool table_per_row = false;
};

/// The contiguous layout's strides for x [batch, seq, heads, head_dim].
RopeRotateShape rope_rotate_contiguous(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim);

/// Throws KernelError naming the field and value when the shape is inconsistent.
void check_rope_rotate_shape(const RopeRotateShape& shape, const char* op);

/// For k < h = head_dim / 2 and the token's table entries c = cos[k], s = sin[k]:
///   out[k] = x[k] c - x[k + h] s,   out[k + h] = x[k + h] c + x[k] s          (inverse = false)
/// inverse = true multiplies by the transpose (s negated): RoPE's backward, the transpose also
/// where the tables carry YaRN's attention factor. fp32 arithmetic, one rounding to dtype (the
/// eager ops round twice: the first product, then the sum). Memory: out only, no temporaries.
///   rope_rotate(KernelDtype::BF16, q, cos, sin, shape, false, q_rotated, stream);
void rope_rotate(KernelDtype dtype, const void* x, const float* cos, const float* sin, const RopeRotateShape& shape,
                 bool inverse, void* out, cudaStream_t stream);

/// The same on host pointers: fp64 arithmetic, the result rounded once to dtype.
void rope_rotate_reference(KernelDtype dtype, const void* x, const float* cos, const float* sin,
                           const RopeRotateShape& shape, bool inverse, void* out);

}  // namespace odyssey::kernels
