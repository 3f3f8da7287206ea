// SwiGLU's elementwise pass: the CPU reference against hand-computed values and finite differences
// (everywhere), and the CUDA kernels against the reference, in place and unaligned ([.cuda]).
#include <catch2/catch.hpp>

#include <cmath>

#include "kernel_test_support.h"
#include "kernels/swiglu.h"

using namespace odyssey::kernels;
using namespace odyssey::kernels::test;

namespace {

double silu(double g) { return g / (1.0 + std::exp(-g)); }

/// sum_i dh_i * silu(g_i) * u_i in fp64: the scalar whose gradient the backward gives.
double weighted_output(const std::vector<double>& g, const std::vector<double>& u, const std::vector<double>& dh) {
  double total = 0.0;
  for (size_t i = 0; i < g.size(); ++i) total += dh[i] * silu(g[i]) * u[i];
  return total;
}

}  // namespace

TEST_CASE("swiglu reference matches hand-computed values", "[kernels][swiglu]") {
  // gate 0: silu 0, so h = 0, d up = 0 and d gate = dh * up * silu'(0) = dh * up / 2.
  // gate 2, up 3: silu(2) = 2 / (1 + e^-2).
  std::vector<float> gate = {0.0f, 2.0f}, up = {5.0f, 3.0f}, dh = {1.0f, 1.0f}, h(2), d_gate(2), d_up(2);
  swiglu_forward_reference(KernelDtype::F32, gate.data(), up.data(), h.data(), 2);
  CHECK(h[0] == 0.0f);
  CHECK(h[1] == Approx(3.0 * 2.0 / (1.0 + std::exp(-2.0))).epsilon(1e-7));
  swiglu_backward_reference(KernelDtype::F32, dh.data(), gate.data(), up.data(), d_gate.data(), d_up.data(), 2);
  CHECK(d_up[0] == 0.0f);
  CHECK(d_gate[0] == Approx(2.5).epsilon(1e-7));
  CHECK(d_up[1] == Approx(silu(2.0)).epsilon(1e-7));
  CHECK_THROWS_WITH(swiglu_forward_reference(KernelDtype::F32, nullptr, nullptr, nullptr, -1),
                    Catch::Contains("n = -1"));
}

TEST_CASE("swiglu reference backward equals finite differences of silu(gate) * up", "[kernels][swiglu]") {
  const size_t n = 40;
  HostTensor gate = random_tensor(KernelDtype::F32, n, 1, 3.0), up = random_tensor(KernelDtype::F32, n, 2),
             dh = random_tensor(KernelDtype::F32, n, 3);
  HostTensor d_gate(KernelDtype::F32, n), d_up(KernelDtype::F32, n);
  swiglu_backward_reference(KernelDtype::F32, dh.data(), gate.data(), up.data(), d_gate.data(), d_up.data(),
                            static_cast<int64_t>(n));
  const std::vector<double> g = gate.values(), u = up.values(), dy = dh.values();
  const double step = 1e-6;
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> plus = g, minus = g;
    plus[i] += step;
    minus[i] -= step;
    const double numeric_gate = (weighted_output(plus, u, dy) - weighted_output(minus, u, dy)) / (2 * step);
    plus = u;
    minus = u;
    plus[i] += step;
    minus[i] -= step;
    const double numeric_up = (weighted_output(g, plus, dy) - weighted_output(g, minus, dy)) / (2 * step);
    // fp32 results of a few roundings (about 1e-7 relative) against fp64 differences
    CHECK(d_gate.at(i) == Approx(numeric_gate).margin(1e-5).epsilon(1e-5));
    CHECK(d_up.at(i) == Approx(numeric_up).margin(1e-5).epsilon(1e-5));
  }
}

TEST_CASE("swiglu bf16 reference rounds silu(gate) before the product, as the eager ops store it",
          "[kernels][swiglu]") {
  // gate 1.3 rounds to bf16 1.296875; silu of it is 1.01845, stored as bf16 1.015625; times up = 3
  // that is 3.046875 exactly, a bf16 (the unrounded 3.05534 would round to 3.0625).
  HostTensor gate(KernelDtype::BF16, 1), up(KernelDtype::BF16, 1), h(KernelDtype::BF16, 1);
  gate.set(0, 1.3);
  up.set(0, 3.0);
  REQUIRE(gate.at(0) == 1.296875);
  const double act = silu(gate.at(0));
  REQUIRE(bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(act))) == 1.015625);
  swiglu_forward_reference(KernelDtype::BF16, gate.data(), up.data(), h.data(), 1);
  CHECK(h.at(0) == 3.046875);
  CHECK(bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(act * 3.0))) == 3.0625);
}

TEST_CASE("swiglu kernels match the CPU reference, in place and unaligned", "[kernels][swiglu][.cuda]") {
  // Tolerances: the kernel computes silu with expf in fp32 (a few fp32 ulps from the fp64
  // reference); a bf16 intermediate on a rounding boundary can then round one bf16 ulp apart
  // (2^-8 relative), which the product carries: fp32 within 1e-5 and bf16 within 1/64 of the
  // largest value, as the RMSNorm kernels' tests. In place equals out of place bit for bit.
  const auto dtype = GENERATE(KernelDtype::F32, KernelDtype::BF16);
  const auto n = GENERATE(as<int64_t>{}, 1, 7, 4096, 1000003);
  const auto offset = GENERATE(as<int64_t>{}, 0, 1);  // one element in: pointers off 16-byte alignment
  CAPTURE(to_string(dtype), n, offset);
  const double tol = dtype == KernelDtype::F32 ? 1e-5 : 1.0 / 64;
  const size_t count = static_cast<size_t>(n + offset), bytes = count * dtype_bytes(dtype);
  const size_t skip = static_cast<size_t>(offset) * dtype_bytes(dtype);
  HostTensor gate = random_tensor(dtype, count, 21, 3.0), up = random_tensor(dtype, count, 22),
             dh = random_tensor(dtype, count, 23);
  HostTensor h_ref(dtype, count), dg_ref(dtype, count), du_ref(dtype, count);
  swiglu_forward_reference(dtype, gate.data(), up.data(), h_ref.data(), static_cast<int64_t>(count));
  swiglu_backward_reference(dtype, dh.data(), gate.data(), up.data(), dg_ref.data(), du_ref.data(),
                            static_cast<int64_t>(count));

  DeviceBuffer g_d = to_device(gate), u_d = to_device(up), dh_d = to_device(dh);
  DeviceBuffer h_d(bytes), dg_d(bytes), du_d(bytes);
  auto at = [&](const DeviceBuffer& b) { return static_cast<char*>(b.get()) + skip; };
  swiglu_forward(dtype, at(g_d), at(u_d), at(h_d), n, nullptr);
  swiglu_backward(dtype, at(dh_d), at(g_d), at(u_d), at(dg_d), at(du_d), n, nullptr);
  auto tail = [&](const HostTensor& t) {
    const std::vector<double> v = t.values();
    return std::vector<double>(v.begin() + offset, v.end());  // the elements the kernel wrote
  };
  const HostTensor h = to_host(h_d, dtype, count), dg = to_host(dg_d, dtype, count), du = to_host(du_d, dtype, count);
  CHECK(max_abs_diff(tail(h), tail(h_ref)) <= tol * max_abs(tail(h_ref)));
  CHECK(max_abs_diff(tail(dg), tail(dg_ref)) <= tol * max_abs(tail(dg_ref)));
  CHECK(max_abs_diff(tail(du), tail(du_ref)) <= tol * max_abs(tail(du_ref)));

  // In place: the product into gate's memory, then the gradients into gate's and up's.
  DeviceBuffer g_in = to_device(gate), u_in = to_device(up);
  swiglu_forward(dtype, at(g_in), at(u_in), at(g_in), n, nullptr);
  CHECK(tail(to_host(g_in, dtype, count)) == tail(h));
  DeviceBuffer g_in2 = to_device(gate);
  swiglu_backward(dtype, at(dh_d), at(g_in2), at(u_in), at(g_in2), at(u_in), n, nullptr);
  CHECK(tail(to_host(g_in2, dtype, count)) == tail(dg));
  CHECK(tail(to_host(u_in, dtype, count)) == tail(du));
  CHECK_THROWS_WITH(swiglu_backward(dtype, at(dh_d), at(g_d), at(u_d), at(dg_d), at(dg_d), n, nullptr),
                    Catch::Contains("the same buffer"));
}
