// Fused tiled linear + cross-entropy: the LM head, the loss and both gradients without ever holding
// more than one [seq_tile, vocab_tile] fp32 logits tile (memory reason: the [tokens, vocab] fp32
// logits of a 128K-token Llama-3 sequence are 64 GiB). Per sequence tile, pass 1 runs over the
// vocabulary tiles with an online max/sum (cuBLAS GEMM -> fp32 tile -> row statistics kernel), then
// the log-sum-exp and loss are finalized; pass 2 recomputes each logits tile, converts it in place to
// grad_scale * (softmax - onehot) and accumulates dhidden (fp32 accumulator) and dweight (fp32) with
// two cuBLAS GEMMs. bf16 or fp32 inputs, fp32 accumulation throughout. Cost: 4 GEMMs of 2*T*V*d flops
// (the logits are computed twice) instead of 3 for the unfused head; 3 when one vocabulary tile
// holds whole rows (pass 2 reads pass 1's tile: lce_head_gemms).
// Test:  build/bin/kernel_tests "[lce]" (CPU reference, tile plan, tiling emulation) and
//        "[lce][.cuda]" on a GPU.
// Bench: build/bin/odyssey_kernel_bench lce (time and peak memory vs an unfused full-logits head).
// defines: linear_cross_entropy
#include <cublas_v2.h>

#include <algorithm>
#include <vector>

#include "kernels/kernel_device.cuh"
#include "kernels/linear_cross_entropy.h"

namespace odyssey::kernels {
namespace {

using device::Bf16;
constexpr int kThreads = 256;

void check_cublas(cublasStatus_t status, const char* what, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw KernelError(std::string(what) + ": " + cublasGetStatusName(status) + " (" + cublasGetStatusString(status) +
                    ") at " + __FILE__ + ":" + std::to_string(line));
}
#define ODYSSEY_CUBLAS_CHECK(expr) check_cublas((expr), #expr, __LINE__)

// One cuBLAS handle per thread and device, created on first use (cuBLAS handles are not thread-safe).
cublasHandle_t thread_cublas_handle() {
  struct Handles {
    std::vector<cublasHandle_t> by_device;
    ~Handles() {
      for (cublasHandle_t h : by_device)
        if (h) cublasDestroy(h);  // errors at process teardown are ignored on purpose
    }
  };
  thread_local Handles handles;
  int device = 0;
  ODYSSEY_CUDA_CHECK(cudaGetDevice(&device));
  if (handles.by_device.size() <= static_cast<size_t>(device)) handles.by_device.resize(device + 1, nullptr);
  cublasHandle_t& h = handles.by_device[static_cast<size_t>(device)];
  if (!h) ODYSSEY_CUBLAS_CHECK(cublasCreate(&h));
  return h;
}

// C (m x n, column-major, fp32) = op(A) op(B) + beta * C, fp32 accumulation.
void gemm(cublasHandle_t handle, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k,
          const void* a, int64_t lda, const void* b, int64_t ldb, cudaDataType ab_type, float beta, float* c,
          int64_t ldc) {
  const float alpha = 1.0f;
  ODYSSEY_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                                    &alpha, a, ab_type, static_cast<int>(lda), b, ab_type, static_cast<int>(ldb), &beta,
                                    c, CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

__global__ void lce_init_rows_kernel(float* row_max, float* row_sum, float* target, int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  row_max[r] = -INFINITY;
  row_sum[r] = 0.0f;
  target[r] = 0.0f;
}

// One block per row of the logits tile: this tile's max/sum (per-thread online, then a block merge),
// merged into the running statistics; the label's logit captured when it falls in this tile.
__global__ void lce_tile_stats_kernel(const float* __restrict__ logits, int64_t tile_vocab, int64_t v0,
                                      const int64_t* __restrict__ labels, float* __restrict__ row_max,
                                      float* __restrict__ row_sum, float* __restrict__ target) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* z = logits + row * tile_vocab;
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < tile_vocab; c += blockDim.x) {
    const float v = z[c];
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float tile_max = device::block_max(m, scratch);
  const float tile_sum = device::block_sum(m == -INFINITY ? 0.0f : s * expf(m - tile_max), scratch);
  if (threadIdx.x == 0) {
    const MaxSum merged = merge_max_sum({row_max[row], row_sum[row]}, {tile_max, tile_sum});
    row_max[row] = merged.max;
    row_sum[row] = merged.sum;
    const int64_t label = labels[row];
    if (label >= v0 && label < v0 + tile_vocab) target[row] = z[label - v0];
  }
}

__device__ __forceinline__ bool label_valid(int64_t label, int64_t vocab) { return label >= 0 && label < vocab; }

// lse = max + log(sum) (stored over row_max for pass 2), loss = lse - target logit, 0 when ignored.
__global__ void lce_finalize_kernel(const int64_t* __restrict__ labels, int64_t vocab, float* __restrict__ row_max,
                                    const float* __restrict__ row_sum, const float* __restrict__ target,
                                    float* __restrict__ loss, int32_t* __restrict__ invalid_labels, int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int64_t label = labels[r];
  const float lse = row_max[r] + logf(row_sum[r]);
  row_max[r] = lse;
  const bool valid = label_valid(label, vocab);
  loss[r] = valid ? lse - target[r] : 0.0f;
  if (!valid && label != kIgnoreIndex && invalid_labels) atomicAdd(invalid_labels, 1);
}

// grad[row, c] = grad_scale * (exp(logit - lse) - onehot), 0 for ignored rows. For fp32 `grad`
// aliases `logits` (each thread overwrites the element it read), hence no __restrict__.
template <typename T>
__global__ void lce_tile_grad_kernel(const float* logits, T* grad, int64_t tile_vocab, int64_t v0,
                                     const int64_t* __restrict__ labels, int64_t vocab, const float* __restrict__ lse,
                                     float grad_scale) {
  const int64_t row = blockIdx.x;
  const int64_t label = labels[row];
  const bool valid = label_valid(label, vocab);
  const float row_lse = lse[row];
  const size_t base = static_cast<size_t>(row * tile_vocab);
  for (int64_t c = threadIdx.x; c < tile_vocab; c += blockDim.x) {
    const float g = valid ? ce_grad(logits[base + c], row_lse, v0 + c == label, grad_scale) : 0.0f;
    device::store_f32(grad, base + c, g);
  }
}

__global__ void convert_f32_to_bf16_kernel(const float* __restrict__ src, Bf16* __restrict__ dst, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void linear_cross_entropy(KernelDtype dtype, const void* hidden, const void* weight, const int64_t* labels,
                          const LinearCrossEntropyShape& shape, float grad_scale, float* loss, void* dhidden,
                          float* dweight, void* workspace, size_t workspace_bytes, int32_t* invalid_labels,
                          cudaStream_t stream, cublasContext* cublas) {
  const LceTilePlan plan = plan_linear_cross_entropy(dtype, shape);
  require(hidden && weight && labels && loss && workspace,
          "linear_cross_entropy: hidden, weight, labels, loss and workspace must be device pointers, got a null one");
  require(workspace_bytes >= plan.bytes, "linear_cross_entropy: workspace_bytes = " + std::to_string(workspace_bytes) +
                                             " is below the plan's " + std::to_string(plan.bytes) + " bytes");
  cublasHandle_t handle = cublas ? cublas : thread_cublas_handle();
  // cublasSetStream also resets the handle's workspace to cuBLAS's default pool, which would undo a
  // workspace LibTorch configured on its handle: only switch streams when needed.
  cudaStream_t handle_stream = nullptr;
  ODYSSEY_CUBLAS_CHECK(cublasGetStream(handle, &handle_stream));
  if (handle_stream != stream) ODYSSEY_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const cudaDataType ab_type = dtype == KernelDtype::F32 ? CUDA_R_32F : CUDA_R_16BF;
  const size_t esize = dtype_bytes(dtype);
  const int64_t d = shape.dim;
  char* ws = static_cast<char*>(workspace);
  float* logits = reinterpret_cast<float*>(ws + plan.logits_offset);  // [seq_tile, vocab_tile] fp32
  void* grad = ws + plan.grad_offset;                                 // [seq_tile, vocab_tile] dtype
  float* row_max = reinterpret_cast<float*>(ws + plan.row_max_offset);
  float* row_sum = reinterpret_cast<float*>(ws + plan.row_sum_offset);
  float* target = reinterpret_cast<float*>(ws + plan.target_offset);
  const bool backward = dhidden || dweight;

  for (int64_t st = 0; st < plan.n_seq_tiles; ++st) {
    const int64_t t0 = st * plan.seq_tile;
    const int64_t tt = std::min(plan.seq_tile, shape.tokens - t0);
    const char* h_tile = static_cast<const char*>(hidden) + static_cast<size_t>(t0 * d) * esize;  // [tt, d]
    const int64_t* tile_labels = labels + t0;
    lce_init_rows_kernel<<<blocks_for(tt), kThreads, 0, stream>>>(row_max, row_sum, target, tt);
    ODYSSEY_CUDA_CHECK(cudaGetLastError());

    // Pass 1: online max/sum over the vocabulary tiles.
    for (int64_t vt_index = 0; vt_index < plan.n_vocab_tiles; ++vt_index) {
      const int64_t v0 = vt_index * plan.vocab_tile;
      const int64_t vt = std::min(plan.vocab_tile, shape.vocab - v0);
      const char* w_tile = static_cast<const char*>(weight) + static_cast<size_t>(v0 * d) * esize;  // [vt, d]
      // logits [tt, vt] row-major = (W_tile h^T) column-major [vt x tt]
      gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, vt, tt, d, w_tile, d, h_tile, d, ab_type, 0.0f, logits, vt);
      lce_tile_stats_kernel<<<static_cast<unsigned>(tt), kThreads, 0, stream>>>(logits, vt, v0, tile_labels, row_max,
                                                                                row_sum, target);
      ODYSSEY_CUDA_CHECK(cudaGetLastError());
    }
    lce_finalize_kernel<<<blocks_for(tt), kThreads, 0, stream>>>(tile_labels, shape.vocab, row_max, row_sum, target,
                                                                 loss + t0, invalid_labels, tt);
    ODYSSEY_CUDA_CHECK(cudaGetLastError());
    if (!backward) continue;

    // Pass 2: recompute each logits tile, turn it into dlogits, accumulate dhidden and dweight.
    float* dh_acc = nullptr;  // [tt, d] fp32
    if (dhidden) {
      dh_acc = dtype == KernelDtype::F32 ? static_cast<float*>(dhidden) + t0 * d
                                         : reinterpret_cast<float*>(ws + plan.dhidden_acc_offset);
    }
    for (int64_t vt_index = 0; vt_index < plan.n_vocab_tiles; ++vt_index) {
      const int64_t v0 = vt_index * plan.vocab_tile;
      const int64_t vt = std::min(plan.vocab_tile, shape.vocab - v0);
      const char* w_tile = static_cast<const char*>(weight) + static_cast<size_t>(v0 * d) * esize;
      // One vocabulary tile: `logits` still holds pass 1's tile (the statistics kernels only read
      // it), so the GEMM is not run again (lce_head_gemms: 3 head GEMMs instead of 4).
      if (plan.n_vocab_tiles > 1)
        gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, vt, tt, d, w_tile, d, h_tile, d, ab_type, 0.0f, logits, vt);
      if (dtype == KernelDtype::F32) {
        lce_tile_grad_kernel<float><<<static_cast<unsigned>(tt), kThreads, 0, stream>>>(
            logits, static_cast<float*>(grad), vt, v0, tile_labels, shape.vocab, row_max, grad_scale);
      } else {
        lce_tile_grad_kernel<Bf16><<<static_cast<unsigned>(tt), kThreads, 0, stream>>>(
            logits, static_cast<Bf16*>(grad), vt, v0, tile_labels, shape.vocab, row_max, grad_scale);
      }
      ODYSSEY_CUDA_CHECK(cudaGetLastError());
      if (dh_acc) {  // dh [tt, d] (+)= dlogits [tt, vt] @ W_tile [vt, d]  ==  col-major [d x tt]
        gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, d, tt, vt, w_tile, d, grad, vt, ab_type, vt_index == 0 ? 0.0f : 1.0f,
             dh_acc, d);
      }
      if (dweight) {  // dW [vt, d] += dlogits^T [vt, tt] @ h [tt, d]  ==  col-major [d x vt]
        gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, d, vt, tt, h_tile, d, grad, vt, ab_type, 1.0f,
             dweight + static_cast<size_t>(v0 * d), d);
      }
    }
    if (dhidden && dtype == KernelDtype::BF16) {
      const size_t n = static_cast<size_t>(tt * d);
      const unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads, 4096));
      convert_f32_to_bf16_kernel<<<blocks, kThreads, 0, stream>>>(dh_acc, static_cast<Bf16*>(dhidden) + t0 * d, n);
      ODYSSEY_CUDA_CHECK(cudaGetLastError());
    }
  }
}

}  // namespace odyssey::kernels
