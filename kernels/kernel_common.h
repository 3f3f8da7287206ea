// Shared vocabulary of the CUDA kernels and their CPU references: element types, errors, bf16
// conversion on the host, and the CUDA error check. Plain C++ (g++ and nvcc); no LibTorch.
// defines: to_string(KernelDtype), bf16_bits_to_float, float_to_bf16_bits,
//          load_element, store_element, check_cuda, ODYSSEY_CUDA_CHECK, ODYSSEY_HD
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/kernel_host.h"

#if defined(__CUDACC__)
#define ODYSSEY_HD __host__ __device__
#else
#define ODYSSEY_HD
#endif

namespace odyssey::kernels {

const char* to_string(KernelDtype dtype);

/// Throws KernelError("<what>: <cuda error text> (<file>:<line>)") when `status` is not success.
void check_cuda(cudaError_t status, const char* what, const char* file, int line);

#define ODYSSEY_CUDA_CHECK(expr) ::odyssey::kernels::check_cuda((expr), #expr, __FILE__, __LINE__)

// --- bf16 on the host ----------------------------------------------------------------------
// bf16 is the top 16 bits of an IEEE fp32; rounding is to nearest, ties to even (as __float2bfloat16).

inline float bf16_bits_to_float(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

inline uint16_t float_to_bf16_bits(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((word >> 16) | 0x0040u);  // quiet NaN stays NaN
  }
  uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>((word + rounding) >> 16);
}

/// Reads element `index` of a buffer of `dtype` as double (CPU references).
inline double load_element(const void* data, KernelDtype dtype, size_t index) {
  if (dtype == KernelDtype::F32) return static_cast<const float*>(data)[index];
  return bf16_bits_to_float(static_cast<const uint16_t*>(data)[index]);
}

/// Writes `value` (rounded to `dtype`) to element `index` (CPU references).
inline void store_element(void* data, KernelDtype dtype, size_t index, double value) {
  if (dtype == KernelDtype::F32) {
    static_cast<float*>(data)[index] = static_cast<float>(value);
  } else {
    static_cast<uint16_t*>(data)[index] = float_to_bf16_bits(static_cast<float>(value));
  }
}

}  // namespace odyssey::kernels
