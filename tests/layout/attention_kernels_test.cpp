// The log-sum-exp paths' kernel rule of engine/layout/attention_kernels.h, case by case: the
// device, the dtype, the head dim, packed documents and memory.lse_attention_kernel's choice.
// defines: test cases [layout][kernels]
#include <catch2/catch.hpp>

#include <string>

#include "engine/layout/attention_kernels.h"

using namespace odyssey;

// cudnn_could_run is checked beside each case: the one condition the rule, the tuner and the
// describe text share.
TEST_CASE("lse kernel rule: CPU flash, fp32 memory-efficient, cuDNN where it takes the shape", "[layout][kernels]") {
  LseKernelQuery q{.cuda = false, .half_precision = true, .head_dim = 64};
  for (LseKernelChoice c : {LseKernelChoice::Auto, LseKernelChoice::Cudnn, LseKernelChoice::Flash2}) {
    q.choice = c;
    CHECK(lse_attention_kernel(q) == LseKernel::CpuFlash);  // the CPU has one kernel, whatever is asked
  }
  CHECK_FALSE(cudnn_could_run(q));
  q = {.cuda = true, .half_precision = false, .head_dim = 64};
  CHECK(lse_attention_kernel(q) == LseKernel::CudaEfficient);  // flash and cuDNN take fp16/bf16 only
  CHECK_FALSE(cudnn_could_run(q));
  q.half_precision = true;
  CHECK(cudnn_could_run(q));
  CHECK(lse_attention_kernel(q) == LseKernel::CudaCudnn);
  q.choice = LseKernelChoice::Flash2;
  CHECK(lse_attention_kernel(q) == LseKernel::CudaFlash2);
  q.choice = LseKernelChoice::Auto;
  // head dims: multiples of 8 up to 128
  for (int64_t hd : {8, 16, 64, 96, 128}) {
    q.head_dim = hd;
    INFO("hd " << hd);
    CHECK(lse_attention_kernel(q) == LseKernel::CudaCudnn);
    CHECK(std::string(cudnn_choice_refusal(q)).empty());
    CHECK(cudnn_could_run(q));
  }
  for (int64_t hd : {12, 100, 136, 256}) {
    q.head_dim = hd;
    INFO("hd " << hd);
    CHECK(lse_attention_kernel(q) == LseKernel::CudaFlash2);
    CHECK(std::string(cudnn_choice_refusal(q)).find("multiples of 8 up to 128") != std::string::npos);
    CHECK_FALSE(cudnn_could_run(q));
  }
  // packed documents: FlashAttention-2 per segment
  q.head_dim = 64;
  q.packed_documents = true;
  CHECK(lse_attention_kernel(q) == LseKernel::CudaFlash2);
  CHECK(std::string(cudnn_choice_refusal(q)).find("packed documents") != std::string::npos);
  CHECK_FALSE(cudnn_could_run(q));
  // ... in one variable-length call on CUDA in half precision; one call per segment elsewhere
  CHECK(documents_run_varlen(q));
  q.half_precision = false;
  CHECK_FALSE(documents_run_varlen(q));
  q.half_precision = true;
  q.cuda = false;
  CHECK_FALSE(documents_run_varlen(q));
  q.cuda = true;
  q.packed_documents = false;
  CHECK_FALSE(documents_run_varlen(q));
}

TEST_CASE("lse kernel names: plan --json's and the studio's words", "[layout][kernels]") {
  CHECK(std::string(lse_kernel_name(LseKernel::CpuFlash)) == "cpu_flash");
  CHECK(std::string(lse_kernel_name(LseKernel::CudaEfficient)) == "efficient");
  CHECK(std::string(lse_kernel_name(LseKernel::CudaFlash2)) == "flash2");
  CHECK(std::string(lse_kernel_name(LseKernel::CudaCudnn)) == "cudnn");
  CHECK(std::string(lse_kernel_label(LseKernel::CudaCudnn)) == "cuDNN attention");
  CHECK(std::string(lse_kernel_label(LseKernel::CudaFlash2)) == "FlashAttention-2");
}
