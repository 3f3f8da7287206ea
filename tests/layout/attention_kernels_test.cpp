// The log-sum-exp paths' kernel rule of engine/layout/attention_kernels.h, case by case: the
// device, the dtype, the head dim, packed documents and memory.lse_attention_kernel's choice.
// defines: test cases [layout][kernels]
#include <catch2/catch.hpp>

#include <string>

#include "engine/layout/attention_kernels.h"
#include "engine/layout/planned_buffers.h"

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

TEST_CASE(
    "lse positions: the memory-efficient kernel pads the log-sum-exp to 32, the others do not, and a kept "
    "payload counts the padded length",
    "[layout][kernels]") {
  // ATen's memory-efficient kernel returns its log-sum-exp as [B, h, ceil(S / 32) x 32] (kAlignLSE);
  // a kept one travels so (memory.offload_kept_attention on CUDA in fp32), and the store sized by
  // the rule must hold it. Pure integer arithmetic.
  for (const LseKernel k : {LseKernel::CpuFlash, LseKernel::CudaFlash2, LseKernel::CudaCudnn}) {
    CHECK(lse_positions(k, 1000) == 1000);
    CHECK(lse_positions(k, 1024) == 1024);
  }
  CHECK(lse_positions(LseKernel::CudaEfficient, 1000) == 1024);
  CHECK(lse_positions(LseKernel::CudaEfficient, 1024) == 1024);
  CHECK(lse_positions(LseKernel::CudaEfficient, 1) == 32);
  // 2 rows, 4 heads of 8 over 1000 tokens in fp32, stages of 2 heads: the output 2 x 1000 x 4 x 8 x
  // 4 B = 256000 B (a multiple of 256), then 2 stages of 2 x 2 x 1024 x 4 B = 16384 B each
  const KeptAttentionPayload p =
      kept_attention_step_payload(2, 1000, 4, 8, 4, 2, lse_positions(LseKernel::CudaEfficient, 1000));
  CHECK(p.out_bytes == 256000);
  CHECK(p.lse_bytes == 16384);
  CHECK(p.lse_parts == 2);
  CHECK(p.bytes() == 256000 + 2 * 16384);
  // on the CPU's kernel the same shape's log-sum-exp is 2 x 2 x 1000 x 4 B = 16000 B, each part
  // starting at a multiple of 256 B: 256000, 256000 + 16128
  const KeptAttentionPayload cpu = kept_attention_step_payload(2, 1000, 4, 8, 4, 2, 1000);
  CHECK(cpu.lse_bytes == 16000);
  CHECK(cpu.offset(2) == 256000 + 16128);
  CHECK(cpu.bytes() == 256000 + 2 * 16128);
}
