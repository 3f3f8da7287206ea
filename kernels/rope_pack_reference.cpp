// CPU reference of RoPE + head-chunk packing (and its backward): plain loops over the send layout,
// fp64 angles and arithmetic. Also the shape check the GPU launcher shares.
// defines: check_rope_pack_shape, rope_pack_send_elements, rope_pack_forward_reference,
//          rope_pack_backward_reference
#include <cmath>
#include <vector>

#include "kernels/rope_pack.h"

namespace odyssey::kernels {
namespace {

std::string field(const char* name, int64_t value) { return std::string(name) + " = " + std::to_string(value); }

std::vector<double> frequencies(const float* inv_freq, double theta, int64_t head_dim) {
  std::vector<double> freq(static_cast<size_t>(head_dim / 2));
  for (int64_t k = 0; k < head_dim / 2; ++k) {
    freq[static_cast<size_t>(k)] = inv_freq
                                       ? static_cast<double>(inv_freq[k])
                                       : std::pow(theta, -2.0 * static_cast<double>(k) / static_cast<double>(head_dim));
  }
  return freq;
}

// Index of send[p, b, t, j, e].
size_t send_index(const RopePackShape& s, int64_t p, int64_t b, int64_t t, int64_t j, int64_t e) {
  const int64_t m = s.stage_heads / s.ranks;
  return static_cast<size_t>((((p * s.batch + b) * s.seq + t) * m + j) * s.head_dim + e);
}

// Index of x[b, t, h, e].
size_t input_index(const RopePackShape& s, int64_t b, int64_t t, int64_t h, int64_t e) {
  return static_cast<size_t>(((b * s.seq + t) * s.heads + h) * s.head_dim + e);
}

}  // namespace

void check_rope_pack_shape(const RopePackShape& s, const char* op) {
  const std::string where = std::string(op) + ": ";
  require(s.batch > 0 && s.seq > 0 && s.heads > 0, where + field("batch", s.batch) + ", " + field("seq", s.seq) + ", " +
                                                       field("heads", s.heads) + " must be positive");
  require(s.head_dim > 0 && s.head_dim % 2 == 0, where + field("head_dim", s.head_dim) + " must be positive and even");
  require(s.ranks > 0, where + field("ranks", s.ranks) + " must be positive");
  require(s.stage_heads > 0 && s.stage_heads % s.ranks == 0,
          where + field("stage_heads", s.stage_heads) + " must be a positive multiple of " + field("ranks", s.ranks));
  require(s.head_repeat > 0 && s.stage_heads % s.head_repeat == 0, where + field("head_repeat", s.head_repeat) +
                                                                       " must be positive and divide " +
                                                                       field("stage_heads", s.stage_heads));
  require(s.head_stride > 0, where + field("head_stride", s.head_stride) + " must be positive");
  const int64_t last = s.head_begin + (s.stage_heads / s.head_repeat - 1) * s.head_stride;
  require(s.head_begin >= 0 && last < s.heads, where + "stage heads " + std::to_string(s.head_begin) + ".." +
                                                   std::to_string(last) + " must lie in [0, " +
                                                   field("heads", s.heads) + ")");
}

int64_t rope_pack_send_elements(const RopePackShape& s) { return s.batch * s.seq * s.stage_heads * s.head_dim; }

void rope_pack_forward_reference(KernelDtype dtype, const void* x, const int64_t* positions, const float* inv_freq,
                                 double theta, const RopePackShape& s, void* send) {
  check_rope_pack_shape(s, "rope_pack_forward_reference");
  const std::vector<double> freq = frequencies(inv_freq, theta, s.head_dim);
  const int64_t half = s.head_dim / 2;
  const int64_t m = s.stage_heads / s.ranks;
  for (int64_t p = 0; p < s.ranks; ++p)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t t = 0; t < s.seq; ++t)
        for (int64_t j = 0; j < m; ++j) {
          const int64_t head = rope_pack_stage_head(s, p * m + j);
          const double pos = static_cast<double>(positions[b * s.seq + t]);
          for (int64_t k = 0; k < half; ++k) {
            const double angle = pos * freq[static_cast<size_t>(k)];
            const double c = std::cos(angle), sn = std::sin(angle);
            const double a = load_element(x, dtype, input_index(s, b, t, head, k));
            const double z = load_element(x, dtype, input_index(s, b, t, head, k + half));
            store_element(send, dtype, send_index(s, p, b, t, j, k), a * c - z * sn);
            store_element(send, dtype, send_index(s, p, b, t, j, k + half), z * c + a * sn);
          }
        }
}

void rope_pack_backward_reference(KernelDtype dtype, const void* dsend, const int64_t* positions, const float* inv_freq,
                                  double theta, const RopePackShape& s, void* dx, bool accumulate) {
  check_rope_pack_shape(s, "rope_pack_backward_reference");
  const std::vector<double> freq = frequencies(inv_freq, theta, s.head_dim);
  const int64_t half = s.head_dim / 2;
  const int64_t m = s.stage_heads / s.ranks;
  // Sum every stage head's inverse rotation into an fp64 image of dx, then write the touched heads.
  std::vector<double> sum(static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim), 0.0);
  std::vector<char> touched(static_cast<size_t>(s.heads), 0);
  for (int64_t p = 0; p < s.ranks; ++p)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t t = 0; t < s.seq; ++t)
        for (int64_t j = 0; j < m; ++j) {
          const int64_t head = rope_pack_stage_head(s, p * m + j);
          touched[static_cast<size_t>(head)] = 1;
          const double pos = static_cast<double>(positions[b * s.seq + t]);
          for (int64_t k = 0; k < half; ++k) {
            const double angle = pos * freq[static_cast<size_t>(k)];
            const double c = std::cos(angle), sn = std::sin(angle);
            const double ga = load_element(dsend, dtype, send_index(s, p, b, t, j, k));
            const double gz = load_element(dsend, dtype, send_index(s, p, b, t, j, k + half));
            sum[input_index(s, b, t, head, k)] += ga * c + gz * sn;  // transpose of the rotation
            sum[input_index(s, b, t, head, k + half)] += gz * c - ga * sn;
          }
        }
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t h = 0; h < s.heads; ++h) {
        if (!touched[static_cast<size_t>(h)]) continue;
        for (int64_t e = 0; e < s.head_dim; ++e) {
          const size_t i = input_index(s, b, t, h, e);
          store_element(dx, dtype, i, sum[i] + (accumulate ? load_element(dx, dtype, i) : 0.0));
        }
      }
}

}  // namespace odyssey::kernels
