// RoPE fused with the head-chunk packing before the Untied Ulysses all-to-all. Forward reads one
// stage's heads of q or k [B, s, H, hd] (this rank's sequence shard), rotates them by their global
// positions (rotate-half, fp64 angles, fp32 arithmetic) and writes them straight into the rank-major
// send buffer [P, B, s, h_stage/P, hd]: no rotated copy of all heads and no permute+contiguous copy
// exist (memory reason: the stage buffer is the only new allocation). Backward applies the inverse
// rotation and scatters back into dx [B, s, H, hd], summing replicated (GQA) stage heads in order.
// Test:  build/bin/kernel_tests "[rope]" (CPU reference) and "[rope][.cuda]" on a GPU.
// Bench: build/bin/odyssey_kernel_bench rope (bytes moved per second vs the device's copy bandwidth).
// defines: rope_pack_forward, rope_pack_backward
#include <cmath>

#include "kernels/kernel_device.cuh"
#include "kernels/rope_pack.h"

namespace odyssey::kernels {
namespace {

using device::Bf16;

// cos/sin of pos * inv_freq[k] for k < half into shared memory; angles in fp64.
__device__ void rotary_table(float2* table, double pos, const float* inv_freq, double log2_theta, int64_t half) {
  for (int64_t k = threadIdx.x; k < half; k += blockDim.x) {
    const double freq = inv_freq ? static_cast<double>(inv_freq[k])
                                 : exp2(-static_cast<double>(k) / static_cast<double>(half) * log2_theta);
    double sn, c;
    sincos(pos * freq, &sn, &c);
    table[k] = make_float2(static_cast<float>(c), static_cast<float>(sn));
  }
  __syncthreads();
}

// One block per token (b, t): rotate the stage's heads and write them to their send slots.
template <typename T>
__global__ void rope_pack_forward_kernel(const T* __restrict__ x, const int64_t* __restrict__ positions,
                                         const float* __restrict__ inv_freq, double log2_theta, RopePackShape s,
                                         T* __restrict__ send) {
  extern __shared__ float2 table[];  // [half] (cos, sin)
  const int64_t token = blockIdx.x;
  const int64_t b = token / s.seq, t = token % s.seq;
  const int64_t half = s.head_dim / 2;
  rotary_table(table, static_cast<double>(positions[token]), inv_freq, log2_theta, half);
  const int64_t m = s.stage_heads / s.ranks;
  const int64_t pairs = s.stage_heads * half;
  for (int64_t n = threadIdx.x; n < pairs; n += blockDim.x) {
    const int64_t i = n / half, k = n % half;
    const int64_t p = i / m, j = i % m;
    const size_t in = static_cast<size_t>((token * s.heads + rope_pack_stage_head(s, i)) * s.head_dim);
    const size_t out = static_cast<size_t>((((p * s.batch + b) * s.seq + t) * m + j) * s.head_dim);
    const float2 cs = table[k];
    const float a = device::load_f32(x, in + k), z = device::load_f32(x, in + k + half);
    device::store_f32(send, out + k, a * cs.x - z * cs.y);
    device::store_f32(send, out + k + half, z * cs.x + a * cs.y);
  }
}

// One block per token: for each distinct input head of the stage, sum the inverse rotations of the
// head_repeat stage heads that read it (in order: deterministic, no atomics), then write or add.
template <typename T>
__global__ void rope_pack_backward_kernel(const T* __restrict__ dsend, const int64_t* __restrict__ positions,
                                          const float* __restrict__ inv_freq, double log2_theta, RopePackShape s,
                                          T* __restrict__ dx, bool accumulate) {
  extern __shared__ float2 table[];
  const int64_t token = blockIdx.x;
  const int64_t b = token / s.seq, t = token % s.seq;
  const int64_t half = s.head_dim / 2;
  rotary_table(table, static_cast<double>(positions[token]), inv_freq, log2_theta, half);
  const int64_t m = s.stage_heads / s.ranks;
  const int64_t distinct = s.stage_heads / s.head_repeat;
  for (int64_t n = threadIdx.x; n < distinct * half; n += blockDim.x) {
    const int64_t u = n / half, k = n % half;
    const float2 cs = table[k];
    float da = 0.0f, dz = 0.0f;
    for (int64_t r = 0; r < s.head_repeat; ++r) {
      const int64_t i = u * s.head_repeat + r;
      const int64_t p = i / m, j = i % m;
      const size_t g = static_cast<size_t>((((p * s.batch + b) * s.seq + t) * m + j) * s.head_dim);
      const float ga = device::load_f32(dsend, g + k), gz = device::load_f32(dsend, g + k + half);
      da += ga * cs.x + gz * cs.y;
      dz += gz * cs.x - ga * cs.y;
    }
    const size_t out = static_cast<size_t>((token * s.heads + s.head_begin + u * s.head_stride) * s.head_dim);
    if (accumulate) {
      da += device::load_f32(dx, out + k);
      dz += device::load_f32(dx, out + k + half);
    }
    device::store_f32(dx, out + k, da);
    device::store_f32(dx, out + k + half, dz);
  }
}

unsigned threads_for(int64_t work) {
  const int64_t rounded = (work + 31) / 32 * 32;
  return static_cast<unsigned>(rounded < 256 ? rounded : 256);
}

void check_launch(const RopePackShape& s, const char* op, double theta, const float* inv_freq) {
  check_rope_pack_shape(s, op);
  require(s.batch * s.seq <= 0x7fffffff,
          std::string(op) + ": batch*seq = " + std::to_string(s.batch * s.seq) + " exceeds the grid limit 2^31-1");
  require(inv_freq || theta > 1.0,
          std::string(op) + ": theta = " + std::to_string(theta) + " must exceed 1 when no inv_freq table is given");
}

}  // namespace

void rope_pack_forward(KernelDtype dtype, const void* x, const int64_t* positions, const float* inv_freq, double theta,
                       const RopePackShape& s, void* send, cudaStream_t stream) {
  check_launch(s, "rope_pack_forward", theta, inv_freq);
  require(x && positions && send, "rope_pack_forward: x, positions and send must be device pointers, got a null one");
  const double log2_theta = inv_freq ? 0.0 : std::log2(theta);
  const unsigned blocks = static_cast<unsigned>(s.batch * s.seq);
  const unsigned threads = threads_for(s.stage_heads * s.head_dim / 2);
  const size_t smem = static_cast<size_t>(s.head_dim / 2) * sizeof(float2);
  if (dtype == KernelDtype::F32) {
    rope_pack_forward_kernel<float><<<blocks, threads, smem, stream>>>(
        static_cast<const float*>(x), positions, inv_freq, log2_theta, s, static_cast<float*>(send));
  } else {
    rope_pack_forward_kernel<Bf16><<<blocks, threads, smem, stream>>>(static_cast<const Bf16*>(x), positions, inv_freq,
                                                                      log2_theta, s, static_cast<Bf16*>(send));
  }
  ODYSSEY_CUDA_CHECK(cudaGetLastError());
}

void rope_pack_backward(KernelDtype dtype, const void* dsend, const int64_t* positions, const float* inv_freq,
                        double theta, const RopePackShape& s, void* dx, bool accumulate, cudaStream_t stream) {
  check_launch(s, "rope_pack_backward", theta, inv_freq);
  require(dsend && positions && dx,
          "rope_pack_backward: dsend, positions and dx must be device pointers, got a null one");
  const double log2_theta = inv_freq ? 0.0 : std::log2(theta);
  const unsigned blocks = static_cast<unsigned>(s.batch * s.seq);
  const unsigned threads = threads_for(s.stage_heads / s.head_repeat * s.head_dim / 2);
  const size_t smem = static_cast<size_t>(s.head_dim / 2) * sizeof(float2);
  if (dtype == KernelDtype::F32) {
    rope_pack_backward_kernel<float><<<blocks, threads, smem, stream>>>(
        static_cast<const float*>(dsend), positions, inv_freq, log2_theta, s, static_cast<float*>(dx), accumulate);
  } else {
    rope_pack_backward_kernel<Bf16><<<blocks, threads, smem, stream>>>(
        static_cast<const Bf16*>(dsend), positions, inv_freq, log2_theta, s, static_cast<Bf16*>(dx), accumulate);
  }
  ODYSSEY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace odyssey::kernels
