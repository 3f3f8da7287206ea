// Kernel micro-benchmarks on a GPU, each against a baseline measured side by side in the same run:
//   rmsnorm / rope / swiglu: achieved bytes/s as a fraction of a device-to-device cudaMemcpy of
//            equal bytes (swiglu at Llama-3.2-1B's d_ffn 8192: 3 and 5 tensors' bytes a pass; rope:
//            the Untied stage's pack and the rotation by tables of the 1B's q, the transposed
//            layout of a gradient included);
//   lce:     fused tiled linear+CE on the kernel's default 8192 x 8192 tiles, on the training
//            step's tiles (whole rows of the loss tile: kernels::fused_loss_tiles) and on the widest
//            whole-row tiles the plan accepts, vs the floor of three plain GEMMs (what an unfused
//            head must at least run), with workspace bytes;
//   offload: D2H/H2D bandwidth from the pinned slab vs pageable memory.
// Each benchmark stands alone: one that fails prints {"bench":..., "error":...} and the rest run.
// Usage: odyssey_kernel_bench [rmsnorm|rope|swiglu|lce|offload|all] [--tokens N] [--dry-run]
//        (one JSON object per line; --dry-run: the host-side plans only, no device call)
// defines: main
#include <cublas_v2.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/linear_cross_entropy.h"
#include "kernels/offload_streams.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope_pack.h"
#include "kernels/rope_rotate.h"
#include "kernels/swiglu.h"
#include "engine/layout/tiles.h"

using namespace odyssey::kernels;

namespace {

struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) {
    ODYSSEY_CUDA_CHECK(cudaMalloc(&p, bytes));
    ODYSSEY_CUDA_CHECK(cudaMemset(p, 0, bytes));
  }
  ~Buffer() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Mean milliseconds of `fn` over `iters` runs after `warmup` runs, timed with events on stream 0.
double time_ms(const std::function<void()>& fn, int warmup = 3, int iters = 10) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  ODYSSEY_CUDA_CHECK(cudaEventCreate(&start));
  ODYSSEY_CUDA_CHECK(cudaEventCreate(&stop));
  ODYSSEY_CUDA_CHECK(cudaEventRecord(start, nullptr));
  for (int i = 0; i < iters; ++i) fn();
  ODYSSEY_CUDA_CHECK(cudaEventRecord(stop, nullptr));
  ODYSSEY_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  ODYSSEY_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

// Milliseconds of a device-to-device copy moving `bytes` read + written in total.
double copy_ms(size_t bytes_moved) {
  const size_t half = bytes_moved / 2;
  Buffer a(half), b(half);
  return time_ms([&] { ODYSSEY_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, half, cudaMemcpyDeviceToDevice, nullptr)); });
}

/// What a bandwidth-bound pair of passes ran on: the benchmark, the dtype and its two sizes.
struct PassShape {
  const char* bench;
  KernelDtype dtype;
  const char* rows_key;
  int64_t rows;
  const char* width_key;
  int64_t width;
};

/// One JSON line: each pass's milliseconds and its speed against a copy of the bytes it moves.
void print_passes(const PassShape& s, double fwd_ms, double fwd_copy_ms, double bwd_ms, double bwd_copy_ms) {
  std::printf(
      "{\"bench\":\"%s\",\"dtype\":\"%s\",\"%s\":%lld,\"%s\":%lld,\"fwd_ms\":%.4f,\"fwd_vs_copy\":%.3f,"
      "\"bwd_ms\":%.4f,\"bwd_vs_copy\":%.3f}\n",
      s.bench, to_string(s.dtype), s.rows_key, static_cast<long long>(s.rows), s.width_key,
      static_cast<long long>(s.width), fwd_ms, fwd_copy_ms / fwd_ms, bwd_ms, bwd_copy_ms / bwd_ms);
}

void bench_rmsnorm(int64_t tokens) {
  const int64_t dim = 2048;
  for (KernelDtype dtype : {KernelDtype::BF16, KernelDtype::F32}) {
    const size_t n = static_cast<size_t>(tokens * dim), e = dtype_bytes(dtype);
    Buffer x(n * e), w(dim * e), y(n * e), rstd(tokens * 4), dy(n * e), dx(n * e), dw(dim * e);
    Buffer ws(rmsnorm_backward_workspace_bytes(tokens, dim));
    const double fwd =
        time_ms([&] { rmsnorm_forward(dtype, x.p, w.p, y.p, rstd.as<float>(), tokens, dim, 1e-5f, nullptr); });
    const double bwd = time_ms([&] {
      rmsnorm_backward(dtype, dy.p, x.p, w.p, rstd.as<float>(), dx.p, dw.p, ws.as<float>(), tokens, dim, nullptr);
    });
    print_passes({"rmsnorm", dtype, "rows", tokens, "dim", dim}, fwd, copy_ms(2 * n * e), bwd, copy_ms(3 * n * e));
  }
}

void bench_swiglu(int64_t tokens) {
  const int64_t d_ffn = 8192;  // Llama-3.2-1B's MLP width
  for (KernelDtype dtype : {KernelDtype::BF16, KernelDtype::F32}) {
    const size_t n = static_cast<size_t>(tokens * d_ffn), e = dtype_bytes(dtype);
    Buffer gate(n * e), up(n * e), h(n * e), dh(n * e), d_gate(n * e), d_up(n * e);
    const int64_t count = static_cast<int64_t>(n);
    const double fwd = time_ms([&] { swiglu_forward(dtype, gate.p, up.p, h.p, count, nullptr); });
    const double bwd = time_ms([&] { swiglu_backward(dtype, dh.p, gate.p, up.p, d_gate.p, d_up.p, count, nullptr); });
    print_passes({"swiglu", dtype, "tokens", tokens, "d_ffn", d_ffn}, fwd, copy_ms(3 * n * e), bwd, copy_ms(5 * n * e));
  }
}

void bench_rope(int64_t tokens) {
  // Llama-3.2-1B q: 32 heads of 64, a stage of 4 heads over 4 ranks (s = tokens / 4 local tokens).
  RopePackShape s;
  s.batch = 1, s.seq = tokens / 4, s.heads = 32, s.head_dim = 64, s.ranks = 4, s.stage_heads = 4;
  for (KernelDtype dtype : {KernelDtype::BF16, KernelDtype::F32}) {
    const size_t e = dtype_bytes(dtype), n_send = static_cast<size_t>(rope_pack_send_elements(s));
    Buffer x(static_cast<size_t>(s.seq * s.heads * s.head_dim) * e), pos(s.seq * 8), send(n_send * e);
    const double fwd =
        time_ms([&] { rope_pack_forward(dtype, x.p, pos.as<int64_t>(), nullptr, 500000.0, s, send.p, nullptr); });
    const double bwd = time_ms(
        [&] { rope_pack_backward(dtype, send.p, pos.as<int64_t>(), nullptr, 500000.0, s, x.p, true, nullptr); });
    const double copy = copy_ms(2 * n_send * e);
    std::printf(
        "{\"bench\":\"rope_pack\",\"dtype\":\"%s\",\"local_tokens\":%lld,\"stage_heads\":%lld,\"fwd_ms\":%.4f,"
        "\"fwd_vs_copy\":%.3f,\"bwd_ms\":%.4f}\n",
        to_string(dtype), static_cast<long long>(s.seq), static_cast<long long>(s.stage_heads), fwd, copy / fwd, bwd);
  }
}

void bench_rope_rotate(int64_t tokens) {
  // Llama-3.2-1B q: 32 heads of 64 at every token; tables [tokens, 32] fp32. Forward reads the
  // contiguous q; the inverse reads the transposed view of a [1, 32, tokens, 64] gradient.
  const int64_t heads = 32, hd = 64;
  const RopeRotateShape plain = rope_rotate_contiguous(1, tokens, heads, hd);
  RopeRotateShape transposed = plain;
  transposed.stride_head = tokens * hd, transposed.stride_seq = hd;
  for (KernelDtype dtype : {KernelDtype::BF16, KernelDtype::F32}) {
    const size_t n = static_cast<size_t>(tokens * heads * hd), e = dtype_bytes(dtype);
    Buffer x(n * e), out(n * e), cos(static_cast<size_t>(tokens * hd / 2) * 4),
        sin(static_cast<size_t>(tokens * hd / 2) * 4);
    const double fwd =
        time_ms([&] { rope_rotate(dtype, x.p, cos.as<float>(), sin.as<float>(), plain, false, out.p, nullptr); });
    const double bwd =
        time_ms([&] { rope_rotate(dtype, x.p, cos.as<float>(), sin.as<float>(), transposed, true, out.p, nullptr); });
    print_passes({"rope_rotate", dtype, "tokens", tokens, "heads", heads}, fwd, copy_ms(2 * n * e), bwd,
                 copy_ms(2 * n * e));
  }
}

/// The training step's tiling of the fused loss at `tokens` positions of one sequence: whole rows
/// of the default loss tile (engine/layout/tiles.h's rule, kernels::fused_loss_tiles).
LinearCrossEntropyShape step_tiles(int64_t tokens, int64_t dim, int64_t vocab) {
  const odyssey::SequenceTile tile = odyssey::loss_sequence_tile(0, vocab, 1, tokens);
  const FusedLossTiles t = fused_loss_tiles(1, tile.positions, vocab);
  return LinearCrossEntropyShape{tokens, dim, vocab, t.seq_tile, t.vocab_tile};
}

void bench_lce(int64_t tokens) {
  // Llama-3.2-1B head: d = 2048, V = 128256, bf16. The full-tile run needs tokens*V*6 bytes.
  const int64_t dim = 2048, vocab = 128256;
  const KernelDtype dtype = KernelDtype::BF16;
  Buffer h(tokens * dim * 2), w(vocab * dim * 2), labels(tokens * 8), loss(tokens * 4), dh(tokens * dim * 2);
  Buffer dw(static_cast<size_t>(vocab * dim) * 4);
  // Three tilings of one algorithm, side by side: the kernel's default 8192 x 8192 tiles (the
  // logits twice: 4 head GEMMs), the training step's whole rows of the loss tile (3 GEMMs), and the
  // widest tiles the plan accepts (whole rows in as many tokens as cuBLAS's int allows).
  const LinearCrossEntropyShape tiled{tokens, dim, vocab, 0, 0}, step = step_tiles(tokens, dim, vocab),
                                                                 full = widest_vocab_tiles(tokens, dim, vocab);
  const LceTilePlan plan = plan_linear_cross_entropy(dtype, tiled), step_plan = plan_linear_cross_entropy(dtype, step),
                    full_plan = plan_linear_cross_entropy(dtype, full);
  // Milliseconds of one call over `shape`, or -1 when its workspace would not leave 1 GiB free.
  auto time_tiling = [&](const LinearCrossEntropyShape& shape, const LceTilePlan& p) {
    size_t free_bytes = 0, total = 0;
    ODYSSEY_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    if (p.bytes + (size_t{1} << 30) >= free_bytes) return -1.0;
    Buffer ws(p.bytes);
    return time_ms(
        [&] {
          linear_cross_entropy(dtype, h.p, w.p, labels.as<int64_t>(), shape, 1.0f, loss.as<float>(), dh.p,
                               dw.as<float>(), ws.p, p.bytes, nullptr, nullptr);
        },
        1, 3);
  };
  const double fused = time_tiling(tiled, plan), step_ms = time_tiling(step, step_plan),
               one_tile = time_tiling(full, full_plan);
  // Floor: logits, dhidden and dweight GEMMs once each, bf16 in, fp32 out (tiled to fit memory).
  cublasHandle_t handle;
  cublasCreate(&handle);
  const int64_t vt = plan.vocab_tile, tt = plan.seq_tile;
  Buffer c(static_cast<size_t>(tt * vt) * 4), g(static_cast<size_t>(tt * vt) * 2),
      acc(static_cast<size_t>(tt * dim) * 4);
  const float one = 1.0f, zero = 0.0f;
  const double gemms = time_ms(
      [&] {
        for (int64_t t0 = 0; t0 < tokens; t0 += tt)
          for (int64_t v0 = 0; v0 < vocab; v0 += vt) {
            const int m = static_cast<int>(std::min(vt, vocab - v0)), n = static_cast<int>(std::min(tt, tokens - t0));
            const char* wt = static_cast<const char*>(w.p) + v0 * dim * 2;
            const char* ht = static_cast<const char*>(h.p) + t0 * dim * 2;
            cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, dim, &one, wt, CUDA_R_16BF, dim, ht, CUDA_R_16BF, dim,
                         &zero, c.p, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, dim, n, m, &one, wt, CUDA_R_16BF, dim, g.p, CUDA_R_16BF, m,
                         &one, acc.p, CUDA_R_32F, dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, dim, m, n, &one, ht, CUDA_R_16BF, dim, g.p, CUDA_R_16BF, m,
                         &one, dw.as<float>() + v0 * dim, CUDA_R_32F, dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
          }
      },
      1, 3);
  cublasDestroy(handle);
  const double flops = 6.0 * tokens * vocab * dim;
  // a/b as JSON, or null when either run was skipped (-1: its workspace would not fit)
  auto ratio = [](double a, double b) {
    char text[32];
    if (a <= 0 || b <= 0) return std::string("null");
    std::snprintf(text, sizeof text, "%.3f", a / b);
    return std::string(text);
  };
  std::printf(
      "{\"bench\":\"linear_cross_entropy\",\"dtype\":\"bf16\",\"tokens\":%lld,\"dim\":%lld,\"vocab\":%lld,"
      "\"fused_ms\":%.3f,\"fused_tflops_equiv\":%s,\"workspace_bytes\":%zu,\"wide_tile_tokens\":%lld,"
      "\"wide_tile_ms\":%.3f,\"wide_tile_workspace_bytes\":%zu,\"step_tile_tokens\":%lld,"
      "\"step_tile_ms\":%.3f,\"step_tile_workspace_bytes\":%zu,\"step_vs_fused\":%s,"
      "\"three_gemm_floor_ms\":%.3f,\"fused_vs_floor\":%s,\"step_vs_floor\":%s}\n",
      static_cast<long long>(tokens), static_cast<long long>(dim), static_cast<long long>(vocab), fused,
      ratio(flops / 1e9, fused).c_str(), plan.bytes, static_cast<long long>(full_plan.seq_tile), one_tile,
      full_plan.bytes, static_cast<long long>(step_plan.seq_tile), step_ms, step_plan.bytes,
      ratio(step_ms, fused).c_str(), gemms, ratio(gemms, fused).c_str(), ratio(gemms, step_ms).c_str());
}

void bench_offload() {
  // Llama-3.2-1B block input at 32K tokens, bf16: 128 MiB. Pinned slab vs pageable host memory.
  const size_t bytes = size_t{32768} * 2048 * 2;
  SlabLayout layout;
  layout.add(bytes);
  PinnedSlab pinned(layout);
  std::vector<unsigned char> pageable(bytes);
  Buffer dev(bytes);
  const double d2h_pinned = time_ms(
      [&] { ODYSSEY_CUDA_CHECK(cudaMemcpyAsync(pinned.region(0), dev.p, bytes, cudaMemcpyDeviceToHost, nullptr)); });
  const double h2d_pinned = time_ms(
      [&] { ODYSSEY_CUDA_CHECK(cudaMemcpyAsync(dev.p, pinned.region(0), bytes, cudaMemcpyHostToDevice, nullptr)); });
  const double d2h_pageable =
      time_ms([&] { ODYSSEY_CUDA_CHECK(cudaMemcpy(pageable.data(), dev.p, bytes, cudaMemcpyDeviceToHost)); });
  const double h2d_pageable =
      time_ms([&] { ODYSSEY_CUDA_CHECK(cudaMemcpy(dev.p, pageable.data(), bytes, cudaMemcpyHostToDevice)); });
  auto gbps = [&](double ms) { return bytes / ms / 1e6; };
  std::printf(
      "{\"bench\":\"offload\",\"bytes\":%zu,\"d2h_pinned_gbps\":%.1f,\"h2d_pinned_gbps\":%.1f,"
      "\"d2h_pageable_gbps\":%.1f,\"h2d_pageable_gbps\":%.1f}\n",
      bytes, gbps(d2h_pinned), gbps(h2d_pinned), gbps(d2h_pageable), gbps(h2d_pageable));
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "all";
  int64_t tokens = 32768;
  bool dry_run = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
      tokens = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--dry-run") == 0) {
      dry_run = true;
    } else {
      which = argv[i];
    }
  }
  if (which != "all" && which != "rmsnorm" && which != "rope" && which != "swiglu" && which != "lce" &&
      which != "offload") {
    std::fprintf(stderr, "odyssey_kernel_bench: unknown benchmark '%s' (all, rmsnorm, rope, swiglu, lce, offload)\n",
                 which.c_str());
    return 2;
  }
  if (tokens <= 0) {
    std::fprintf(stderr, "odyssey_kernel_bench: --tokens must be positive\n");
    return 2;
  }
  if (dry_run) {
    // The runbook's CPU dry run (scripts/gpu/validate.sh --cpu-dry-run): every host-side decision of
    // the selected benchmarks (the fused loss's tile plans above all), no device call.
    try {
      if (which == "lce" || which == "all") {
        const LceTilePlan tiled = plan_linear_cross_entropy(KernelDtype::BF16, {tokens, 2048, 128256, 0, 0});
        const LceTilePlan wide = plan_linear_cross_entropy(KernelDtype::BF16, widest_vocab_tiles(tokens, 2048, 128256));
        const LceTilePlan step = plan_linear_cross_entropy(KernelDtype::BF16, step_tiles(tokens, 2048, 128256));
        std::printf(
            "{\"bench\":\"linear_cross_entropy\",\"dry_run\":true,\"tokens\":%lld,\"workspace_bytes\":%zu,"
            "\"wide_tile_tokens\":%lld,\"wide_tile_workspace_bytes\":%zu,\"step_tile_tokens\":%lld,"
            "\"step_tile_workspace_bytes\":%zu,\"step_head_gemms\":%d}\n",
            static_cast<long long>(tokens), tiled.bytes, static_cast<long long>(wide.seq_tile), wide.bytes,
            static_cast<long long>(step.seq_tile), step.bytes, lce_head_gemms(step.n_vocab_tiles));
      }
      for (const char* name : {"rmsnorm", "rope", "swiglu", "offload"})
        if (which == name || which == "all")
          std::printf("{\"bench\":\"%s\",\"dry_run\":true,\"tokens\":%lld}\n", name, static_cast<long long>(tokens));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "odyssey_kernel_bench: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  try {
    cudaDeviceProp prop{};
    ODYSSEY_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("{\"device\":\"%s\",\"sms\":%d,\"l2_bytes\":%d}\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odyssey_kernel_bench: %s\n", e.what());
    return 1;
  }
  // Each benchmark stands alone: one that fails says so in its own JSON line and the rest still run.
  int failed = 0;
  auto stage = [&](const char* name, const std::function<void()>& run) {
    if (which != name && which != "all") return;
    try {
      run();
    } catch (const std::exception& e) {
      ++failed;
      std::string why = e.what();
      for (char& c : why)
        if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '\'';  // stays one JSON string
      std::printf("{\"bench\":\"%s\",\"error\":\"%s\"}\n", name, why.c_str());
      cudaGetLastError();  // clear a sticky launch error so the next stage starts clean
    }
  };
  stage("rmsnorm", [&] { bench_rmsnorm(tokens); });
  stage("rope", [&] {
    bench_rope(tokens);
    bench_rope_rotate(tokens);
  });
  stage("swiglu", [&] { bench_swiglu(tokens); });
  stage("lce", [&] { bench_lce(tokens); });
  stage("offload", [&] { bench_offload(); });
  return failed == 0 ? 0 : 1;
}
