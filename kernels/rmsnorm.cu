// RMSNorm forward/backward kernels. Forward: one block per row, fp32 sum of squares, y = x*rstd*w,
// rstd saved. Backward: dx per row, dweight through a deterministic two-stage reduction (per-block
// partials over a fixed row partition in shared memory, then a column sum of the partials in order).
// bf16 and fp32 inputs, fp32 accumulation; 128-bit loads when the row width and pointers allow.
// Test:  build/bin/kernel_tests "[rmsnorm]" (CPU reference) and "[rmsnorm][.cuda]" on a GPU.
// Bench: build/bin/odyssey_kernel_bench rmsnorm (bandwidth vs the device's copy bandwidth).
// defines: rmsnorm_forward, rmsnorm_rstd, rmsnorm_backward, rmsnorm_backward_partials,
//          rmsnorm_backward_workspace_bytes
#include "kernels/kernel_device.cuh"
#include "kernels/rmsnorm.h"

namespace odyssey::kernels {
namespace {

using device::Bf16;
constexpr int kThreads = 256;
constexpr int64_t kMaxPartials = 256;

template <typename T, int kVec>
__global__ void rmsnorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
                                       float* __restrict__ rstd, int64_t dim, float eps) {
  __shared__ float scratch[32];
  const size_t row_base = static_cast<size_t>(blockIdx.x) * dim;
  const int64_t n_vec = dim / kVec;
  float sum_sq = 0.0f;
  for (int64_t v = threadIdx.x; v < n_vec; v += blockDim.x) {
    float xv[kVec];
    device::load_vec<T, kVec>(x, row_base + v * kVec, xv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) sum_sq += xv[k] * xv[k];
  }
  sum_sq = device::block_sum(sum_sq, scratch);
  const float r = rsqrtf(sum_sq / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  if (y == nullptr) return;  // rmsnorm_rstd: the statistics alone (the same for every thread of the block)
  for (int64_t v = threadIdx.x; v < n_vec; v += blockDim.x) {  // second read of the row hits L2
    float xv[kVec], wv[kVec], yv[kVec];
    device::load_vec<T, kVec>(x, row_base + v * kVec, xv);
    device::load_vec<T, kVec>(weight, v * kVec, wv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) yv[k] = xv[k] * r * wv[k];
    device::store_vec<T, kVec>(y, row_base + v * kVec, yv);
  }
}

// Stage 1: block b handles rows b, b + G, b + 2G, ... in order. Each thread owns the same columns
// in every row, so its dweight partials in shared memory need no atomics and sum in a fixed order.
template <typename T, int kVec>
__global__ void rmsnorm_backward_rows_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                             const T* __restrict__ weight, const float* __restrict__ rstd,
                                             T* __restrict__ dx, float* __restrict__ partials, int64_t rows,
                                             int64_t dim) {
  extern __shared__ float dweight_acc[];  // [dim] fp32, this block's partial
  __shared__ float scratch[32];
  const int64_t n_vec = dim / kVec;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dweight_acc[j] = 0.0f;
  __syncthreads();
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const size_t base = static_cast<size_t>(row) * dim;
    const float r = rstd[row];
    float dot = 0.0f;  // sum_j dy_j * w_j * x_j
    for (int64_t v = threadIdx.x; v < n_vec; v += blockDim.x) {
      float dyv[kVec], xv[kVec], wv[kVec];
      device::load_vec<T, kVec>(dy, base + v * kVec, dyv);
      device::load_vec<T, kVec>(x, base + v * kVec, xv);
      device::load_vec<T, kVec>(weight, v * kVec, wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) dot += dyv[k] * wv[k] * xv[k];
    }
    dot = device::block_sum(dot, scratch);
    const float c = dot * r * r * r * inv_dim;  // dx = r*dy*w - x * r^3 * dot / dim
    for (int64_t v = threadIdx.x; v < n_vec; v += blockDim.x) {
      float dyv[kVec], xv[kVec], wv[kVec], dxv[kVec];
      device::load_vec<T, kVec>(dy, base + v * kVec, dyv);
      device::load_vec<T, kVec>(x, base + v * kVec, xv);
      device::load_vec<T, kVec>(weight, v * kVec, wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        dxv[k] = r * dyv[k] * wv[k] - xv[k] * c;
        dweight_acc[v * kVec + k] += dyv[k] * xv[k] * r;
      }
      device::store_vec<T, kVec>(dx, base + v * kVec, dxv);
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) partials[blockIdx.x * dim + j] = dweight_acc[j];
}

// Stage 2: dweight[j] = sum over partials b = 0..G-1 in order (coalesced across j).
template <typename T>
__global__ void rmsnorm_backward_columns_kernel(const float* __restrict__ partials, T* __restrict__ dweight,
                                                int64_t n_partials, int64_t dim) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  float sum = 0.0f;
  for (int64_t b = 0; b < n_partials; ++b) sum += partials[b * dim + j];
  device::store_f32(dweight, j, sum);
}

void check_shape(const char* op, int64_t rows, int64_t dim) {
  require(rows > 0 && dim > 0, std::string(op) + ": rows = " + std::to_string(rows) + ", dim = " + std::to_string(dim) +
                                   " must both be positive");
  require(rows <= 0x7fffffff, std::string(op) + ": rows = " + std::to_string(rows) + " exceeds the grid limit 2^31-1");
}

// 128-bit vectors when the row width is a multiple of the vector and every pointer is 16-byte aligned.
template <typename T>
bool use_vectors(int64_t dim, std::initializer_list<const void*> pointers) {
  constexpr int kVec = 16 / sizeof(T);
  if (dim % kVec != 0) return false;
  for (const void* p : pointers)
    if (!device::is_aligned(p, 16)) return false;
  return true;
}

template <typename T>
void forward_typed(const void* x, const void* w, void* y, float* rstd, int64_t rows, int64_t dim, float eps,
                   cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  auto* xt = static_cast<const T*>(x);
  auto* wt = static_cast<const T*>(w);
  auto* yt = static_cast<T*>(y);
  if (use_vectors<T>(dim, {x, w, y})) {
    rmsnorm_forward_kernel<T, kVec><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(xt, wt, yt, rstd, dim, eps);
  } else {
    rmsnorm_forward_kernel<T, 1><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(xt, wt, yt, rstd, dim, eps);
  }
  ODYSSEY_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int kVec>
void launch_backward_rows(const T* dy, const T* x, const T* w, const float* rstd, T* dx, float* partials, int64_t rows,
                          int64_t dim, int64_t n_partials, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(dim) * sizeof(float);
  auto kernel = rmsnorm_backward_rows_kernel<T, kVec>;
  if (smem > 48 * 1024) {  // above the default dynamic limit the kernel must opt in
    ODYSSEY_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  kernel<<<static_cast<unsigned>(n_partials), kThreads, smem, stream>>>(dy, x, w, rstd, dx, partials, rows, dim);
  ODYSSEY_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void backward_typed(const void* dy, const void* x, const void* w, const float* rstd, void* dx, void* dw,
                    float* workspace, int64_t rows, int64_t dim, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t n_partials = rmsnorm_backward_partials(rows);
  auto* dyt = static_cast<const T*>(dy);
  auto* xt = static_cast<const T*>(x);
  auto* wt = static_cast<const T*>(w);
  auto* dxt = static_cast<T*>(dx);
  if (use_vectors<T>(dim, {dy, x, w, dx})) {
    launch_backward_rows<T, kVec>(dyt, xt, wt, rstd, dxt, workspace, rows, dim, n_partials, stream);
  } else {
    launch_backward_rows<T, 1>(dyt, xt, wt, rstd, dxt, workspace, rows, dim, n_partials, stream);
  }
  const unsigned blocks = static_cast<unsigned>((dim + kThreads - 1) / kThreads);
  rmsnorm_backward_columns_kernel<T><<<blocks, kThreads, 0, stream>>>(workspace, static_cast<T*>(dw), n_partials, dim);
  ODYSSEY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int64_t rmsnorm_backward_partials(int64_t rows) { return rows < kMaxPartials ? rows : kMaxPartials; }

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim) {
  return static_cast<size_t>(rmsnorm_backward_partials(rows)) * static_cast<size_t>(dim) * sizeof(float);
}

void rmsnorm_forward(KernelDtype dtype, const void* x, const void* weight, void* y, float* rstd, int64_t rows,
                     int64_t dim, float eps, cudaStream_t stream) {
  check_shape("rmsnorm_forward", rows, dim);
  require(x && weight && y && rstd, "rmsnorm_forward: x, weight, y and rstd must be device pointers, got a null one");
  if (dtype == KernelDtype::F32) {
    forward_typed<float>(x, weight, y, rstd, rows, dim, eps, stream);
  } else {
    forward_typed<Bf16>(x, weight, y, rstd, rows, dim, eps, stream);
  }
}

void rmsnorm_rstd(KernelDtype dtype, const void* x, float* rstd, int64_t rows, int64_t dim, float eps,
                  cudaStream_t stream) {
  check_shape("rmsnorm_rstd", rows, dim);
  require(x && rstd, "rmsnorm_rstd: x and rstd must be device pointers, got a null one");
  // The forward's kernel with no weight and no output: it stops after writing each row's rstd, so
  // the statistics are the forward's bit for bit wherever the forward reads x in the same vectors
  // (a 16-byte aligned weight and output, as every allocation is).
  if (dtype == KernelDtype::F32) {
    forward_typed<float>(x, nullptr, nullptr, rstd, rows, dim, eps, stream);
  } else {
    forward_typed<Bf16>(x, nullptr, nullptr, rstd, rows, dim, eps, stream);
  }
}

void rmsnorm_backward(KernelDtype dtype, const void* dy, const void* x, const void* weight, const float* rstd, void* dx,
                      void* dweight, float* workspace, int64_t rows, int64_t dim, cudaStream_t stream) {
  check_shape("rmsnorm_backward", rows, dim);
  require(dim <= kRmsNormMaxDim, "rmsnorm_backward: dim = " + std::to_string(dim) + " exceeds kRmsNormMaxDim = " +
                                     std::to_string(kRmsNormMaxDim) + " (the dweight partial lives in shared memory)");
  require(dy && x && weight && rstd && dx && dweight && workspace,
          "rmsnorm_backward: dy, x, weight, rstd, dx, dweight and workspace must be device pointers, got a null one");
  if (dtype == KernelDtype::F32) {
    backward_typed<float>(dy, x, weight, rstd, dx, dweight, workspace, rows, dim, stream);
  } else {
    backward_typed<Bf16>(dy, x, weight, rstd, dx, dweight, workspace, rows, dim, stream);
  }
}

}  // namespace odyssey::kernels
