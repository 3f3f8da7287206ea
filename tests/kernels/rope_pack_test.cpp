// RoPE + head-chunk packing: the CPU reference against the packing index formula, the rotation as
// a complex multiplication, the adjoint identity of forward/backward and shape errors (everywhere);
// the CUDA kernels against the reference on random data ([.cuda]).
#include <catch2/catch.hpp>

#include <complex>
#include <numeric>

#include "kernels/rope_pack.h"
#include "kernel_test_support.h"

using namespace odyssey::kernels;
using namespace odyssey::kernels::test;

namespace {

RopePackShape make_shape(int64_t batch, int64_t seq, int64_t heads, int64_t hd, int64_t ranks, int64_t stage_heads,
                         int64_t begin, int64_t stride, int64_t repeat) {
  RopePackShape s;
  s.batch = batch, s.seq = seq, s.heads = heads, s.head_dim = hd, s.ranks = ranks;
  s.stage_heads = stage_heads, s.head_begin = begin, s.head_stride = stride, s.head_repeat = repeat;
  return s;
}

size_t input_elements(const RopePackShape& s) { return static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim); }

std::vector<int64_t> positions_for(const RopePackShape& s, int64_t first) {
  std::vector<int64_t> pos(static_cast<size_t>(s.batch * s.seq));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t) pos[b * s.seq + t] = first + t * 7 + b;  // arbitrary global positions
  return pos;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

}  // namespace

TEST_CASE("rope pack at position 0 is the rank-major packing of the stage's heads", "[kernels][rope]") {
  // Distinct input values make every element's origin visible; position 0 rotates by nothing.
  struct Mapping {
    const char* name;
    RopePackShape shape;
  };
  const Mapping mappings[] = {
      {"contiguous stage 1 of 4 heads", make_shape(2, 3, 8, 4, 2, 4, 4, 1, 1)},
      {"UPipe order r*g+t", make_shape(1, 2, 8, 4, 4, 4, 1, 2, 1)},
      {"kv replicated to ranks", make_shape(1, 2, 2, 4, 4, 4, 0, 1, 2)},
  };
  for (const auto& m : mappings) {
    const RopePackShape& s = m.shape;
    CAPTURE(m.name);
    HostTensor x(KernelDtype::F32, input_elements(s));
    for (size_t i = 0; i < x.size; ++i) x.set(i, static_cast<double>(i));
    std::vector<int64_t> pos(static_cast<size_t>(s.batch * s.seq), 0);
    HostTensor send(KernelDtype::F32, static_cast<size_t>(rope_pack_send_elements(s)));
    rope_pack_forward_reference(KernelDtype::F32, x.data(), pos.data(), nullptr, 10000.0, s, send.data());
    const int64_t per_rank = s.stage_heads / s.ranks;
    for (int64_t p = 0; p < s.ranks; ++p)
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t t = 0; t < s.seq; ++t)
          for (int64_t j = 0; j < per_rank; ++j)
            for (int64_t e = 0; e < s.head_dim; ++e) {
              const int64_t i = p * per_rank + j;  // stage head
              const int64_t head = s.head_begin + (i / s.head_repeat) * s.head_stride;
              const size_t out = static_cast<size_t>((((p * s.batch + b) * s.seq + t) * per_rank + j) * s.head_dim + e);
              const size_t in = static_cast<size_t>(((b * s.seq + t) * s.heads + head) * s.head_dim + e);
              REQUIRE(send.at(out) == x.at(in));
            }
  }
  // The UPipe mapping sends head r*g+t to rank r: stage t = 1, g = 2 -> ranks get heads 1, 3, 5, 7.
  const RopePackShape upipe = mappings[1].shape;
  CHECK(rope_pack_stage_head(upipe, 0) == 1);
  CHECK(rope_pack_stage_head(upipe, 3) == 7);
}

TEST_CASE("rope pack rotates each pair as a complex multiplication by e^(i pos freq)", "[kernels][rope]") {
  // hd = 4, theta = 100: frequencies 1 and 0.1; pair k is (x[k], x[k + 2]).
  const RopePackShape s = make_shape(1, 1, 1, 4, 1, 1, 0, 1, 1);
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f};
  const std::vector<int64_t> pos = {3};
  std::vector<float> send(4);
  rope_pack_forward_reference(KernelDtype::F32, x.data(), pos.data(), nullptr, 100.0, s, send.data());
  const double freq[2] = {1.0, 0.1};
  for (int k = 0; k < 2; ++k) {
    const std::complex<double> z = std::complex<double>(x[k], x[k + 2]) * std::polar(1.0, 3.0 * freq[k]);
    CHECK(send[k] == Approx(z.real()).epsilon(1e-6));
    CHECK(send[k + 2] == Approx(z.imag()).epsilon(1e-6));
  }
  // A caller-supplied inv_freq table replaces theta.
  const std::vector<float> inv_freq = {0.5f, 0.25f};
  rope_pack_forward_reference(KernelDtype::F32, x.data(), pos.data(), inv_freq.data(), 0.0, s, send.data());
  const std::complex<double> z0 = std::complex<double>(x[0], x[2]) * std::polar(1.0, 1.5);
  CHECK(send[0] == Approx(z0.real()).epsilon(1e-6));
}

TEST_CASE("rope pack backward is the adjoint of the forward", "[kernels][rope]") {
  // <forward(x), g> = <x, backward(g)> for every mapping, replicated heads included; with
  // accumulate=false the heads outside the stage keep their previous contents.
  const RopePackShape shapes[] = {make_shape(2, 5, 8, 8, 2, 4, 2, 1, 1), make_shape(1, 4, 8, 6, 4, 4, 1, 2, 1),
                                  make_shape(2, 3, 2, 4, 4, 8, 0, 1, 4)};
  for (const RopePackShape& s : shapes) {
    CAPTURE(s.heads, s.stage_heads, s.head_repeat);
    const auto pos = positions_for(s, 1000);
    HostTensor x = random_tensor(KernelDtype::F32, input_elements(s), 21);
    HostTensor g = random_tensor(KernelDtype::F32, static_cast<size_t>(rope_pack_send_elements(s)), 22);
    HostTensor send(KernelDtype::F32, g.size);
    rope_pack_forward_reference(KernelDtype::F32, x.data(), pos.data(), nullptr, 500000.0, s, send.data());
    HostTensor dx(KernelDtype::F32, x.size);
    for (size_t i = 0; i < dx.size; ++i) dx.set(i, 0.0);
    rope_pack_backward_reference(KernelDtype::F32, g.data(), pos.data(), nullptr, 500000.0, s, dx.data(), false);
    CHECK(dot(send.values(), g.values()) == Approx(dot(x.values(), dx.values())).epsilon(1e-5));
    // accumulate=true adds the same gradient again.
    HostTensor twice = dx;
    rope_pack_backward_reference(KernelDtype::F32, g.data(), pos.data(), nullptr, 500000.0, s, twice.data(), true);
    for (size_t i = 0; i < dx.size; ++i) REQUIRE(twice.at(i) == Approx(2 * dx.at(i)).margin(1e-6));
  }
  // Untouched heads: stage of heads 2..3 leaves heads 0, 1, 4.. at their sentinel.
  const RopePackShape s = make_shape(1, 2, 6, 4, 2, 2, 2, 1, 1);
  const auto pos = positions_for(s, 0);
  HostTensor g = random_tensor(KernelDtype::F32, static_cast<size_t>(rope_pack_send_elements(s)), 23);
  HostTensor dx(KernelDtype::F32, input_elements(s));
  for (size_t i = 0; i < dx.size; ++i) dx.set(i, -7.0);
  rope_pack_backward_reference(KernelDtype::F32, g.data(), pos.data(), nullptr, 10000.0, s, dx.data(), false);
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t h = 0; h < 6; ++h) {
      const bool in_stage = h == 2 || h == 3;
      CHECK((dx.at(static_cast<size_t>((t * 6 + h) * 4)) == -7.0) == !in_stage);
    }
}

TEST_CASE("rope pack backward of the forward restores the stage heads", "[kernels][rope]") {
  // The rotation is orthogonal: backward(forward(x)) = x on the stage's heads (no replication).
  const RopePackShape s = make_shape(1, 6, 4, 16, 2, 2, 1, 2, 1);
  const auto pos = positions_for(s, 3'000'000);  // million-token positions: fp64 angles stay exact
  HostTensor x = random_tensor(KernelDtype::F32, input_elements(s), 31);
  HostTensor send(KernelDtype::F32, static_cast<size_t>(rope_pack_send_elements(s)));
  rope_pack_forward_reference(KernelDtype::F32, x.data(), pos.data(), nullptr, 500000.0, s, send.data());
  HostTensor back(KernelDtype::F32, x.size);
  rope_pack_backward_reference(KernelDtype::F32, send.data(), pos.data(), nullptr, 500000.0, s, back.data(), false);
  for (int64_t t = 0; t < s.seq; ++t)
    for (int64_t h : {1, 3})
      for (int64_t e = 0; e < s.head_dim; ++e) {
        const size_t i = static_cast<size_t>((t * s.heads + h) * s.head_dim + e);
        REQUIRE(back.at(i) == Approx(x.at(i)).margin(1e-5));
      }
}

TEST_CASE("rope pack shape errors name the field and value", "[kernels][rope]") {
  CHECK_THROWS_WITH(check_rope_pack_shape(make_shape(1, 1, 4, 5, 1, 1, 0, 1, 1), "op"),
                    Catch::Contains("head_dim = 5"));
  CHECK_THROWS_WITH(check_rope_pack_shape(make_shape(1, 1, 4, 4, 3, 4, 0, 1, 1), "op"),
                    Catch::Contains("stage_heads = 4"));
  CHECK_THROWS_WITH(check_rope_pack_shape(make_shape(1, 1, 4, 4, 2, 4, 1, 1, 1), "op"),
                    Catch::Contains("stage heads 1..4"));
  CHECK_THROWS_WITH(check_rope_pack_shape(make_shape(1, 1, 4, 4, 2, 4, 0, 1, 3), "op"),
                    Catch::Contains("head_repeat = 3"));
  CHECK_NOTHROW(check_rope_pack_shape(make_shape(1, 1, 2, 4, 8, 8, 0, 1, 4), "op"));
}

TEST_CASE("rope pack kernels match the CPU reference", "[kernels][rope][.cuda]") {
  // Tolerances, relative to the largest reference value M: fp32 within 2e-6 * max(1, M) (cos/sin
  // rounded to fp32 in the kernel); bf16 within M/128, one bf16 ulp at the top binade (kernel and
  // reference round separately, so an element can land one ulp apart).
  const auto dtype = GENERATE(KernelDtype::F32, KernelDtype::BF16);
  const RopePackShape shapes[] = {make_shape(2, 33, 32, 64, 4, 4, 8, 1, 1), make_shape(1, 100, 32, 64, 8, 8, 3, 4, 1),
                                  make_shape(1, 17, 8, 128, 8, 8, 0, 1, 1), make_shape(2, 9, 2, 64, 8, 8, 0, 1, 4)};
  auto tolerance = [&](const HostTensor& ref) {
    const double m = max_abs(ref.values());
    return dtype == KernelDtype::F32 ? 2e-6 * std::max(1.0, m) : m / 128;
  };
  for (const RopePackShape& s : shapes) {
    CAPTURE(to_string(dtype), s.heads, s.head_dim, s.ranks, s.stage_heads, s.head_repeat);
    const auto pos = positions_for(s, 2'000'000);
    const size_t n_send = static_cast<size_t>(rope_pack_send_elements(s));
    HostTensor x = random_tensor(dtype, input_elements(s), 41), g = random_tensor(dtype, n_send, 42);
    HostTensor send_ref(dtype, n_send), dx_ref = random_tensor(dtype, x.size, 43);
    HostTensor dx_start = dx_ref;
    rope_pack_forward_reference(dtype, x.data(), pos.data(), nullptr, 500000.0, s, send_ref.data());
    rope_pack_backward_reference(dtype, g.data(), pos.data(), nullptr, 500000.0, s, dx_ref.data(), true);

    DeviceBuffer xd = to_device(x), gd = to_device(g), posd = to_device(pos), dxd = to_device(dx_start);
    DeviceBuffer sendd(n_send * dtype_bytes(dtype));
    rope_pack_forward(dtype, xd.get(), posd.as<int64_t>(), nullptr, 500000.0, s, sendd.get(), nullptr);
    rope_pack_backward(dtype, gd.get(), posd.as<int64_t>(), nullptr, 500000.0, s, dxd.get(), true, nullptr);
    CHECK(max_abs_diff(to_host(sendd, dtype, n_send).values(), send_ref.values()) <= tolerance(send_ref));
    CHECK(max_abs_diff(to_host(dxd, dtype, x.size).values(), dx_ref.values()) <= tolerance(dx_ref));
  }
}
