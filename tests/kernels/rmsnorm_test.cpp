// RMSNorm: the CPU reference against hand-computed values and finite differences of the naive
// formula (everywhere), and the CUDA kernels against the reference on random data ([.cuda]).
#include <catch2/catch.hpp>

#include "kernels/rmsnorm.h"
#include "kernel_test_support.h"

using namespace odyssey::kernels;
using namespace odyssey::kernels::test;

namespace {

// Naive formula in fp64: L = sum_ij dy_ij * y_ij with y = x * w / sqrt(mean(x^2) + eps).
double weighted_output(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy,
                       int64_t rows, int64_t dim, double eps) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < dim; ++j) ss += x[r * dim + j] * x[r * dim + j];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t j = 0; j < dim; ++j) total += dy[r * dim + j] * x[r * dim + j] * inv * w[j];
  }
  return total;
}

}  // namespace

TEST_CASE("rmsnorm reference matches hand-computed values", "[kernels][rmsnorm]") {
  // Row [3, 4]: mean square 12.5, rstd = 1/sqrt(12.5); weight [1, 2].
  std::vector<float> x = {3.0f, 4.0f}, w = {1.0f, 2.0f}, y(2), rstd(1);
  rmsnorm_forward_reference(KernelDtype::F32, x.data(), w.data(), y.data(), rstd.data(), 1, 2, 0.0f);
  const double r = 1.0 / std::sqrt(12.5);
  CHECK(rstd[0] == Approx(r).epsilon(1e-7));
  CHECK(y[0] == Approx(3.0 * r).epsilon(1e-7));
  CHECK(y[1] == Approx(8.0 * r).epsilon(1e-7));
  // eps enters under the root: an all-zero row gives rstd = 1/sqrt(eps) and y = 0.
  std::vector<float> zeros = {0.0f, 0.0f};
  rmsnorm_forward_reference(KernelDtype::F32, zeros.data(), w.data(), y.data(), rstd.data(), 1, 2, 1e-4f);
  CHECK(rstd[0] == Approx(100.0).epsilon(1e-6));
  CHECK(y[0] == 0.0f);
}

TEST_CASE("rmsnorm reference backward equals finite differences of the formula", "[kernels][rmsnorm]") {
  const int64_t rows = 3, dim = 5;
  const float eps = 1e-5f;
  HostTensor x = random_tensor(KernelDtype::F32, rows * dim, 1), w = random_tensor(KernelDtype::F32, dim, 2, 0.5, 1.0);
  HostTensor dy = random_tensor(KernelDtype::F32, rows * dim, 3);
  std::vector<float> rstd(rows);
  HostTensor y(KernelDtype::F32, rows * dim), dx(KernelDtype::F32, rows * dim), dw(KernelDtype::F32, dim);
  rmsnorm_forward_reference(KernelDtype::F32, x.data(), w.data(), y.data(), rstd.data(), rows, dim, eps);
  rmsnorm_backward_reference(KernelDtype::F32, dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows,
                             dim);

  std::vector<double> xv = x.values(), wv = w.values(), dyv = dy.values();
  const double h = 1e-6;
  for (int64_t i = 0; i < rows * dim; ++i) {
    std::vector<double> plus = xv, minus = xv;
    plus[i] += h;
    minus[i] -= h;
    const double numeric =
        (weighted_output(plus, wv, dyv, rows, dim, eps) - weighted_output(minus, wv, dyv, rows, dim, eps)) / (2 * h);
    CHECK(dx.at(i) == Approx(numeric).margin(1e-5).epsilon(1e-4));
  }
  for (int64_t j = 0; j < dim; ++j) {
    std::vector<double> plus = wv, minus = wv;
    plus[j] += h;
    minus[j] -= h;
    const double numeric =
        (weighted_output(xv, plus, dyv, rows, dim, eps) - weighted_output(xv, minus, dyv, rows, dim, eps)) / (2 * h);
    CHECK(dw.at(j) == Approx(numeric).margin(1e-5).epsilon(1e-4));
  }
}

TEST_CASE("rmsnorm bf16 reference is the fp32 result rounded to bf16", "[kernels][rmsnorm]") {
  const int64_t rows = 4, dim = 16;
  HostTensor x16 = random_tensor(KernelDtype::BF16, rows * dim, 4), w16 = random_tensor(KernelDtype::BF16, dim, 5);
  HostTensor x32(KernelDtype::F32, rows * dim), w32(KernelDtype::F32, dim);
  for (size_t i = 0; i < x16.size; ++i) x32.set(i, x16.at(i));
  for (size_t i = 0; i < w16.size; ++i) w32.set(i, w16.at(i));
  HostTensor y16(KernelDtype::BF16, rows * dim), y32(KernelDtype::F32, rows * dim);
  std::vector<float> r16(rows), r32(rows);
  rmsnorm_forward_reference(KernelDtype::BF16, x16.data(), w16.data(), y16.data(), r16.data(), rows, dim, 1e-5f);
  rmsnorm_forward_reference(KernelDtype::F32, x32.data(), w32.data(), y32.data(), r32.data(), rows, dim, 1e-5f);
  CHECK(r16 == r32);
  for (size_t i = 0; i < y16.size; ++i) {
    CHECK(y16.at(i) == bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(y32.at(i)))));
  }
}

TEST_CASE("rmsnorm backward partition is a fixed function of rows", "[kernels][rmsnorm]") {
  CHECK(rmsnorm_backward_partials(1) == 1);
  CHECK(rmsnorm_backward_partials(100) == 100);
  CHECK(rmsnorm_backward_partials(131072) == 256);
  CHECK(rmsnorm_backward_workspace_bytes(131072, 2048) == 256u * 2048u * 4u);
  CHECK_THROWS_WITH(rmsnorm_forward_reference(KernelDtype::F32, nullptr, nullptr, nullptr, nullptr, 0, 4, 1e-5f),
                    Catch::Contains("rows = 0"));
}

TEST_CASE("rmsnorm kernels match the CPU reference", "[kernels][rmsnorm][.cuda]") {
  // Tolerances: fp32 outputs within 2e-5 of the fp64 reference (relative to the largest value);
  // bf16 within 2 bf16 ulps (relative 1/64) since kernel and reference round separately.
  const auto dtype = GENERATE(KernelDtype::F32, KernelDtype::BF16);
  const auto rows = GENERATE(as<int64_t>{}, 1, 7, 300, 1000);
  const auto dim = GENERATE(as<int64_t>{}, 64, 100, 2048, 4096);
  CAPTURE(to_string(dtype), rows, dim);
  const double tol = dtype == KernelDtype::F32 ? 2e-5 : 1.0 / 64;
  const size_t n = static_cast<size_t>(rows * dim);
  HostTensor x = random_tensor(dtype, n, 11), w = random_tensor(dtype, dim, 12, 0.2, 1.0),
             dy = random_tensor(dtype, n, 13);
  HostTensor y_ref(dtype, n), dx_ref(dtype, n), dw_ref(dtype, dim);
  std::vector<float> rstd_ref(rows);
  rmsnorm_forward_reference(dtype, x.data(), w.data(), y_ref.data(), rstd_ref.data(), rows, dim, 1e-5f);
  rmsnorm_backward_reference(dtype, dy.data(), x.data(), w.data(), rstd_ref.data(), dx_ref.data(), dw_ref.data(), rows,
                             dim);

  DeviceBuffer dx_d = to_device(x), dw_d = to_device(w), ddy = to_device(dy);
  DeviceBuffer dy_out(n * dtype_bytes(dtype)), drstd(rows * sizeof(float)), ddx(n * dtype_bytes(dtype));
  DeviceBuffer ddw(dim * dtype_bytes(dtype)), ws(rmsnorm_backward_workspace_bytes(rows, dim));
  rmsnorm_forward(dtype, dx_d.get(), dw_d.get(), dy_out.get(), drstd.as<float>(), rows, dim, 1e-5f, nullptr);
  rmsnorm_backward(dtype, ddy.get(), dx_d.get(), dw_d.get(), drstd.as<float>(), ddx.get(), ddw.get(), ws.as<float>(),
                   rows, dim, nullptr);

  const auto y = to_host(dy_out, dtype, n).values(), dx = to_host(ddx, dtype, n).values();
  const auto dw = to_host(ddw, dtype, dim).values();
  const auto rstd = as_doubles(to_host_vector<float>(drstd, rows));
  CHECK(max_abs_diff(rstd, as_doubles(rstd_ref)) <= 1e-5 * max_abs(as_doubles(rstd_ref)));
  CHECK(max_abs_diff(y, y_ref.values()) <= tol * max_abs(y_ref.values()));
  CHECK(max_abs_diff(dx, dx_ref.values()) <= tol * max_abs(dx_ref.values()));
  CHECK(max_abs_diff(dw, dw_ref.values()) <= tol * max_abs(dw_ref.values()) * 4);  // sums over rows

  // Determinism: a second backward gives bit-identical dweight.
  HostTensor first = to_host(ddw, dtype, dim);
  rmsnorm_backward(dtype, ddy.get(), dx_d.get(), dw_d.get(), drstd.as<float>(), ddx.get(), ddw.get(), ws.as<float>(),
                   rows, dim, nullptr);
  CHECK(to_host(ddw, dtype, dim).bytes == first.bytes);

  // The statistics alone (the Untied input norm's): the forward's rstd bit for bit, the same
  // reduction over the same vectors of x (weight and output were aligned allocations here too).
  DeviceBuffer drstd_only(rows * sizeof(float));
  rmsnorm_rstd(dtype, dx_d.get(), drstd_only.as<float>(), rows, dim, 1e-5f, nullptr);
  CHECK(to_host_vector<float>(drstd_only, rows) == to_host_vector<float>(drstd, rows));
}

TEST_CASE("rmsnorm kernels refuse bad shapes with the values", "[kernels][rmsnorm][.cuda]") {
  DeviceBuffer buf(64);
  CHECK_THROWS_WITH(rmsnorm_backward(KernelDtype::F32, buf.get(), buf.get(), buf.get(), buf.as<float>(), buf.get(),
                                     buf.get(), buf.as<float>(), 1, kRmsNormMaxDim + 1, nullptr),
                    Catch::Contains("dim = 49153"));
  CHECK_THROWS_WITH(
      rmsnorm_forward(KernelDtype::F32, buf.get(), nullptr, buf.get(), buf.as<float>(), 1, 4, 1e-5f, nullptr),
      Catch::Contains("null"));
  CHECK_THROWS_WITH(rmsnorm_rstd(KernelDtype::F32, buf.get(), nullptr, 1, 4, 1e-5f, nullptr), Catch::Contains("null"));
  CHECK_THROWS_WITH(rmsnorm_rstd(KernelDtype::F32, buf.get(), buf.as<float>(), 0, 4, 1e-5f, nullptr),
                    Catch::Contains("rows = 0"));
}
