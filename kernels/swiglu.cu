// SwiGLU's elementwise kernels: h = silu(gate) * up forward, d gate and d up backward, one pass each
// over 128-bit vectors (a scalar tail, or scalar throughout where a pointer is not 16-byte aligned).
// fp32 arithmetic with ATen's formulas, rounded where ATen's eager silu and mul round.
// Test:  build/bin/kernel_tests "[swiglu]" (CPU reference) and "[swiglu][.cuda]" on a GPU.
// Bench: build/bin/odyssey_kernel_bench swiglu (bandwidth vs the device's copy bandwidth).
// defines: swiglu_forward, swiglu_backward
#include <initializer_list>
#include <string>

#include "kernels/kernel_device.cuh"
#include "kernels/swiglu.h"

namespace odyssey::kernels {
namespace {

using device::Bf16;
constexpr int kThreads = 256;

/// `v` rounded to T and read back: a stored intermediate of the eager ops (identity for fp32).
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (sizeof(T) == 2) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

/// ATen's silu (x / (1 + exp(-x)) in fp32), rounded to T as the eager op stores it.
template <typename T>
__device__ __forceinline__ float silu_as_stored(float g) {
  return round_to<T>(g / (1.0f + expf(-g)));
}

template <typename T, int kVec>
__global__ void swiglu_forward_kernel(const T* gate, const T* up, T* h, int64_t n) {
  const int64_t n_vec = n / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = first; v < n_vec; v += stride) {
    float g[kVec], u[kVec], out[kVec];
    device::load_vec<T, kVec>(gate, v * kVec, g);
    device::load_vec<T, kVec>(up, v * kVec, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[k] = silu_as_stored<T>(g[k]) * u[k];
    device::store_vec<T, kVec>(h, v * kVec, out);  // h may be gate: this thread read its elements above
  }
  for (int64_t i = n_vec * kVec + first; i < n; i += stride)
    device::store_f32(h, i, silu_as_stored<T>(device::load_f32(gate, i)) * device::load_f32(up, i));
}

/// d up = dh * silu(gate); d gate = silu'(gate) * round(dh * up), ATen's silu_backward formula.
template <typename T>
__device__ __forceinline__ void swiglu_gradients(float dy, float g, float u, float& d_gate, float& d_up) {
  const float s = 1.0f / (1.0f + expf(-g));
  d_up = dy * silu_as_stored<T>(g);
  const float d_act = round_to<T>(dy * u);
  d_gate = d_act * s * (1.0f + g * (1.0f - s));
}

template <typename T, int kVec>
__global__ void swiglu_backward_kernel(const T* dh, const T* gate, const T* up, T* d_gate, T* d_up, int64_t n) {
  const int64_t n_vec = n / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = first; v < n_vec; v += stride) {
    float dy[kVec], g[kVec], u[kVec], dg[kVec], du[kVec];
    device::load_vec<T, kVec>(dh, v * kVec, dy);
    device::load_vec<T, kVec>(gate, v * kVec, g);
    device::load_vec<T, kVec>(up, v * kVec, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) swiglu_gradients<T>(dy[k], g[k], u[k], dg[k], du[k]);
    device::store_vec<T, kVec>(d_gate, v * kVec, dg);  // may be gate, may be up: read above
    device::store_vec<T, kVec>(d_up, v * kVec, du);
  }
  for (int64_t i = n_vec * kVec + first; i < n; i += stride) {
    float dg, du;
    swiglu_gradients<T>(device::load_f32(dh, i), device::load_f32(gate, i), device::load_f32(up, i), dg, du);
    device::store_f32(d_gate, i, dg);
    device::store_f32(d_up, i, du);
  }
}

/// Blocks for n elements in vectors of `vec`.
int blocks_for(int64_t n, int vec) { return device::grid_stride_blocks((n + vec - 1) / vec, kThreads); }

void check_args(int64_t n, std::initializer_list<const void*> pointers, const char* op) {
  require(n >= 0, std::string(op) + ": n = " + std::to_string(n) + " elements; expected 0 or more");
  if (n == 0) return;
  for (const void* p : pointers)
    require(p != nullptr, std::string(op) + ": a null pointer for " + std::to_string(n) + " elements");
}

template <typename T>
void launch_forward(const void* gate, const void* up, void* h, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const T *g = static_cast<const T*>(gate), *u = static_cast<const T*>(up);
  T* out = static_cast<T*>(h);
  if (device::all_aligned_16({gate, up, h}))
    swiglu_forward_kernel<T, kVec><<<blocks_for(n, kVec), kThreads, 0, stream>>>(g, u, out, n);
  else
    swiglu_forward_kernel<T, 1><<<blocks_for(n, 1), kThreads, 0, stream>>>(g, u, out, n);
  ODYSSEY_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_backward(const void* dh, const void* gate, const void* up, void* d_gate, void* d_up, int64_t n,
                     cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const T *dy = static_cast<const T*>(dh), *g = static_cast<const T*>(gate), *u = static_cast<const T*>(up);
  T *dg = static_cast<T*>(d_gate), *du = static_cast<T*>(d_up);
  if (device::all_aligned_16({dh, gate, up, d_gate, d_up}))
    swiglu_backward_kernel<T, kVec><<<blocks_for(n, kVec), kThreads, 0, stream>>>(dy, g, u, dg, du, n);
  else
    swiglu_backward_kernel<T, 1><<<blocks_for(n, 1), kThreads, 0, stream>>>(dy, g, u, dg, du, n);
  ODYSSEY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void swiglu_forward(KernelDtype dtype, const void* gate, const void* up, void* h, int64_t n, cudaStream_t stream) {
  check_args(n, {gate, up, h}, "swiglu_forward");
  if (n == 0) return;
  if (dtype == KernelDtype::F32)
    launch_forward<float>(gate, up, h, n, stream);
  else
    launch_forward<Bf16>(gate, up, h, n, stream);
}

void swiglu_backward(KernelDtype dtype, const void* dh, const void* gate, const void* up, void* d_gate, void* d_up,
                     int64_t n, cudaStream_t stream) {
  check_args(n, {dh, gate, up, d_gate, d_up}, "swiglu_backward");
  require(d_gate != d_up || n == 0, "swiglu_backward: d_gate and d_up are the same buffer");
  if (n == 0) return;
  if (dtype == KernelDtype::F32)
    launch_backward<float>(dh, gate, up, d_gate, d_up, n, stream);
  else
    launch_backward<Bf16>(dh, gate, up, d_gate, d_up, n, stream);
}

}  // namespace odyssey::kernels
