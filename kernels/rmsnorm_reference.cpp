// CPU reference of RMSNorm forward/backward: plain loops, fp64 accumulation, results rounded to the
// kernel's dtype. Used by kernel_tests to check the formula and, on a GPU, the kernels.
// defines: rmsnorm_forward_reference, rmsnorm_backward_reference
#include <cmath>
#include <vector>

#include "kernels/rmsnorm.h"

namespace odyssey::kernels {

void rmsnorm_forward_reference(KernelDtype dtype, const void* x, const void* weight, void* y, float* rstd, int64_t rows,
                               int64_t dim, float eps) {
  require(rows > 0 && dim > 0, "rmsnorm_forward_reference: rows = " + std::to_string(rows) +
                                   ", dim = " + std::to_string(dim) + " must both be positive");
  for (int64_t r = 0; r < rows; ++r) {
    const size_t base = static_cast<size_t>(r * dim);
    double sum_sq = 0.0;
    for (int64_t j = 0; j < dim; ++j) {
      const double v = load_element(x, dtype, base + j);
      sum_sq += v * v;
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + static_cast<double>(eps));
    rstd[r] = static_cast<float>(inv_rms);
    for (int64_t j = 0; j < dim; ++j) {
      store_element(y, dtype, base + j, load_element(x, dtype, base + j) * inv_rms * load_element(weight, dtype, j));
    }
  }
}

void rmsnorm_backward_reference(KernelDtype dtype, const void* dy, const void* x, const void* weight, const float* rstd,
                                void* dx, void* dweight, int64_t rows, int64_t dim) {
  require(rows > 0 && dim > 0, "rmsnorm_backward_reference: rows = " + std::to_string(rows) +
                                   ", dim = " + std::to_string(dim) + " must both be positive");
  std::vector<double> dweight_sum(static_cast<size_t>(dim), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const size_t base = static_cast<size_t>(r * dim);
    const double inv_rms = rstd[r];
    double dot = 0.0;  // sum_j dy_j * w_j * x_j
    for (int64_t j = 0; j < dim; ++j) {
      dot += load_element(dy, dtype, base + j) * load_element(weight, dtype, j) * load_element(x, dtype, base + j);
    }
    const double c = dot * inv_rms * inv_rms * inv_rms / static_cast<double>(dim);
    for (int64_t j = 0; j < dim; ++j) {
      const double dyv = load_element(dy, dtype, base + j);
      const double xv = load_element(x, dtype, base + j);
      store_element(dx, dtype, base + j, inv_rms * dyv * load_element(weight, dtype, j) - xv * c);
      dweight_sum[static_cast<size_t>(j)] += dyv * xv * inv_rms;
    }
  }
  for (int64_t j = 0; j < dim; ++j) store_element(dweight, dtype, j, dweight_sum[static_cast<size_t>(j)]);
}

}  // namespace odyssey::kernels
