// Device-side helpers shared by the .cu files (nvcc only): typed loads/stores that convert to and
// from fp32, and warp/block reductions in fp32.
// defines: Bf16, load_f32, store_f32, warp_sum, warp_max, block_sum, block_max, kWarpSize, all_aligned_16,
//          grid_stride_blocks
#pragma once

#include <cuda_bf16.h>
#include <initializer_list>
#include <cuda_runtime.h>

#include "kernels/kernel_common.h"

namespace odyssey::kernels::device {

using Bf16 = __nv_bfloat16;
constexpr int kWarpSize = 32;

__device__ __forceinline__ float load_f32(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const Bf16* p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store_f32(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f32(Bf16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
/// `scratch` holds 32 floats of shared memory; the fixed tree makes the result deterministic.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

/// Maximum over the block, as block_sum.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace odyssey::kernels::device

namespace odyssey::kernels::device {

/// Loads kVec consecutive elements starting at p[i] into fp32 registers. When kVec * sizeof(T) is
/// 16 the caller guarantees 16-byte alignment and one 128-bit load is issued.
template <typename T, int kVec>
__device__ __forceinline__ void load_vec(const T* p, size_t i, float (&out)[kVec]) {
  if constexpr (kVec * sizeof(T) == 16) {
    uint4 raw = *reinterpret_cast<const uint4*>(p + i);
    const T* elems = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[k] = load_f32(elems, k);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[k] = load_f32(p, i + k);
  }
}

/// Stores kVec fp32 values (rounded to T) at p[i..i+kVec), one 128-bit store when possible.
template <typename T, int kVec>
__device__ __forceinline__ void store_vec(T* p, size_t i, const float (&in)[kVec]) {
  if constexpr (kVec * sizeof(T) == 16) {
    uint4 raw;
    T* elems = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int k = 0; k < kVec; ++k) store_f32(elems, k, in[k]);
    *reinterpret_cast<uint4*>(p + i) = raw;
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) store_f32(p, i + k, in[k]);
  }
}

/// True when p is aligned to `bytes`.
__host__ __device__ inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// True when every pointer is 16-byte aligned: a 128-bit vector path may take them all.
inline bool all_aligned_16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (!is_aligned(p, 16)) return false;
  return true;
}

/// Blocks of `threads` for a grid-stride loop over `items` work items: one item a thread, at least
/// one block and at most 65535 (enough to fill the device several times over; the loop takes the
/// rest).
inline int grid_stride_blocks(int64_t items, int threads) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<int>(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
}

}  // namespace odyssey::kernels::device
