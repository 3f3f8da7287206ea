// The rule of engine/layout/sdpa_fallback.h: standard attention leaves SDPA only where SDPA has just
// its math backend (CUDA fp32 over GQA), and only the kernel it runs there repeats K and V.
// defines: test cases [layout][kernels]
#include <catch2/catch.hpp>

#include "engine/layout/sdpa_fallback.h"

using namespace odyssey;

TEST_CASE("standard attention leaves SDPA only where SDPA has just its math backend: CUDA fp32 over GQA",
          "[layout][kernels]") {
  // (SDPA's backends in LibTorch 2.11: math takes any call; flash and cuDNN fp16/bf16 only, GQA
  // natively; memory-efficient any dtype, equal head counts only; the CPU's flash any dtype, GQA natively.)
  LseKernelQuery q{.cuda = true, .half_precision = false, .head_dim = 64};
  CHECK(sdpa_has_only_math(q, 4, 1));
  CHECK(sdpa_has_only_math(q, 8, 4));
  CHECK_FALSE(sdpa_has_only_math(q, 4, 4));  // the memory-efficient kernel takes it
  q.half_precision = true;
  CHECK_FALSE(sdpa_has_only_math(q, 4, 1));  // flash and cuDNN take GQA
  q = {.cuda = false, .half_precision = false, .head_dim = 64};
  CHECK_FALSE(sdpa_has_only_math(q, 4, 1));  // the CPU's flash kernel takes GQA
  // ... and the kernel it runs instead repeats K and V; no other kernel does, nor this one without GQA
  q.cuda = true;
  CHECK(lse_attention_kernel(q) == LseKernel::CudaEfficient);
  CHECK(kernel_repeats_kv(lse_attention_kernel(q), 4, 1));
  CHECK_FALSE(kernel_repeats_kv(LseKernel::CudaEfficient, 4, 4));
  for (LseKernel k : {LseKernel::CpuFlash, LseKernel::CudaFlash2, LseKernel::CudaCudnn})
    CHECK_FALSE(kernel_repeats_kv(k, 4, 1));
}
