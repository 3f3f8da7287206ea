// CPU reference of the fused linear + cross-entropy: untiled plain loops with fp64 accumulation over
// the whole vocabulary, the definition the tiled GPU kernel is checked against.
// defines: linear_cross_entropy_reference
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/linear_cross_entropy.h"

namespace odyssey::kernels {

void linear_cross_entropy_reference(KernelDtype dtype, const void* hidden, const void* weight, const int64_t* labels,
                                    int64_t tokens, int64_t dim, int64_t vocab, float grad_scale, float* loss,
                                    void* dhidden, float* dweight) {
  require(tokens > 0 && dim > 0 && vocab > 0, "linear_cross_entropy_reference: tokens = " + std::to_string(tokens) +
                                                  ", dim = " + std::to_string(dim) +
                                                  ", vocab = " + std::to_string(vocab) + " must be positive");
  std::vector<double> logits(static_cast<size_t>(vocab));
  std::vector<double> dh(static_cast<size_t>(dim));
  std::vector<double> dw_sum(dweight ? static_cast<size_t>(vocab * dim) : 0, 0.0);  // fp64 over all tokens
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t label = labels[t];
    require(label == kIgnoreIndex || (label >= 0 && label < vocab),
            "linear_cross_entropy_reference: labels[" + std::to_string(t) + "] = " + std::to_string(label) +
                " must be in [0, " + std::to_string(vocab) + ") or " + std::to_string(kIgnoreIndex));
    const size_t h_row = static_cast<size_t>(t * dim);
    double max_logit = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      double dot = 0.0;
      for (int64_t k = 0; k < dim; ++k) {
        dot += load_element(hidden, dtype, h_row + k) * load_element(weight, dtype, static_cast<size_t>(v * dim + k));
      }
      logits[static_cast<size_t>(v)] = dot;
      max_logit = std::max(max_logit, dot);
    }
    double sum = 0.0;
    for (double z : logits) sum += std::exp(z - max_logit);
    const double lse = max_logit + std::log(sum);
    const bool valid = label != kIgnoreIndex;
    loss[t] = valid ? static_cast<float>(lse - logits[static_cast<size_t>(label)]) : 0.0f;
    std::fill(dh.begin(), dh.end(), 0.0);
    for (int64_t v = 0; v < vocab && valid; ++v) {
      const double g = grad_scale * (std::exp(logits[static_cast<size_t>(v)] - lse) - (v == label ? 1.0 : 0.0));
      for (int64_t k = 0; k < dim; ++k) {
        const size_t w_index = static_cast<size_t>(v * dim + k);
        dh[static_cast<size_t>(k)] += g * load_element(weight, dtype, w_index);
        if (dweight) dw_sum[w_index] += g * load_element(hidden, dtype, h_row + k);
      }
    }
    if (dhidden) {
      for (int64_t k = 0; k < dim; ++k) store_element(dhidden, dtype, h_row + k, dh[static_cast<size_t>(k)]);
    }
  }
  for (size_t i = 0; i < dw_sum.size(); ++i) dweight[i] = static_cast<float>(dweight[i] + dw_sum[i]);
}

}  // namespace odyssey::kernels
