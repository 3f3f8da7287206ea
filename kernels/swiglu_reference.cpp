// CPU reference of the SwiGLU elementwise pass: plain loops in fp64, rounded to the kernel's dtype
// where the kernel (and ATen's eager silu and mul) round. Used by kernel_tests everywhere and, on a
// GPU, against the kernels. defines: swiglu_forward_reference, swiglu_backward_reference
#include <cmath>
#include <string>

#include "kernels/swiglu.h"

namespace odyssey::kernels {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// `value` rounded to dtype and read back (fp32 or bf16), as a stored intermediate is.
double rounded(KernelDtype dtype, double value) {
  unsigned char word[4];
  store_element(word, dtype, 0, value);
  return load_element(word, dtype, 0);
}

void check_count(int64_t n, const char* op) {
  require(n >= 0, std::string(op) + ": n = " + std::to_string(n) + " elements; expected 0 or more");
}

}  // namespace

void swiglu_forward_reference(KernelDtype dtype, const void* gate, const void* up, void* h, int64_t n) {
  check_count(n, "swiglu_forward_reference");
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    const double g = load_element(gate, dtype, k);
    const double act = rounded(dtype, g * sigmoid(g));  // silu(gate), stored in dtype by the eager op
    store_element(h, dtype, k, act * load_element(up, dtype, k));
  }
}

void swiglu_backward_reference(KernelDtype dtype, const void* dh, const void* gate, const void* up, void* d_gate,
                               void* d_up, int64_t n) {
  check_count(n, "swiglu_backward_reference");
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    const double g = load_element(gate, dtype, k), u = load_element(up, dtype, k), dy = load_element(dh, dtype, k);
    const double s = sigmoid(g);
    const double act = rounded(dtype, g * s);                            // silu(gate)
    const double d_act = rounded(dtype, dy * u);                         // d silu(gate) = dh * up
    store_element(d_up, dtype, k, dy * act);                             // d up = dh * silu(gate)
    store_element(d_gate, dtype, k, d_act * s * (1.0 + g * (1.0 - s)));  // silu'(gate) d silu(gate)
  }
}

}  // namespace odyssey::kernels
