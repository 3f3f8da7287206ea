// RoPE's rotation by precomputed fp32 cos/sin tables: one pass that reads both halves of each head
// and writes the rotated head, in 128-bit vectors where the strides allow (else scalar), for any
// batch/seq/head strides of the input. Replaces four strided eager kernels (two products, two
// multiply-adds, each over half a head with the tables broadcast) that moved 2.5x the bytes.
// Test:  build/bin/kernel_tests "[rope_rotate]" (CPU reference) and "[rope_rotate][.cuda]" on a GPU.
// Bench: build/bin/odyssey_kernel_bench rope (bytes moved per second vs the device's copy bandwidth).
// defines: rope_rotate
#include "kernels/kernel_device.cuh"
#include "kernels/rope_rotate.h"

namespace odyssey::kernels {
namespace {

using device::Bf16;
constexpr int kThreads = 256;

// One thread per kVec consecutive pairs (k, k + half) of one head of one token. `sign` is +1
// forward, -1 for the transpose. `Index` holds the vector's number and its (b, t, h, k) split:
// uint32_t wherever the vectors number below 2^31 (every length a GPU holds: 5M tokens x 32 heads
// x 4 vectors is 2^29.3), int64_t beyond. Time: each vector's split takes four divisions, which in
// 64 bits the GPU runs as a software routine of dozens of instructions, against one 32-bit one;
// the offsets, products of the split with the strides, stay 64-bit.
template <typename T, int kVec, typename Index>
__global__ void rope_rotate_kernel(const T* __restrict__ x, const float* __restrict__ cos_table,
                                   const float* __restrict__ sin_table, RopeRotateShape s, float sign,
                                   T* __restrict__ out) {
  const int64_t half = s.head_dim / 2;
  const Index per_half = static_cast<Index>(half / kVec);  // vectors in each half of a head
  const Index heads = static_cast<Index>(s.heads), seq = static_cast<Index>(s.seq);
  const Index n = static_cast<Index>(s.batch * s.seq * s.heads * (half / kVec));
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index v = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; v < n; v += stride) {
    const int64_t k0 = static_cast<int64_t>(v % per_half) * kVec;
    const Index token_head = v / per_half;  // (b, t, h) in out's order
    const Index h = token_head % heads;
    const Index token = token_head / heads;  // b * seq + t
    const Index t = token % seq, b = token / seq;
    const size_t in =
        static_cast<size_t>(static_cast<int64_t>(b) * s.stride_batch + static_cast<int64_t>(t) * s.stride_seq +
                            static_cast<int64_t>(h) * s.stride_head + k0);
    const size_t o = static_cast<size_t>(static_cast<int64_t>(token_head) * s.head_dim + k0);
    const size_t row = static_cast<size_t>(static_cast<int64_t>(s.table_per_row ? token : t) * half + k0);
    float x1[kVec], x2[kVec], c[kVec], sn[kVec], o1[kVec], o2[kVec];
    device::load_vec<T, kVec>(x, in, x1);
    device::load_vec<T, kVec>(x, in + half, x2);
    device::load_vec<float, kVec>(cos_table, row, c);  // one 128-bit load for fp32 (kVec 4)
    device::load_vec<float, kVec>(sin_table, row, sn);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float sk = sign * sn[k];
      o1[k] = x1[k] * c[k] - x2[k] * sk;
      o2[k] = x2[k] * c[k] + x1[k] * sk;
    }
    device::store_vec<T, kVec>(out, o, o1);
    device::store_vec<T, kVec>(out, o + half, o2);
  }
}

/// Launches the kernel with vectors of kVec pairs, in 32-bit index arithmetic where the vectors
/// and the loop's last step past them fit in 2^31.
template <typename T, int kVec>
void launch_vectors(const T* in, const float* cos, const float* sin, const RopeRotateShape& s, float sign, T* out,
                    cudaStream_t stream) {
  const int64_t vectors = s.batch * s.seq * s.heads * (s.head_dim / 2 / kVec);
  const int blocks = device::grid_stride_blocks(vectors, kThreads);
  if (vectors + static_cast<int64_t>(blocks) * kThreads < (int64_t{1} << 31))
    rope_rotate_kernel<T, kVec, uint32_t><<<blocks, kThreads, 0, stream>>>(in, cos, sin, s, sign, out);
  else
    rope_rotate_kernel<T, kVec, int64_t><<<blocks, kThreads, 0, stream>>>(in, cos, sin, s, sign, out);
}

template <typename T>
void launch(const void* x, const float* cos, const float* sin, const RopeRotateShape& s, float sign, void* out,
            cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t half = s.head_dim / 2;
  // 128-bit accesses need every vector's first element on a 16-byte boundary: aligned bases, and
  // half, the strides and hence every offset multiples of kVec elements.
  const bool vector = half % kVec == 0 && s.stride_batch % kVec == 0 && s.stride_seq % kVec == 0 &&
                      s.stride_head % kVec == 0 && device::all_aligned_16({x, cos, sin, out});
  const T* in = static_cast<const T*>(x);
  T* result = static_cast<T*>(out);
  if (vector)
    launch_vectors<T, kVec>(in, cos, sin, s, sign, result, stream);
  else
    launch_vectors<T, 1>(in, cos, sin, s, sign, result, stream);
  ODYSSEY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rope_rotate(KernelDtype dtype, const void* x, const float* cos, const float* sin, const RopeRotateShape& s,
                 bool inverse, void* out, cudaStream_t stream) {
  check_rope_rotate_shape(s, "rope_rotate");
  require(x && cos && sin && out, "rope_rotate: x, cos, sin and out must be device pointers, got a null one");
  const float sign = inverse ? -1.0f : 1.0f;
  if (dtype == KernelDtype::F32)
    launch<float>(x, cos, sin, s, sign, out, stream);
  else
    launch<Bf16>(x, cos, sin, s, sign, out, stream);
}

}  // namespace odyssey::kernels
