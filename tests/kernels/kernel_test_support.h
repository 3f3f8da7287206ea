// Helpers shared by the kernel tests: deterministic random host data in fp32/bf16, error measures,
// and (for the [.cuda] cases) an RAII device buffer with host<->device copies.
// defines: HostTensor, random_tensor, max_abs_diff, max_abs, DeviceBuffer, to_device, to_host
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernel_common.h"

namespace odyssey::kernels::test {

/// Host data of `dtype` stored as raw bytes (fp32 words or bf16 bit patterns).
struct HostTensor {
  KernelDtype dtype = KernelDtype::F32;
  size_t size = 0;
  std::vector<unsigned char> bytes;

  HostTensor() = default;
  HostTensor(KernelDtype d, size_t n) : dtype(d), size(n), bytes(n * dtype_bytes(d), 0) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  double at(size_t i) const { return load_element(bytes.data(), dtype, i); }
  void set(size_t i, double v) { store_element(bytes.data(), dtype, i, v); }
  std::vector<double> values() const {
    std::vector<double> out(size);
    for (size_t i = 0; i < size; ++i) out[i] = at(i);
    return out;
  }
};

/// Normal(mean, stddev) values rounded to dtype, reproducible from `seed`.
inline HostTensor random_tensor(KernelDtype dtype, size_t n, uint32_t seed, double stddev = 1.0, double mean = 0.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(mean, stddev);
  HostTensor t(dtype, n);
  for (size_t i = 0; i < n; ++i) t.set(i, dist(rng));
  return t;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

inline double max_abs(const std::vector<double>& a) {
  double worst = 0.0;
  for (double v : a) worst = std::max(worst, std::abs(v));
  return worst;
}

inline std::vector<double> as_doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// Device memory owned by a test ([.cuda] cases only).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { ODYSSEY_CUDA_CHECK(cudaMalloc(&ptr_, bytes ? bytes : 1)); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) { other.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

inline void copy_to_device(DeviceBuffer& dst, const void* src, size_t bytes) {
  ODYSSEY_CUDA_CHECK(cudaMemcpy(dst.get(), src, bytes, cudaMemcpyHostToDevice));
}

inline void copy_to_host(void* dst, const DeviceBuffer& src, size_t bytes) {
  ODYSSEY_CUDA_CHECK(cudaDeviceSynchronize());
  ODYSSEY_CUDA_CHECK(cudaMemcpy(dst, src.get(), bytes, cudaMemcpyDeviceToHost));
}

inline DeviceBuffer to_device(const HostTensor& t) {
  DeviceBuffer d(t.bytes.size());
  copy_to_device(d, t.data(), t.bytes.size());
  return d;
}

template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer d(v.size() * sizeof(T));
  copy_to_device(d, v.data(), v.size() * sizeof(T));
  return d;
}

inline HostTensor to_host(const DeviceBuffer& d, KernelDtype dtype, size_t n) {
  HostTensor t(dtype, n);
  copy_to_host(t.data(), d, t.bytes.size());
  return t;
}

template <typename T>
std::vector<T> to_host_vector(const DeviceBuffer& d, size_t n) {
  std::vector<T> v(n);
  copy_to_host(v.data(), d, n * sizeof(T));
  return v;
}

}  // namespace odyssey::kernels::test
