// RoPE's rotation by tables: the CPU reference as a complex multiplication, its transpose as the
// adjoint (tables scaled as YaRN scales them), strided input and per-row tables (everywhere); the
// CUDA kernel against the reference on random data, vector and scalar paths ([.cuda]).
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <numeric>

#include "kernels/rope_rotate.h"
#include "kernel_test_support.h"

using namespace odyssey::kernels;
using namespace odyssey::kernels::test;

namespace {

size_t elements(const RopeRotateShape& s) { return static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim); }

size_t table_elements(const RopeRotateShape& s) {
  return static_cast<size_t>((s.table_per_row ? s.batch : 1) * s.seq * s.head_dim / 2);
}

/// cos and sin of arbitrary angles times `scale` (YaRN's attention factor scales both), fp32.
std::pair<std::vector<float>, std::vector<float>> tables(const RopeRotateShape& s, double scale, uint32_t seed) {
  const HostTensor angle = random_tensor(KernelDtype::F32, table_elements(s), seed, 3.0);
  std::vector<float> c(angle.size), sn(angle.size);
  for (size_t i = 0; i < angle.size; ++i) {
    c[i] = static_cast<float>(scale * std::cos(angle.at(i)));
    sn[i] = static_cast<float>(scale * std::sin(angle.at(i)));
  }
  return {c, sn};
}

/// The bound on |kernel - reference| per element: `units` roundings of S = |x1| |c| + |x2| |s|
/// (a pair's products before their sum), S read from the input's pair at the element.
std::vector<double> pair_bounds(const HostTensor& x, const RopeRotateShape& s, const std::vector<float>& c,
                                const std::vector<float>& sn, double units) {
  const int64_t half = s.head_dim / 2;
  std::vector<double> bound(elements(s));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t k = 0; k < half; ++k) {
          const int64_t in = b * s.stride_batch + t * s.stride_seq + h * s.stride_head + k;
          const size_t row = static_cast<size_t>((s.table_per_row ? b * s.seq + t : t) * half + k);
          const double sum = std::abs(x.at(static_cast<size_t>(in))) * std::abs(c[row]) +
                             std::abs(x.at(static_cast<size_t>(in + half))) * std::abs(sn[row]);
          const size_t o = static_cast<size_t>(((b * s.seq + t) * s.heads + h) * s.head_dim + k);
          bound[o] = bound[o + static_cast<size_t>(half)] = units * sum;
        }
  return bound;
}

}  // namespace

TEST_CASE("rope rotate turns each pair by its table entry as a complex multiplication", "[kernels][rope_rotate]") {
  // pair k of a head is (x[k], x[k + half]) = x[k] + i x[k + half]; forward multiplies it by
  // c + i s, the transpose by c - i s. fp32 in and out: the reference rounds once (2^-24 of the
  // result), and the bound adds the fp32 table's own error (exact here: tables are the inputs).
  RopeRotateShape s = rope_rotate_contiguous(2, 5, 3, 8);
  const auto [c, sn] = tables(s, 1.0, 11);
  const HostTensor x = random_tensor(KernelDtype::F32, elements(s), 12);
  for (const bool inverse : {false, true}) {
    CAPTURE(inverse);
    HostTensor out(KernelDtype::F32, elements(s));
    rope_rotate_reference(KernelDtype::F32, x.data(), c.data(), sn.data(), s, inverse, out.data());
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t t = 0; t < s.seq; ++t)
        for (int64_t h = 0; h < s.heads; ++h)
          for (int64_t k = 0; k < 4; ++k) {
            const size_t i = static_cast<size_t>(((b * s.seq + t) * s.heads + h) * 8 + k);
            const size_t row = static_cast<size_t>(t * 4 + k);
            const std::complex<double> z(x.at(i), x.at(i + 4));
            const std::complex<double> turn(c[row], inverse ? -sn[row] : sn[row]);
            const std::complex<double> want = z * turn;
            CHECK(std::abs(out.at(i) - want.real()) <= std::ldexp(std::abs(want.real()), -23));
            CHECK(std::abs(out.at(i + 4) - want.imag()) <= std::ldexp(std::abs(want.imag()), -23));
          }
  }
}

TEST_CASE("rope rotate's inverse is the transpose of the forward, also for scaled tables", "[kernels][rope_rotate]") {
  // <R x, y> = <x, R^T y> for any tables: the backward of a rotation scaled by YaRN's factor is
  // its transpose, not its inverse. fp32 values, fp64 sums: each side is within a few 2^-24 of
  // the exact products, far below the 1e-4 relative bound.
  const RopeRotateShape s = rope_rotate_contiguous(1, 7, 2, 16);
  const auto [c, sn] = tables(s, 1.3, 21);
  const HostTensor x = random_tensor(KernelDtype::F32, elements(s), 22),
                   y = random_tensor(KernelDtype::F32, elements(s), 23);
  HostTensor rx(KernelDtype::F32, elements(s)), rty(KernelDtype::F32, elements(s));
  rope_rotate_reference(KernelDtype::F32, x.data(), c.data(), sn.data(), s, false, rx.data());
  rope_rotate_reference(KernelDtype::F32, y.data(), c.data(), sn.data(), s, true, rty.data());
  const auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
  };
  const double lhs = dot(rx.values(), y.values()), rhs = dot(x.values(), rty.values());
  CHECK(std::abs(lhs - rhs) <= 1e-4 * std::max(1.0, std::abs(lhs)));
  // and the scaled forward is no rotation: R^T R x = 1.69 x
  HostTensor back(KernelDtype::F32, elements(s));
  rope_rotate_reference(KernelDtype::F32, rx.data(), c.data(), sn.data(), s, true, back.data());
  for (size_t i = 0; i < x.size; ++i) CHECK(std::abs(back.at(i) - 1.69 * x.at(i)) <= 1e-5 * (1.0 + std::abs(x.at(i))));
}

TEST_CASE("rope rotate reads strided input and per-row tables", "[kernels][rope_rotate]") {
  // x as the transposed view of [B, h, s, hd] (the layout a gradient from SDPA arrives in) gives
  // the same output as its contiguous copy; per-row tables give row b its own rotation.
  const int64_t B = 2, S = 6, H = 3, hd = 4;
  const HostTensor bhs = random_tensor(KernelDtype::F32, static_cast<size_t>(B * H * S * hd), 31);  // [B, h, s, hd]
  HostTensor bsh(KernelDtype::F32, bhs.size);                                                       // [B, s, h, hd]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t e = 0; e < hd; ++e)
          bsh.set(static_cast<size_t>(((b * S + t) * H + h) * hd + e),
                  bhs.at(static_cast<size_t>(((b * H + h) * S + t) * hd + e)));
  RopeRotateShape strided = rope_rotate_contiguous(B, S, H, hd);
  strided.stride_batch = H * S * hd, strided.stride_head = S * hd, strided.stride_seq = hd;
  const RopeRotateShape plain = rope_rotate_contiguous(B, S, H, hd);
  const auto [c, sn] = tables(plain, 1.0, 32);
  HostTensor a(KernelDtype::F32, bhs.size), b(KernelDtype::F32, bhs.size);
  rope_rotate_reference(KernelDtype::F32, bhs.data(), c.data(), sn.data(), strided, false, a.data());
  rope_rotate_reference(KernelDtype::F32, bsh.data(), c.data(), sn.data(), plain, false, b.data());
  CHECK(a.values() == b.values());

  // per-row tables whose row 1 repeats row 0's: both batch rows rotate as the shared table does
  RopeRotateShape per_row = plain;
  per_row.table_per_row = true;
  std::vector<float> c2 = c, s2 = sn;
  c2.insert(c2.end(), c.begin(), c.end());
  s2.insert(s2.end(), sn.begin(), sn.end());
  HostTensor d(KernelDtype::F32, bhs.size);
  rope_rotate_reference(KernelDtype::F32, bsh.data(), c2.data(), s2.data(), per_row, false, d.data());
  CHECK(d.values() == b.values());
  // and a different row 1 changes row 1 only
  for (size_t i = c.size(); i < c2.size(); ++i) std::swap(c2[i], s2[i]);
  rope_rotate_reference(KernelDtype::F32, bsh.data(), c2.data(), s2.data(), per_row, false, d.data());
  const size_t row = static_cast<size_t>(S * H * hd);
  const std::vector<double> dv = d.values(), bv = b.values();
  CHECK(std::equal(dv.begin(), dv.begin() + static_cast<std::ptrdiff_t>(row), bv.begin()));
  CHECK_FALSE(std::equal(dv.begin() + static_cast<std::ptrdiff_t>(row), dv.end(),
                         bv.begin() + static_cast<std::ptrdiff_t>(row)));
}

TEST_CASE("rope rotate refuses an odd head dim and a non-positive size", "[kernels][rope_rotate]") {
  std::vector<float> t(16);
  std::vector<float> x(64), out(64);
  RopeRotateShape odd = rope_rotate_contiguous(1, 2, 2, 5);
  CHECK_THROWS_WITH(rope_rotate_reference(KernelDtype::F32, x.data(), t.data(), t.data(), odd, false, out.data()),
                    Catch::Contains("head_dim = 5"));
  RopeRotateShape empty = rope_rotate_contiguous(1, 0, 2, 4);
  CHECK_THROWS_WITH(rope_rotate_reference(KernelDtype::F32, x.data(), t.data(), t.data(), empty, false, out.data()),
                    Catch::Contains("seq = 0"));
}

TEST_CASE("rope rotate kernel matches the CPU reference", "[kernels][rope_rotate][.cuda]") {
  // The kernel forms each product in fp32 and rounds the sum once; the reference is exact and rounds
  // once (through fp32 to bf16). With S = |x1 c| + |x2 s|: fp32 differ by at most 3 x 2^-24 S (two
  // products and a sum in the kernel, one rounding in the reference); bf16 by at most 2 x 2^-8 S
  // (each side's rounding to bf16) plus 3 x 2^-24 S before it.
  const auto dtype = GENERATE(KernelDtype::F32, KernelDtype::BF16);
  const double units =
      dtype == KernelDtype::F32 ? 3 * std::ldexp(1.0, -24) : 2 * std::ldexp(1.0, -8) + 3 * std::ldexp(1.0, -24);
  struct Case {
    const char* name;
    RopeRotateShape shape;
    size_t x_offset;  ///< elements: an offset of 1 takes the scalar path
  };
  RopeRotateShape transposed = rope_rotate_contiguous(2, 33, 8, 64);
  transposed.stride_batch = 8 * 33 * 64, transposed.stride_head = 33 * 64, transposed.stride_seq = 64;
  RopeRotateShape per_row = rope_rotate_contiguous(2, 40, 4, 128);
  per_row.table_per_row = true;
  const Case cases[] = {
      {"1B q heads, vectors", rope_rotate_contiguous(1, 257, 32, 64), 0},
      {"transposed view", transposed, 0},
      {"per-row tables, head dim 128", per_row, 0},
      {"head dim 6: scalar", rope_rotate_contiguous(2, 9, 3, 6), 0},
      {"unaligned input: scalar", rope_rotate_contiguous(1, 17, 4, 64), 1},
  };
  for (const Case& cs : cases) {
    const RopeRotateShape& s = cs.shape;
    const size_t n_in = static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim) + cs.x_offset;
    for (const bool inverse : {false, true}) {
      CAPTURE(cs.name, to_string(dtype), inverse);
      const auto [c, sn] = tables(s, 1.0, 51);
      const HostTensor x = random_tensor(dtype, n_in, 52);
      HostTensor x_at(dtype, n_in - cs.x_offset);  // the reference's view of the same values
      for (size_t i = 0; i < x_at.size; ++i) x_at.set(i, x.at(i + cs.x_offset));
      HostTensor ref(dtype, elements(s));
      rope_rotate_reference(dtype, x_at.data(), c.data(), sn.data(), s, inverse, ref.data());

      DeviceBuffer xd = to_device(x), cd = to_device(c), sd = to_device(sn), outd(elements(s) * dtype_bytes(dtype));
      const void* x_ptr = static_cast<const unsigned char*>(xd.get()) + cs.x_offset * dtype_bytes(dtype);
      rope_rotate(dtype, x_ptr, cd.as<float>(), sd.as<float>(), s, inverse, outd.get(), nullptr);
      const std::vector<double> got = to_host(outd, dtype, elements(s)).values(), want = ref.values();
      const std::vector<double> bound = pair_bounds(x_at, s, c, sn, units * 1.01);
      size_t over = 0;
      for (size_t i = 0; i < got.size(); ++i) over += std::abs(got[i] - want[i]) > bound[i] ? 1 : 0;
      CHECK(over == 0);
    }
  }
}
