// CPU reference of RoPE's rotation by tables (and its transpose): plain loops, fp64 arithmetic.
// Also the shape check and the contiguous strides the GPU launcher and the engine share.
// defines: rope_rotate_contiguous, check_rope_rotate_shape, rope_rotate_reference
#include <string>

#include "kernels/rope_rotate.h"

namespace odyssey::kernels {
namespace {

std::string field(const char* name, int64_t value) { return std::string(name) + " = " + std::to_string(value); }

}  // namespace

RopeRotateShape rope_rotate_contiguous(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  RopeRotateShape s;
  s.batch = batch, s.seq = seq, s.heads = heads, s.head_dim = head_dim;
  s.stride_head = head_dim;
  s.stride_seq = heads * head_dim;
  s.stride_batch = seq * heads * head_dim;
  return s;
}

void check_rope_rotate_shape(const RopeRotateShape& s, const char* op) {
  const std::string where = std::string(op) + ": ";
  require(s.batch > 0 && s.seq > 0 && s.heads > 0, where + field("batch", s.batch) + ", " + field("seq", s.seq) + ", " +
                                                       field("heads", s.heads) + " must be positive");
  require(s.head_dim > 0 && s.head_dim % 2 == 0, where + field("head_dim", s.head_dim) + " must be positive and even");
  require(s.stride_batch >= 0 && s.stride_seq >= 0 && s.stride_head >= 0,
          where + field("stride_batch", s.stride_batch) + ", " + field("stride_seq", s.stride_seq) + ", " +
              field("stride_head", s.stride_head) + " must not be negative");
}

void rope_rotate_reference(KernelDtype dtype, const void* x, const float* cos, const float* sin,
                           const RopeRotateShape& s, bool inverse, void* out) {
  check_rope_rotate_shape(s, "rope_rotate_reference");
  const int64_t half = s.head_dim / 2;
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t in = b * s.stride_batch + t * s.stride_seq + h * s.stride_head;
        const int64_t o = ((b * s.seq + t) * s.heads + h) * s.head_dim;
        const int64_t row = (s.table_per_row ? b * s.seq + t : t) * half;
        for (int64_t k = 0; k < half; ++k) {
          const double a = load_element(x, dtype, static_cast<size_t>(in + k));
          const double z = load_element(x, dtype, static_cast<size_t>(in + k + half));
          const double c = cos[row + k], sn = sign * static_cast<double>(sin[row + k]);
          store_element(out, dtype, static_cast<size_t>(o + k), a * c - z * sn);
          store_element(out, dtype, static_cast<size_t>(o + k + half), z * c + a * sn);
        }
      }
}

}  // namespace odyssey::kernels
