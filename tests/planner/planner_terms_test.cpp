// Hand-computed plans: small configs whose every term is worked out here by hand from
// docs/planner.md (bytes of each tensor at the peak), checked term by term and category by
// category against plan_memory; plus the published-scale model states and host pool.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/preset.h"
#include "engine/config/validate.h"
#include "engine/layout/documents.h"
#include "engine/layout/heads.h"
#include "engine/planner/plan_shapes.h"
#include "engine/planner/planner.h"
#include "engine/planner/step_walk.h"
#include "kernels/linear_cross_entropy_plan.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

/// L=2, d=64, H=4, Hkv=2, hd=16, f=160, V=96, S=2048, fp32, W=2 with FSDP and Ulysses 2,
/// checkpointing, tiled MLP (32-token tiles) and tiled loss (64-token tiles), on the cpu profile
/// (no runtime overhead; offloaded inputs are host clones, not a pinned slab).
RunConfig small_config() {
  RunConfig c;
  c.model.flavor = "custom";
  c.model.n_layers = 2;
  c.model.d_model = 64;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 16;
  c.model.d_ffn = 160;
  c.model.vocab_size = 96;
  c.training.seq_len = 2048;
  c.training.dtype = DType::Float32;
  c.parallel.world_size = 2;
  c.parallel.fsdp = true;
  c.parallel.ulysses_degree = 2;
  c.memory.activation_checkpointing = true;
  c.memory.tiled_mlp = true;
  c.memory.mlp_tile_tokens = 32;
  c.memory.tiled_loss = true;
  c.memory.loss_tile_tokens = 64;
  c.hardware = *find_hardware_profile("cpu");
  return c;
}

/// small_config on one rank: no FSDP, no Ulysses.
RunConfig small_config_one_rank() {
  RunConfig c = small_config();
  c.parallel.world_size = 1;
  c.parallel.fsdp = false;
  c.parallel.ulysses_degree = 1;
  return c;
}

int64_t term_bytes(const MemoryPlan& plan, const std::string& name) {
  int64_t sum = 0;
  for (const auto& t : plan.terms)
    if (t.name == name) sum += t.bytes;
  return sum;
}

int64_t cat(const MemoryPlan& plan, PlanCategory c) { return plan.category_bytes[static_cast<int>(c)]; }

/// Comm-buffer bytes at the peak of one phase of the plan.
int64_t comm_bytes(const MemoryPlan& plan, const std::string& phase) {
  for (const auto& p : plan.phases)
    if (p.name == phase) return p.category_bytes[static_cast<int>(PlanCategory::CommBuffers)];
  FAIL("no phase " << phase);
  return 0;
}

}  // namespace

TEST_CASE("small config: every term at the peak matches the hand computation", "[planner][terms]") {
  const RunConfig cfg = small_config();
  REQUIRE(validate(cfg).empty());
  const MemoryPlan plan = plan_memory(cfg);

  // Shapes: s = t = 1024 local tokens, S = 2048 in the head layout, H/P = 2 query heads and 1 KV
  // head per rank. fp32 so c = 4.
  const int64_t D = 1024 * 64 * 4;            // [1, 1024, 64] hidden
  const int64_t QH = 2048 * 2 * 16 * 4;       // [1, 2048, 2, 16] q / SDPA output / dq in the head layout
  const int64_t KVH = 2048 * 1 * 16 * 4;      // [1, 2048, 1, 16] k, v, dk, dv
  const int64_t LSE = 2 * 2048 * 4;           // [1, 2, 2048] fp32
  const int64_t RSTD = 1024 * 4;              // [1, 1024] fp32
  const int64_t SCRATCH = 2 * 256 * 512 * 4;  // the CPU flash backward's blocks, one thread
  // Parameters: block = 64*64 + 2*64*32 + 64*64 (attention) + 3*64*160 (MLP) + 2*64 (norms) = 43136;
  // embedding 96*64 = 6144; head = final norm 64 + LM head 6144 = 6208. Shards over W = 2.
  const int64_t shard_elems = 2 * (43136 / 2) + 6144 / 2 + 6208 / 2;  // 49312
  CHECK(term_bytes(plan, "fp32 master shards") == shard_elems * 4);
  CHECK(term_bytes(plan, "fp32 gradient shards") == shard_elems * 4);
  CHECK(term_bytes(plan, "AdamW moments (exp_avg, exp_avg_sq)") == shard_elems * 8);
  // The peak: block 1's attention backward inside the flash-attention backward.
  CHECK(plan.peak_phase == "bwd/block.1/attn");
  CHECK(term_bytes(plan, "block parameters (unsharded)") == 43136 * 4);
  CHECK(term_bytes(plan, "block parameters (unsharded, prefetch)") == 43136 * 4);
  CHECK(term_bytes(plan, "checkpointed block inputs") == 2 * D);  // both layers' inputs
  // dy from the tiled loss; the block backward writes dh and dx into it (one buffer)
  CHECK(term_bytes(plan, "gradient between blocks (dy; dh, dx in place)") == D);
  CHECK(term_bytes(plan, "residual h = x + attention") == 0);  // freed after the MLP backward
  CHECK(term_bytes(plan, "dh = dy + d(MLP)") == 0);
  CHECK(term_bytes(plan, "attention rmsnorm output") == D);
  CHECK(term_bytes(plan, "attention rmsnorm 1/rms") == RSTD);
  CHECK(term_bytes(plan, "q after all-to-all (head layout)") == QH);
  CHECK(term_bytes(plan, "k after all-to-all (head layout)") == KVH);
  CHECK(term_bytes(plan, "v after all-to-all (head layout)") == KVH);
  CHECK(term_bytes(plan, "SDPA output (head layout)") == QH);
  CHECK(term_bytes(plan, "SDPA log-sum-exp") == LSE);
  // the MLP's backward is over: its three projections' and its norm's weight gradients wait for
  // the block's reduce-scatter
  for (const char* projection :
       {"gate-projection weight gradient", "up-projection weight gradient", "down-projection weight gradient"})
    CHECK(term_bytes(plan, projection) == 64 * 160 * 4);
  CHECK(term_bytes(plan, "MLP rmsnorm weight gradient") == 64 * 4);
  // Inside the kernel's backward only o_proj's weight gradient exists: its node ran first; the
  // q/k/v projections' and the norm's nodes come after the kernel's (an H200 measured the 8B
  // without the q/k/v ones there).
  CHECK(term_bytes(plan, "o_proj weight gradient") == 64 * 64 * 4);
  CHECK(term_bytes(plan, "q/k/v weight gradients") == 0);
  CHECK(term_bytes(plan, "attention rmsnorm weight gradient") == 0);
  CHECK(term_bytes(plan, "d o after all-to-all (head layout)") == QH);
  CHECK(term_bytes(plan, "flash backward dq") == QH);
  CHECK(term_bytes(plan, "flash backward dk") == KVH);
  CHECK(term_bytes(plan, "flash backward dv") == KVH);
  // The CPU flash backward (cpu profile): GQA native, dq accumulated in place, one thread's
  // attn and grad_attn blocks of 256 x 512 fp32 (the query length 2048 >= 768). FA-2's buffers
  // are CUDA-only (checked on a GPU profile below).
  CHECK(term_bytes(plan, "CPU flash backward scratch") == SCRATCH);
  CHECK(term_bytes(plan, "flash backward dq accumulator (fp32)") == 0);
  CHECK(term_bytes(plan, "flash backward dk at query-head count (GQA)") == 0);
  CHECK(term_bytes(plan, "token ids, labels (int64)") == 2 * 1024 * 8);
  // one row of positions and of cos and sin tables [1024, hd/2 = 8] fp32, shared by the batch
  CHECK(term_bytes(plan, "RoPE positions (int64)") == 1024 * 8);
  CHECK(term_bytes(plan, "RoPE cos/sin tables (fp32)") == 2 * 1024 * 8 * 4);

  // Categories at the peak, summed by hand.
  CHECK(cat(plan, PlanCategory::Params) == 197248);
  CHECK(cat(plan, PlanCategory::Grads) == 197248);
  CHECK(cat(plan, PlanCategory::Optimizer) == 394496);
  CHECK(cat(plan, PlanCategory::GatheredParams) == 2 * 172544);
  CHECK(cat(plan, PlanCategory::SavedActivations) == 2 * D);
  CHECK(cat(plan, PlanCategory::AttentionWorkspace) == D + RSTD + QH + LSE + 64 * 64 * 4 + QH + 2 * KVH + SCRATCH);
  CHECK(cat(plan, PlanCategory::MlpWorkspace) == 123136);
  CHECK(cat(plan, PlanCategory::LossWorkspace) == D);
  CHECK(cat(plan, PlanCategory::CommBuffers) == QH + 2 * KVH + QH);
  CHECK(cat(plan, PlanCategory::Other) == 3 * 1024 * 8 + 2 * 1024 * 8 * 4);
  CHECK(cat(plan, PlanCategory::Offloaded) == 0);
  CHECK(plan.peak_bytes == 5054208);  // the sum of the above, added up by hand
  int64_t device_terms = 0;
  for (const auto& t : plan.terms)
    if (!t.host) device_terms += t.bytes;
  CHECK(device_terms == plan.peak_bytes);

  CHECK(term_bytes(plan, "flash backward softmax_d (fp32)") == 0);
  CHECK(term_bytes(plan, "cuBLAS workspaces") == 0);

  // The same config on a GPU profile: FlashAttention-2's softmax_d ([B, H/P, S] fp32, the LSE's
  // shape), fp32 dq accumulator (its head dim padded to 32: 16 -> 32) and, with GQA, dK/dV at the
  // query-head count instead of the CPU kernel's blocks; and the two threads' cuBLAS workspaces,
  // 4096 KiB x 8 each.
  RunConfig gpu = cfg;
  gpu.hardware = *find_hardware_profile("h100-sxm");
  const MemoryPlan on_gpu = plan_memory(gpu);
  CHECK(on_gpu.peak_phase == "bwd/block.1/attn");
  CHECK(term_bytes(on_gpu, "flash backward dq accumulator (fp32)") == 2 * QH);  // fp32 = c here, hd 16 -> 32
  CHECK(term_bytes(on_gpu, "flash backward dk at query-head count (GQA)") == QH);
  CHECK(term_bytes(on_gpu, "flash backward dv at query-head count (GQA)") == QH);
  CHECK(term_bytes(on_gpu, "CPU flash backward scratch") == 0);
  CHECK(term_bytes(on_gpu, "flash backward softmax_d (fp32)") == LSE);
  CHECK(term_bytes(on_gpu, "cuBLAS workspaces") == 2 * 4096 * 1024 * 8);

  // FA-2 pads its fp32 buffers' query rows to a multiple of 128 (mha_bwd's seqlen_q_rounded):
  // S = 2000 (s = 1000 a rank) takes 2048 rows, the padding's 48 of them included.
  RunConfig ragged = gpu;
  ragged.training.seq_len = 2000;
  REQUIRE(validate(ragged).empty());
  const planner_detail::PlanShapes rs = planner_detail::make_shapes(ragged);
  CHECK(planner_detail::kind_bytes(planner_detail::TensorKind::SoftmaxD, rs) == 2048 * 2 * 4);
  CHECK(planner_detail::kind_bytes(planner_detail::TensorKind::DqAccum, rs) == 2048 * 2 * 32 * 4);
  // the forward's own log-sum-exp: fp32 on a GPU runs the memory-efficient kernel, which pads its
  // positions to a multiple of 32 (lse_positions): 2000 -> 2016, as the engine allocates it
  CHECK(planner_detail::kind_bytes(planner_detail::TensorKind::Lse, rs) == 2016 * 2 * 4);
  // in bf16 FlashAttention-2 or cuDNN returns it exact
  RunConfig ragged_bf16 = ragged;
  ragged_bf16.training.dtype = DType::BFloat16;
  REQUIRE(validate(ragged_bf16).empty());
  CHECK(planner_detail::kind_bytes(planner_detail::TensorKind::Lse, planner_detail::make_shapes(ragged_bf16)) ==
        2000 * 2 * 4);
}

TEST_CASE("the RoPE positions and tables have one row, or one a sequence where positions restart per document",
          "[planner][terms]") {
  // rope_position_rows (engine/layout/documents.h), the rows make_positions builds: fp32 tables
  // [rows, s, hd/2] whatever the compute dtype, int64 positions [rows, s]
  RunConfig cfg = small_config();
  cfg.training.batch_size = 3;
  cfg.training.dtype = DType::BFloat16;
  REQUIRE(validate(cfg).empty());
  namespace pd = planner_detail;
  const pd::PlanShapes shared = pd::make_shapes(cfg);
  CHECK(pd::kind_bytes(pd::TensorKind::PositionIds, shared) == 1024 * 8);
  CHECK(pd::kind_bytes(pd::TensorKind::RopeTable, shared) == 1024 * 8 * 4);
  CHECK(pd::kind_bytes(pd::TensorKind::TokenIds, shared) == 3 * 1024 * 8);
  RunConfig documents = cfg;
  documents.training.dataset = DatasetKind::Documents;
  documents.training.dataset_path = "unused.odoc";
  documents.training.document_mask = true;
  for (const DocumentPositions positions : {DocumentPositions::Restart, DocumentPositions::Continue}) {
    documents.training.document_positions = positions;
    const int64_t rows = positions == DocumentPositions::Restart ? 3 : 1;
    const pd::PlanShapes s = pd::make_shapes(documents);
    CHECK(pd::kind_bytes(pd::TensorKind::PositionIds, s) == rows * 1024 * 8);
    CHECK(pd::kind_bytes(pd::TensorKind::RopeTable, s) == rows * 1024 * 8 * 4);
  }
}

TEST_CASE("small config with offload: two inputs on the device, the rest in the host pool", "[planner][terms]") {
  RunConfig cfg = small_config();
  cfg.model.n_layers = 4;
  cfg.memory.offload_activations = true;
  REQUIRE(validate(cfg).empty());
  const MemoryPlan plan = plan_memory(cfg);
  const int64_t D = 1024 * 64 * 4;
  // Backward of block i (1 <= i <= 3): block i's input and block i-1's prefetched input.
  CHECK(cat(plan, PlanCategory::SavedActivations) == 2 * D);
  // Host: the inputs of blocks 1..2 (block 0's is looked up again from the token ids, the last
  // block's stays on the device), one clone each on the cpu profile. Two ranks per node (world size 2).
  CHECK(term_bytes(plan, "offloaded block inputs") == 2 * D);
  CHECK(plan.host_bytes == 2 * 2 * D);
  CHECK(cat(plan, PlanCategory::Offloaded) == 2 * D);
  for (const auto& t : plan.terms)
    if (t.name == "offloaded block inputs") {
      CHECK(t.host);
      CHECK(t.count == 2);
      CHECK(t.formula == "2 x (1 x 1K tokens x 64 x 4 B)");
    }

  // A GPU profile: one pinned slab of the same two inputs, held through every phase of the step
  // (engine/memory/offload_cuda.cpp allocates it once), with nothing else on the host.
  cfg.hardware = *find_hardware_profile("h100-sxm");
  const MemoryPlan on_gpu = plan_memory(cfg);
  CHECK(term_bytes(on_gpu, "offloaded block inputs") == 2 * D);
  CHECK(on_gpu.host_bytes == 2 * 2 * D);
  for (const auto& p : on_gpu.phases) {
    INFO(p.name);
    CHECK(p.host_bytes == 2 * D);
  }
}

TEST_CASE("no techniques, fp32, one rank: model states are 16 B per parameter and nothing is gathered",
          "[planner][terms]") {
  RunConfig cfg = small_config_one_rank();
  cfg.memory = MemoryConfig{};
  REQUIRE(validate(cfg).empty());
  const MemoryPlan plan = plan_memory(cfg);
  const int64_t n = 2 * 43136 + 6144 + 6208;
  CHECK(cat(plan, PlanCategory::Params) == 4 * n);
  CHECK(cat(plan, PlanCategory::Grads) == 4 * n);
  CHECK(cat(plan, PlanCategory::Optimizer) == 8 * n);
  CHECK(cat(plan, PlanCategory::GatheredParams) == 0);  // fp32 without FSDP: full is master itself
  // Untiled loss with V=96: the peak is in the loss backward or a block backward, never forward.
  CHECK(plan.peak_phase.rfind("bwd/", 0) == 0);
}

TEST_CASE("llama3-8b on 8xH100: 15.0 GiB of model states with FSDP, 119.7 unsharded, host pool per node",
          "[planner][terms]") {
  const LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3-8b-3m-8xh100.toml");
  REQUIRE(loaded.ok());
  const MemoryPlan plan = plan_memory(loaded.config);
  // Shards: 32 x 218,112,000/8 + 525,336,576/8 + 525,340,672/8 = 1,003,782,656 parameters per rank.
  const int64_t shard = 1003782656;
  CHECK(cat(plan, PlanCategory::Params) == 4 * shard);
  CHECK(cat(plan, PlanCategory::Grads) == 4 * shard);
  CHECK(cat(plan, PlanCategory::Optimizer) == 8 * shard);
  // One block input [1, 384K, 4096] bf16 is exactly 3 GiB; 30 offloaded (blocks 1..30) into one
  // pinned slab per rank (no staging: the copies go straight into its regions), eight ranks per node.
  const int64_t D = int64_t{3} << 30;
  CHECK(term_bytes(plan, "offloaded block inputs") == 30 * D);
  CHECK(plan.host_bytes == 8 * 30 * D);
  CHECK(plan.fits_host);

  RunConfig unsharded = loaded.config;
  unsharded.parallel.fsdp = false;
  const MemoryPlan full = plan_memory(unsharded);
  const int64_t n = 8030261248;  // Llama 3 8B
  CHECK(cat(full, PlanCategory::Params) + cat(full, PlanCategory::Grads) + cat(full, PlanCategory::Optimizer) ==
        16 * n);
}

TEST_CASE("every term carries its formula with the values plugged in", "[planner][terms]") {
  const LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3-8b-3m-8xh100.toml");
  REQUIRE(loaded.ok());
  const MemoryPlan plan = plan_memory(loaded.config);
  std::map<std::string, std::string> formula;
  for (const auto& t : plan.terms) {
    CHECK_FALSE(t.formula.empty());
    formula[t.name] = t.formula;
  }
  CHECK(formula["offloaded block inputs"] == "30 x (1 x 384K tokens x 4096 x 2 B)");
  CHECK(formula["q after all-to-all (head layout)"] == "1 x 3M tokens x 4 heads x 128 x 2 B");
  CHECK(formula["fp32 master shards"] ==
        "(32 blocks x 218.1M + 525.3M embedding + 525.3M head) params / 8 ranks x 4 B");
  RunConfig one = loaded.config;  // FSDP over one rank: "/ 1 rank", not "/ 1 ranks"
  one.parallel.world_size = 1;
  one.parallel.ulysses_degree = 1;
  for (const auto& t : plan_memory(one).terms)
    if (t.name == "fp32 master shards") CHECK_THAT(t.formula, Catch::EndsWith("params / 1 rank x 4 B"));
}

TEST_CASE("FSDP overlap: a prefetch's all-gather input and a deferred reduce-scatter's buffers stay in flight",
          "[planner][terms]") {
  // The small config (block = 43136 parameters, shard 21568 over W = 2) in bf16 on a GPU profile,
  // where the engine defers each block's reduce-scatter (StepRuntime::defer_reduce_scatter).
  RunConfig cfg = small_config();
  cfg.training.dtype = DType::BFloat16;
  cfg.hardware = *find_hardware_profile("h100-sxm");
  REQUIRE(validate(cfg).empty());
  const MemoryPlan plan = plan_memory(cfg);
  auto comm = [&](const std::string& phase) { return comm_bytes(plan, phase); };
  // Block 0's forward started block 1's all-gather: its bf16 input shard lives through block 0's
  // compute (block 1, the last, prefetches nothing). The all-to-all buffers are the same in both.
  CHECK(comm("fwd/block.0/attn") - comm("fwd/block.1/attn") == 21568 * 2);
  // Block 1's reduction (fp32 pack of the block and fp32 output shard) is in flight during block
  // 0's backward; block 1's own backward has none in flight and block 0's prefetches nothing.
  CHECK(comm("bwd/block.0/mlp") - comm("bwd/block.1/mlp") == (43136 + 21568) * 4 - 21568 * 2);

  // Time: the deferred reduce-scatters take no phase of their own (the phase holds only the
  // gradient's pack, read 2 and write 4 B a parameter of the padded block, and its copy into the
  // shard, 8 B a shard element, at device_memory_gbps); the lowest block's is exposed after the
  // embedding backward.
  auto phase_time = [](const MemoryPlan& p, const std::string& phase) {
    for (const auto& ph : p.phases)
      if (ph.name == phase) return ph.time_s;
    FAIL("no phase " << phase);
    return 0.0;
  };
  CHECK(phase_time(plan, "bwd/block.1/reduce_scatter") ==
        Approx((6.0 * 43136 + 8.0 * 21568) / (cfg.hardware.device_memory_gbps * 1e9)).epsilon(1e-12));
  CHECK(phase_time(plan, "bwd/embed") > 0.0);

  // The cpu profile runs the blocking reduce-scatter: nothing in flight in block 0's backward,
  // and the reduction is a phase of its own.
  cfg.hardware = *find_hardware_profile("cpu");
  const MemoryPlan on_cpu = plan_memory(cfg);
  CHECK(comm_bytes(on_cpu, "bwd/block.0/mlp") - comm_bytes(on_cpu, "bwd/block.1/mlp") == -21568 * 2);
  CHECK(phase_time(on_cpu, "bwd/block.1/reduce_scatter") > 0.0);
}

TEST_CASE("tiled loss on a GPU profile: the planner charges the fused kernel's own workspace", "[planner][terms]") {
  // The small config in bf16 with a 8192-entry vocabulary and 256-token loss tiles, so that the
  // loss dominates: t = 2048 / 2 = 1024 tokens per rank, d = 64.
  RunConfig cfg = small_config();
  cfg.training.dtype = DType::BFloat16;
  cfg.model.vocab_size = 8192;
  cfg.memory.loss_tile_tokens = 256;
  cfg.hardware = *find_hardware_profile("h100-sxm");
  cfg.hardware.runtime_overhead_gib = 0;
  REQUIRE(validate(cfg).empty());
  const MemoryPlan plan = plan_memory(cfg);
  INFO("peak at " << plan.peak_phase);
  REQUIRE(plan.peak_phase == "fwd/loss");
  // The kernel (engine/memory/tiled_loss.cpp) gets one 256-token sequence tile (B = 1) and the whole
  // 8192-entry vocabulary as one vocabulary tile. Its workspace by hand (256-byte aligned pieces):
  // fp32 logits 256 x 8192 x 4 + bf16 dlogits 256 x 8192 x 2 + three fp32 row statistics 256 x 4
  // + fp32 dhidden accumulator 256 x 64 x 4.
  const int64_t workspace = 256 * 8192 * 4 + 256 * 8192 * 2 + 3 * 256 * 4 + 256 * 64 * 4;
  CHECK(term_bytes(plan, "fused loss kernel workspace") == workspace);
  // Beside it: the fp32 head-gradient accumulator [V, d], the fp32 per-token loss [t], and the
  // saved bf16 hidden-state gradient [t, d]; no [tile, V] logits outside the kernel.
  CHECK(term_bytes(plan, "tiled loss: LM-head gradient accumulator (fp32)") == 8192 * 64 * 4);
  CHECK(term_bytes(plan, "fused loss per-token loss (fp32)") == 1024 * 4);
  CHECK(term_bytes(plan, "tiled loss: saved hidden-state gradient") == 1024 * 64 * 2);
  for (const auto& t : plan.terms) {
    INFO("term " << t.name);
    CHECK(t.name.find("tile logits") == std::string::npos);
  }

  // The cpu profile runs the tiles differentiated by hand, no kernel: at their peak two fp32
  // [tile, V] tiles (the logits' fp32 copy and their log-softmax, over which d logits is then
  // written); the bf16 [V, d] product of a tile (tile_grad_rules.h) comes after, far smaller.
  cfg.hardware = *find_hardware_profile("cpu");
  const MemoryPlan on_cpu = plan_memory(cfg);
  INFO("cpu peak at " << on_cpu.peak_phase);
  REQUIRE(on_cpu.peak_phase == "fwd/loss");
  CHECK(term_bytes(on_cpu, "fused loss kernel workspace") == 0);
  CHECK(term_bytes(on_cpu, "tile log-softmax (fp32), then its d logits in place") == 256 * 8192 * 4);
  CHECK(term_bytes(on_cpu, "tile logits in fp32") == 256 * 8192 * 4);
  CHECK(term_bytes(on_cpu, "tile d log-softmax (fp32)") == 0);
  CHECK(term_bytes(on_cpu, "tile d logits (fp32)") == 0);

  // Time: over several vocabulary tiles the kernel computes the logits twice
  // (kernels::lce_head_gemms = 4 head GEMMs; the CPU's tiles run 3), over one tile of whole rows
  // pass 2 reads pass 1's tile: 3, as on the CPU. The training step gives the kernel whole rows
  // (kernels::fused_loss_tiles), so nothing recomputed differs between the two targets.
  // (Recomputed FLOPs per token: hardware less model FLOPs, whatever efficiency each part runs at.)
  auto recompute_flops = [](const MemoryPlan& p) {
    return p.time.hardware_flops_per_token - p.time.model_flops_per_token;
  };
  const HardwareConfig h100 = *find_hardware_profile("h100-sxm");  // a copy: the optional is a temporary
  REQUIRE(recompute_flops(plan) > 0);
  CHECK(recompute_flops(plan) == Approx(recompute_flops(on_cpu)).epsilon(1e-9));
  // A 16384-entry vocabulary: two of the kernel's default 8192-entry tiles (4 GEMMs, one head
  // forward of 1024 x 2 x 16384 x 64 FLOPs more), which the step no longer gives it. Whole rows:
  // the workspace is [256, 16384] fp32 + bf16, and the recompute is the CPU's.
  cfg.model.vocab_size = 16384;
  const MemoryPlan wide_cpu = plan_memory(cfg);
  cfg.hardware = h100;
  cfg.hardware.runtime_overhead_gib = 0;
  const MemoryPlan wide = plan_memory(cfg);
  CHECK(term_bytes(wide, "fused loss kernel workspace") ==
        256 * 16384 * 4 + 256 * 16384 * 2 + 3 * 256 * 4 + 256 * 64 * 4);
  CHECK(recompute_flops(wide) == Approx(recompute_flops(wide_cpu)).epsilon(1e-9));
}

TEST_CASE("Untied stages straddling KV heads: the planner charges the engine's schedule and buffers",
          "[planner][terms][untied]") {
  // 24 query / 8 KV heads of 16 (Llama 3.2 3B's ratio), P = 2, fp32, S = 2048 (s = 1024).
  RunConfig cfg = small_config();
  cfg.model.n_heads = 24;
  cfg.model.n_kv_heads = 8;
  cfg.memory.untied_ulysses = true;
  SECTION("4 heads per stage: a stage reads two KV heads") {
    cfg.memory.heads_per_stage = 4;
    REQUIRE(validate(cfg).empty());
    const planner_detail::PlanShapes s = planner_detail::make_shapes(cfg);
    using planner_detail::TensorKind;
    CHECK(s.k == 2);
    CHECK(s.max_kv_count == 2);  // before: 4 heads per stage / 3 per KV head, clamped to 1
    // one KV stage buffer: [B, S, 2, hd] fp32 = 1 x 2048 x 2 x 16 x 4 B, as the engine allocates
    CHECK(planner_detail::kind_bytes(TensorKind::KvStageHead, s) == 2048 * 2 * 16 * 4);
    CHECK(planner_detail::kind_bytes(TensorKind::KvStageHead, s) ==
          untied_stage_buffers(plan_untied_stages(24, 8, 16, 2, 4), 1, 1024).kv_stage * 4);
    CHECK(planner_detail::kind_bytes(TensorKind::KvStageGathered, s) == 0);  // no stage gathers
    CHECK(planner_detail::kind_bytes(TensorKind::KvStageAccum32, s) == 0);   // each range is one stage's
  }
  SECTION("8 heads per stage: stages gather K/V per query head and sum dK/dV in fp32") {
    cfg.memory.heads_per_stage = 8;
    REQUIRE(validate(cfg).empty());
    const planner_detail::PlanShapes s = planner_detail::make_shapes(cfg);
    using planner_detail::TensorKind;
    CHECK(planner_detail::kind_bytes(TensorKind::KvStageGathered, s) == 2048 * 4 * 16 * 4);  // [B, S, k = 4, hd]
    CHECK(planner_detail::kind_bytes(TensorKind::KvStageAccum32, s) == 2048 * 2 * 16 * 4);   // [B, S, 2, hd] fp32
    // the walk charges both: the plan's attention backward holds the gathered K/V and accumulators
    MemoryPlan plan = plan_memory(cfg);
    cfg.memory.heads_per_stage = 4;
    const MemoryPlan plain_ranges = plan_memory(cfg);
    auto attention_bytes = [](const MemoryPlan& p, const std::string& phase) {
      for (const auto& ph : p.phases)
        if (ph.name == phase) return ph.category_bytes[static_cast<int>(PlanCategory::AttentionWorkspace)];
      FAIL("no phase " << phase);
      return int64_t{0};
    };
    CHECK(attention_bytes(plan, "bwd/block.0/attn") > attention_bytes(plain_ranges, "bwd/block.0/attn"));
  }
}

TEST_CASE("standard attention in fp32 on a GPU over GQA: planned on the memory-efficient kernel, K/V repeated",
          "[planner][terms]") {
  // SDPA has only its math backend there (engine/layout/sdpa_fallback.h): the engine calls the
  // memory-efficient kernel over K and V repeated to the query heads for each call, forward and
  // backward. The plan names that kernel and charges the two [B, S, hq, hd] copies beside each call.
  RunConfig cfg = small_config();  // S = 2048, P = 2: 2 query heads and 1 KV head per rank, fp32
  cfg.hardware = *find_hardware_profile("h100-sxm");
  REQUIRE(validate(cfg).empty());
  const planner_detail::PlanShapes s = planner_detail::make_shapes(cfg);
  CHECK(s.standard_on_lse_kernel);
  CHECK(s.lse_kernel == LseKernel::CudaEfficient);
  CHECK(std::string(attention_kernel_name(plan_step_time(cfg))) == "efficient");
  // the same walk with a kernel that takes GQA natively: each attention call's phase peak holds
  // exactly the two repeated tensors fewer
  planner_detail::PlanShapes native = s;
  native.lse_kernel = LseKernel::CudaFlash2;
  const int64_t repeated = 2 * planner_detail::kind_bytes(planner_detail::TensorKind::GqaExpanded, s);
  CHECK(repeated == 2 * 2048 * 2 * 16 * 4);  // [B, S, hq = 2, hd] fp32, K and V
  auto phase_peaks = [](const planner_detail::PlanShapes& shapes) {
    planner_detail::LiveSet live(/*record_phases=*/true);
    planner_detail::walk_step(shapes, live);
    std::map<std::string, int64_t> peaks;
    for (const auto& p : live.phases) peaks[planner_detail::phase_name(p.code)] = p.device_peak;
    return peaks;
  };
  const auto with = phase_peaks(s), without = phase_peaks(native);
  // the backward's kernel call is its phase's peak (dq, dk, dv and the kernel's buffers all live);
  // the forward's copies live during its call only, which may lie below a peak elsewhere in the phase
  CHECK(with.at("bwd/block.0/attn") - without.at("bwd/block.0/attn") == repeated);
  const int64_t forward = with.at("fwd/block.0/attn") - without.at("fwd/block.0/attn");
  CHECK(forward > 0);
  CHECK(forward <= repeated);
  // its time at the log-sum-exp kernels' efficiency, not SDPA's
  cfg.hardware.untied_attention_efficiency = 0.125;
  CHECK(plan_step_time(cfg).attention_kernel_efficiency == 0.125);
  // bf16: flash and cuDNN take GQA, SDPA runs it
  cfg.training.dtype = DType::BFloat16;
  CHECK_FALSE(planner_detail::make_shapes(cfg).standard_on_lse_kernel);
  CHECK(std::string(attention_kernel_name(plan_step_time(cfg))) == "sdpa");
}

TEST_CASE("tiles span the batch: B = 2 doubles every [tile, f] and [tile, V] term", "[planner][terms]") {
  RunConfig cfg = small_config();  // s = 1024 local positions, MLP tiles of 32, loss tiles of 64
  const planner_detail::PlanShapes one = planner_detail::make_shapes(cfg);
  cfg.training.batch_size = 2;
  REQUIRE(validate(cfg).empty());
  const planner_detail::PlanShapes two = planner_detail::make_shapes(cfg);
  using planner_detail::TensorKind;
  // the engine tiles [B, 32, f] and [B, 64, V] (engine/memory/tiled_mlp.cpp, tiled_loss.cpp)
  CHECK(planner_detail::kind_bytes(TensorKind::FfnTile, one) == 32 * 160 * 4);
  CHECK(planner_detail::kind_bytes(TensorKind::FfnTile, two) == 2 * 32 * 160 * 4);  // before: 32 x 160 x 4
  CHECK(planner_detail::kind_bytes(TensorKind::LogitsTile32, two) == 2 * 64 * 96 * 4);
  CHECK(two.mlp_tile.count == 1024 / 32);  // tiles cover the local positions, not B x s
  CHECK(two.loss_tile.count == 1024 / 64);
}

TEST_CASE("the planner walks the path the run takes: a CPU run of a GPU preset is planned as the CPU's",
          "[planner][terms]") {
  // The 1B preset on its GPU profile: run on the CPU, the engine's loss makes two [tile, V] fp32
  // tiles where the CUDA path's fused kernel keeps its own workspace (measured: 5160 MiB against
  // 1131 planned when the planner followed the profile alone). The rule is runs_cuda_path.
  const LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3.2-1b-1xh100.toml");
  REQUIRE(loaded.ok());
  RunConfig gpu = loaded.config;
  gpu.training.seq_len = 4096;
  REQUIRE(gpu.hardware.profile != "cpu");
  RunConfig cpu_run = gpu, cpu_profile = gpu, auto_run = gpu;
  gpu.training.device = DeviceKind::Cuda;
  cpu_run.training.device = DeviceKind::Cpu;
  auto_run.training.device = DeviceKind::Auto;
  cpu_profile.training.device = DeviceKind::Auto;
  cpu_profile.hardware.profile = "cpu";
  CHECK(runs_cuda_path(gpu));
  CHECK(runs_cuda_path(auto_run));
  CHECK_FALSE(runs_cuda_path(cpu_run));
  CHECK_FALSE(runs_cuda_path(cpu_profile));
  const auto loss_workspace = [](const RunConfig& c) {
    for (const PhasePlan& p : plan_memory(c).phases)
      if (p.name == "fwd/loss") return p.category_bytes[static_cast<size_t>(MemCategory::LossWorkspace)];
    return int64_t{-1};
  };
  const int64_t on_gpu = loss_workspace(gpu), on_cpu = loss_workspace(cpu_run);
  REQUIRE(on_gpu > 0);
  CHECK(loss_workspace(auto_run) == on_gpu);
  // The CPU run is planned exactly as the CPU profile plans it (the loss's term does not read the
  // profile otherwise). The two differ by exactly what each path holds at its peak beside the same
  // dx and head-gradient accumulator: two [tile, V] fp32 tiles on the CPU; on the GPU the kernel's
  // workspace for whole rows of the same tile (kernels::fused_loss_tiles: one fp32 [tile, V] tile,
  // its bf16 gradient, row statistics, the fp32 dhidden accumulator) and the per-token loss [t] fp32.
  CHECK(on_cpu == loss_workspace(cpu_profile));
  const SequenceTile tile = loss_tile(gpu.memory, gpu.model, gpu.training.batch_size, gpu.training.seq_len);
  const int64_t V = gpu.model.vocab_size, t = gpu.training.seq_len;
  const kernels::FusedLossTiles tiles = kernels::fused_loss_tiles(1, tile.positions, V);
  const kernels::LceTilePlan kernel_plan = kernels::plan_linear_cross_entropy(
      kernels::KernelDtype::BF16, {t, gpu.model.d_model, V, tiles.seq_tile, tiles.vocab_tile});
  CHECK(tiles.seq_tile == tile.rows);
  CHECK(on_cpu - on_gpu == 2 * tile.rows * V * 4 - static_cast<int64_t>(kernel_plan.bytes) - t * 4);
}

TEST_CASE("optimizer offload: the host AdamW's seconds and the optimizer's PCIe seconds are the formula's",
          "[planner][terms]") {
  // The host pass moves 32 B a parameter (read p, g, m, v; write p, m, v; the upload's DMA read
  // of p) at the node's host_optimizer_gbps, which its ranks share; PCIe carries each fp32
  // gradient shard down and each fp32 master up (8 B a parameter) at pcie_gbps per rank.
  // Relative 1e-9: the shards' padding is at most one element per rank in a billion.
  struct Case {
    const char* preset;
    bool set_offload;
    int64_t shard;  // parameters per rank
    double ranks_per_node;
  };
  const Case c = GENERATE(values<Case>({{"llama3-8b-1xh100.toml", false, 8030261248, 1},
                                        // 32 x 218,112,000/8 + 525,336,576/8 + 525,340,672/8
                                        {"llama3-8b-5m-8xh100-untied.toml", true, 1003782656, 8}}));
  INFO(c.preset);
  LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/" + c.preset);
  REQUIRE(loaded.ok());
  RunConfig cfg = loaded.config;
  if (c.set_offload) cfg.memory.offload_optimizer = true;
  const StepTimePlan t = plan_step_time(cfg);
  const double host_bw = cfg.hardware.host_optimizer_gbps * 1e9 / c.ranks_per_node;
  const double pcie_bw = cfg.hardware.pcie_gbps * 1e9;
  const double shard = static_cast<double>(c.shard);
  CHECK(t.host_optimizer_s == Approx(shard * 32.0 / host_bw).epsilon(1e-9));
  CHECK(t.optimizer_pcie_s == Approx(shard * 8.0 / pcie_bw).epsilon(1e-9));
  // Pipelined on a GPU: the step waits for less than the passes and their uploads.
  CHECK(t.optimizer_exposed_s > 0);
  CHECK(t.optimizer_exposed_s < t.host_optimizer_s + t.optimizer_pcie_s);
  // and off, no optimizer time of its own
  cfg.memory.offload_optimizer = false;
  const StepTimePlan off = plan_step_time(cfg);
  CHECK(off.host_optimizer_s == 0);
  CHECK(off.optimizer_pcie_s == 0);
}

namespace {

/// The 1B preset at 32K on the H200 profile, one rank, without a memory technique but the tiled
/// loss: the configuration the memory-bound terms are counted on by hand below.
RunConfig llama_1b_one_rank_at_32k() {
  LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3.2-1b-1xh100.toml");
  REQUIRE(loaded.ok());
  RunConfig cfg = loaded.config;
  cfg.hardware = *find_hardware_profile("h200");
  cfg.training.seq_len = 32768;
  cfg.memory.activation_checkpointing = false;
  cfg.memory.offload_activations = false;
  cfg.memory.tiled_mlp = false;
  cfg.memory.untied_ulysses = false;
  cfg.memory.heads_per_stage = 0;
  cfg.memory.offload_optimizer = false;
  return cfg;
}

}  // namespace

TEST_CASE("step time: the loss's passes over the logits and the device AdamW at device_memory_gbps",
          "[planner][terms][time]") {
  // The 1B preset at 32K on the H200 profile, one rank: t = 32768 tokens, V = 128256 logits each,
  // in bf16. Bytes a logit (engine/layout/loss_traffic.h): the untiled chain 22 forward + 26
  // backward, the fused kernel 10 in the forward; the device AdamW 28 + 4 B a parameter.
  // Relative 1e-12: a product and a quotient of exact doubles on each side.
  RunConfig cfg = llama_1b_one_rank_at_32k();
  cfg.memory.tiled_loss = false;
  REQUIRE(validate(cfg).empty());
  REQUIRE(runs_cuda_path(cfg));
  const double bw = 4200e9, logits = 32768.0 * 128256.0;
  // the predicted seconds of the step's phase `name` ("optimizer", "bwd/loss")
  const auto phase_s = [](const MemoryPlan& plan, const std::string& name) {
    for (const PhasePlan& p : plan.phases)
      if (p.name == name) return p.time_s;
    FAIL("no phase " << name);
    return -1.0;
  };
  const MemoryPlan untiled_plan = plan_memory(cfg);
  const StepTimePlan& untiled = untiled_plan.time;
  CHECK(untiled.loss_traffic_s == Approx(logits * 48 / bw).epsilon(1e-12));
  // every parameter is on the one rank: the 1B's 1,235,814,400 (the head tied to the embedding);
  // relative 1e-6: a shard's padding to its alignment is a few hundred elements at most
  CHECK(untiled.device_optimizer_s == Approx(1235814400.0 * 32 / bw).epsilon(1e-6));
  CHECK(phase_s(untiled_plan, "optimizer") == untiled.device_optimizer_s);

  cfg.memory.tiled_loss = true;
  REQUIRE(validate(cfg).empty());
  const MemoryPlan fused_plan = plan_memory(cfg);
  const StepTimePlan& fused = fused_plan.time;
  CHECK(fused.loss_traffic_s == Approx(logits * 10 / bw).epsilon(1e-12));
  for (const PhasePlan& p : fused_plan.phases)  // the fused kernel's backward runs in its forward
    CHECK(p.name != "bwd/loss");
  // One vocabulary tile at 32K (kernels::fused_loss_tiles): as many head GEMMs as the untiled
  // loss, so the 38 B a logit between them are the whole difference in the two steps.
  REQUIRE(fused.hardware_flops_per_token == untiled.hardware_flops_per_token);
  CHECK(untiled.step_s - fused.step_s == Approx(logits * 38 / bw).epsilon(1e-9));

  // Under optimizer offload the device runs no AdamW; a slower device memory slows only the term.
  cfg.memory.offload_optimizer = true;
  CHECK(plan_step_time(cfg).device_optimizer_s == 0);
  cfg.memory.offload_optimizer = false;
  cfg.hardware.device_memory_gbps = 2100;
  const StepTimePlan slower = plan_step_time(cfg);
  CHECK(slower.loss_traffic_s == Approx(2 * fused.loss_traffic_s).epsilon(1e-12));
  CHECK(slower.step_s - fused.step_s ==
        Approx(fused.loss_traffic_s + fused.device_optimizer_s + fused.block_traffic_s + fused.parameter_passes_s)
            .epsilon(1e-9));
}

TEST_CASE("step time: the blocks' elementwise passes and the parameters' passes at device_memory_gbps",
          "[planner][terms][time]") {
  // The 1B preset at 32K on the H200 profile, one rank, bf16 (c = 2): d = 2048, q_dim = 2048,
  // kv_dim = 512, d_ffn = 8192. Bytes a token and block, counted by hand from the engine's ops
  // (engine/layout/block_traffic.h says which):
  //   forward attention: norm 2cd 8192 + RoPE 2c(q + kv) 10240 + residual 3cd 12288 = 30720
  //   forward MLP: norm 8192 + SwiGLU 3cf 49152 + residual 12288 = 69632
  //   backward MLP: SwiGLU 5cf 81920 + gate/up sum 12288 + norm 3cd 12288 + residual 12288 = 118784
  //   backward attention: RoPE 10240 + two q/k/v sums 24576 + norm 12288 + residual 12288 = 59392
  // 278528 in all; the recompute under checkpointing adds the attention's 30720 and the MLP's
  // norm and SwiGLU (57344): 88064. Parameters (engine/parallel/flat_group.cpp, head.cpp): a
  // block's 60,821,504 cast from fp32 (4 + 2 B) at its forward and backward, their gradients packed
  // (2 + 4) and copied into the master's (4 + 4): 26 B each; the embedding's 128256 x 2048 cast
  // three times (its forward, and the tied head's forward and backward: 18), its dense fp32
  // gradient zero-filled (4), the head's contribution packed (6), both accumulated (8 + 12): 48 B
  // each; the final norm's 2048 as a block's; and per token the embedding's backward rows in fp32
  // (2 + 4) summed into the dense gradient (12): 18 x 2048.
  RunConfig cfg = llama_1b_one_rank_at_32k();
  REQUIRE(validate(cfg).empty());
  const double bw = 4200e9, tokens = 32768, layers = 16;
  const double block = 60821504, embedding = 128256.0 * 2048, norm = 2048;
  const StepTimePlan plain = plan_step_time(cfg);
  // Relative 1e-12: products and sums of exact doubles on each side.
  CHECK(plain.block_traffic_s == Approx(layers * tokens * 278528 / bw).epsilon(1e-12));
  // relative 1e-6: each group's padding to its shard alignment is a few hundred elements at most
  const double embedding_rows = tokens * 18 * 2048;
  CHECK(plain.parameter_passes_s ==
        Approx((layers * block * 26 + embedding * 48 + norm * 26 + embedding_rows) / bw).epsilon(1e-6));

  cfg.memory.activation_checkpointing = true;
  REQUIRE(validate(cfg).empty());
  CHECK(plan_step_time(cfg).block_traffic_s == Approx(layers * tokens * (278528 + 88064) / bw).epsilon(1e-12));
  cfg.memory.activation_checkpointing = false;

  // The tiled MLP copies each tile's output into the whole (2cd = 8192 a token) and its backward
  // runs each tile's SwiGLU forward again (3cf = 49152)
  cfg.memory.tiled_mlp = true;
  REQUIRE(validate(cfg).empty());
  CHECK(plan_step_time(cfg).block_traffic_s == Approx(layers * tokens * (278528 + 8192 + 49152) / bw).epsilon(1e-12));
  cfg.memory.tiled_mlp = false;

  // Under optimizer offload the device casts each parameter once (the upload's), packs its
  // gradient and takes its norm on the way to the host: 6 + 6 + 4 = 16 B; the embedding 6 + 4
  // (dense) + 6 (the head's, packed) + 4 + 12 (the second contribution added) = 32 B
  cfg.memory.offload_optimizer = true;
  REQUIRE(validate(cfg).empty());
  CHECK(plan_step_time(cfg).parameter_passes_s ==
        Approx((layers * block * 16 + embedding * 32 + norm * 16 + embedding_rows) / bw).epsilon(1e-6));
  cfg.memory.offload_optimizer = false;

  // The Untied stages move more (the projections scaled by the folded norm, the layout copies
  // between the local and the stage layouts, the backward's projections again)
  cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = 32;
  REQUIRE(validate(cfg).empty());
  CHECK(plan_step_time(cfg).block_traffic_s > plain.block_traffic_s);
  cfg.memory.untied_ulysses = false;
  cfg.memory.heads_per_stage = 0;

  // Both terms are in the step and in the phases, and only they move with device_memory_gbps
  // besides the loss's passes and the device AdamW
  cfg.hardware.device_memory_gbps = 2100;
  const StepTimePlan slower = plan_step_time(cfg);
  CHECK(slower.block_traffic_s == Approx(2 * plain.block_traffic_s).epsilon(1e-12));
  CHECK(slower.parameter_passes_s == Approx(2 * plain.parameter_passes_s).epsilon(1e-12));
  CHECK(slower.step_s - plain.step_s ==
        Approx(plain.block_traffic_s + plain.parameter_passes_s + plain.loss_traffic_s + plain.device_optimizer_s)
            .epsilon(1e-9));
}

TEST_CASE("step time: the attention kernels at attention_efficiency, every other FLOP at compute_efficiency",
          "[planner][terms][time]") {
  // One rank, no communication, no offload: the step is compute alone, so each efficiency's share
  // is exact. FLOPs per token and layer (2 a multiply-add), small_config's shape at S = 2048 with
  // as many KV heads as query heads: q, k, v projections 2·64·(64 + 2·64) = 24576, o_proj 2·64·64
  // = 8192, MLP 6·64·160 = 61440, causal attention 2·64·2048 = 262144 (QKᵀ and PV over S/2 keys on
  // average); LM head 2·96·64 = 12288.
  RunConfig cfg = small_config_one_rank();
  // (fp32 over GQA would leave SDPA on a GPU: sdpa_fallback.h, the case above; here SDPA runs)
  cfg.model.n_kv_heads = 4;
  cfg.memory.tiled_mlp = false;   // the recompute is then the whole block's forward
  cfg.memory.tiled_loss = false;  // the head's three GEMMs, no kernel of its own
  cfg.hardware = *find_hardware_profile("h100-sxm");
  cfg.hardware.compute_efficiency = 0.4;
  cfg.hardware.attention_efficiency = 0.25;
  REQUIRE(validate(cfg).empty());
  const StepTimePlan t = plan_memory(cfg).time;

  const double L = 2, tokens = 2048, peak = 989.4e12;
  const double proj = 24576, o_proj = 8192, mlp = 61440, core = 262144, head = 12288;
  const double model = 3 * (L * (proj + o_proj + core + mlp) + head);
  const double recompute = L * (proj + o_proj + core + mlp);  // checkpointing: each block's forward again
  // The attention backward's five products to the forward's two: 2.5 forwards of hardware FLOPs,
  // where the model FLOPs count 2 (as for a GEMM).
  const double backward = 2.5 * core, backward_beyond_model = L * (backward - 2 * core);
  const double attention = L * (core + core + backward);  // forward, the recompute's forward, backward
  const double hardware = model + recompute + backward_beyond_model;
  CHECK(t.tokens_per_device == 2048);
  CHECK(t.peak_flops == peak);
  CHECK(t.model_flops_per_token == model);
  CHECK(t.hardware_flops_per_token == hardware);
  CHECK(t.attention_flops_per_token == attention);
  // Relative 1e-12: a few dozen double operations on each side, each within 2^-53 of exact.
  const double attention_s = tokens * attention / (peak * 0.25);
  CHECK(t.attention_s == Approx(attention_s).epsilon(1e-12));
  CHECK(t.compute_s == Approx(tokens * (hardware - attention) / (peak * 0.4) + attention_s).epsilon(1e-12));
  CHECK(t.recompute_s ==
        Approx(tokens * ((recompute - L * core) / (peak * 0.4) + L * core / (peak * 0.25))).epsilon(1e-12));
  // one rank, no offload: compute and the memory-bound work (the cases above)
  CHECK(t.step_s ==
        Approx(t.compute_s + t.block_traffic_s + t.parameter_passes_s + t.loss_traffic_s + t.device_optimizer_s)
            .epsilon(1e-12));

  // Each efficiency moves its own share of the step and nothing else. (The differences cancel
  // about half of each operand: relative 1e-9 keeps far clear of the 1e-16 rounding.)
  RunConfig slower_attention = cfg;
  slower_attention.hardware.attention_efficiency = 0.125;
  const StepTimePlan a = plan_memory(slower_attention).time;
  CHECK(a.attention_s == Approx(2 * t.attention_s).epsilon(1e-12));
  CHECK(a.step_s - t.step_s == Approx(t.attention_s).epsilon(1e-9));
  RunConfig slower_gemms = cfg;
  slower_gemms.hardware.compute_efficiency = 0.2;
  const StepTimePlan g = plan_memory(slower_gemms).time;
  CHECK(g.attention_s == t.attention_s);
  CHECK(g.step_s - t.step_s == Approx(t.compute_s - t.attention_s).epsilon(1e-9));

  // hardware.attention_backward_ratio: the kernels' backward (2.5 forwards a block) at 0.25 x 0.8,
  // their forward and the recompute's at 0.25; plan --json carries the backward's FLOPs and the
  // ratio for the fits. The forward phases keep their time, the backward's grows by its kernels'.
  REQUIRE(t.attention_backward_ratio == 1.0);  // the profiles' (their figures blend both directions)
  CHECK(t.attention_backward_flops_per_token == L * backward);
  RunConfig slower_backward = cfg;
  slower_backward.hardware.attention_backward_ratio = 0.8;
  const MemoryPlan rb = plan_memory(slower_backward), r1 = plan_memory(cfg);
  CHECK(rb.time.attention_backward_ratio == 0.8);
  const double backward_s = tokens * L * backward / (peak * 0.25);  // at the forward's efficiency
  CHECK(rb.time.attention_s == Approx(attention_s - backward_s + backward_s / 0.8).epsilon(1e-12));
  CHECK(rb.time.step_s - t.step_s == Approx(backward_s / 0.8 - backward_s).epsilon(1e-9));
  CHECK(rb.time.recompute_s == t.recompute_s);
  const auto phase_s = [](const MemoryPlan& p, const std::string& name) {
    for (const PhasePlan& phase : p.phases)
      if (phase.name == name) return phase.time_s;
    FAIL("no planned phase " << name);
    return 0.0;
  };
  for (const char* phase : {"fwd/block.1/attn", "bwd/block.1/recompute", "bwd/block.1/mlp"})
    CHECK(phase_s(rb, phase) == phase_s(r1, phase));
  CHECK(phase_s(rb, "bwd/block.1/attn") - phase_s(r1, "bwd/block.1/attn") ==
        Approx((backward_s / 0.8 - backward_s) / L).epsilon(1e-9));

  // The Untied stages call a kernel that gives the log-sum-exp (engine/layout/attention_kernels.h):
  // in fp32 on a GPU the memory-efficient kernel, at untied_attention_efficiency, where SDPA's
  // figure no longer counts. (The stages also project q, k, v again in backward: that is compute_s.)
  REQUIRE(cfg.training.dtype == DType::Float32);
  RunConfig untied = cfg;
  untied.memory.untied_ulysses = true;
  untied.memory.heads_per_stage = 2;
  untied.hardware.untied_attention_efficiency = 0.125;
  REQUIRE(validate(untied).empty());
  const StepTimePlan u = plan_memory(untied).time;
  CHECK_FALSE(t.untied_attention);
  CHECK(u.untied_attention);
  CHECK(std::string(attention_kernel_name(t)) == "sdpa");  // plan --json's time.attention_kernel
  CHECK(std::string(attention_kernel_name(u)) == "efficient");
  CHECK(attention_kernel_label(u) == "memory-efficient attention, Untied stages");
  CHECK(u.attention_flops_per_token == attention);
  CHECK(u.attention_s == Approx(2 * t.attention_s).epsilon(1e-12));
  untied.hardware.attention_efficiency = 0.9;
  CHECK(plan_memory(untied).time.attention_s == u.attention_s);
  // In bf16 (hd 16: a head dim cuDNN takes) "auto" calls cuDNN's kernel, SDPA's pick on Hopper, at
  // attention_efficiency; FlashAttention-2, asked for by name, at untied_attention_efficiency.
  untied.training.dtype = DType::BFloat16;
  REQUIRE(validate(untied).empty());
  const StepTimePlan uc = plan_memory(untied).time;
  CHECK(std::string(attention_kernel_name(uc)) == "cudnn");
  CHECK(attention_kernel_label(uc) == "cuDNN attention, Untied stages");
  CHECK(uc.attention_at_sdpa_efficiency);
  CHECK(uc.attention_kernel_efficiency == 0.9);
  untied.memory.lse_attention_kernel = LseKernelChoice::Flash2;
  const StepTimePlan uf = plan_memory(untied).time;
  CHECK(std::string(attention_kernel_name(uf)) == "flash2");
  CHECK_FALSE(uf.attention_at_sdpa_efficiency);
  CHECK(uf.attention_kernel_efficiency == 0.125);
  CHECK(uf.attention_s == Approx(uc.attention_s * 0.9 / 0.125).epsilon(1e-12));
  untied.training.dtype = DType::Float32;
  untied.memory.lse_attention_kernel = LseKernelChoice::Auto;

  // Kept attention replays the forward's output in the recompute: the kernels run forward and
  // backward only, on the kernel that gives the kept LSE (fp32 on a GPU: the memory-efficient
  // kernel, at untied_attention_efficiency); the recompute keeps
  // its projections and MLP. With the Untied stages it runs no stage at all: their projections
  // (proj, which the backward runs again anyway) leave the recompute too.
  RunConfig kept = cfg;
  kept.memory.keep_attention = true;
  kept.hardware.untied_attention_efficiency = 0.125;
  REQUIRE(validate(kept).empty());
  const StepTimePlan k = plan_memory(kept).time;
  CHECK(k.kept_attention);
  CHECK(std::string(attention_kernel_name(k)) == "efficient");  // fp32 on a GPU
  CHECK(attention_kernel_label(k) == "memory-efficient attention, kept attention");
  CHECK(k.attention_flops_per_token == L * (core + backward));
  CHECK(k.hardware_flops_per_token == model + L * (proj + o_proj + mlp) + backward_beyond_model);
  CHECK(k.attention_kernel_efficiency == 0.125);
  CHECK(k.recompute_s == Approx(tokens * L * (proj + o_proj + mlp) / (peak * 0.4)).epsilon(1e-12));
  untied.memory.activation_checkpointing = untied.memory.keep_attention = true;
  const StepTimePlan ku = plan_memory(untied).time;
  // the Untied backward's own projections (proj) stay: the recompute is o_proj and the MLP
  CHECK(ku.hardware_flops_per_token == model + L * (o_proj + mlp) + L * proj + backward_beyond_model);
  CHECK(ku.attention_flops_per_token == L * (core + backward));

  // Each path with its blocks and kernel (plan --json's time.attention_kernels): every block keeps
  // on its own path; with the top block alone keeping, the others run theirs, the Untied stages on
  // the same kernel, standard attention through SDPA.
  auto uses_text = [](const StepTimePlan& plan) {
    std::string text;
    for (const AttentionKernelUse& use : attention_kernel_uses(plan))
      text += std::to_string(use.blocks) + " " + use.path + " " + use.kernel + "; ";
    return text;
  };
  const std::string blocks = std::to_string(static_cast<int64_t>(L));
  CHECK(uses_text(k) == blocks + " kept attention efficient; ");
  CHECK(uses_text(ku) == blocks + " Untied stages, attention kept efficient; ");
  CHECK(uses_text(u) == blocks + " Untied stages efficient; ");
  CHECK(uses_text(t) == blocks + " standard attention sdpa; ");
  untied.memory.keep_attention_blocks = kept.memory.keep_attention_blocks = 1;
  REQUIRE(validate(untied).empty());
  REQUIRE(validate(kept).empty());
  const std::string others = std::to_string(static_cast<int64_t>(L) - 1);
  CHECK(uses_text(plan_memory(untied).time) ==
        "1 Untied stages, attention kept efficient; " + others + " Untied stages efficient; ");
  CHECK(uses_text(plan_memory(kept).time) == "1 kept attention efficient; " + others + " standard attention sdpa; ");
  CHECK(attention_kernel_label(plan_memory(kept).time) ==
        "memory-efficient attention, kept attention in 1 of " + blocks + " blocks; SDPA in the other " + others);
  CHECK(attention_kernel_label(plan_memory(untied).time) ==
        "memory-efficient attention, Untied stages, attention kept in 1 of " + blocks +
            " blocks; memory-efficient attention, Untied stages in the other " + others);

  // Without checkpointing the attention kernels run forward and backward only.
  cfg.memory.activation_checkpointing = false;
  CHECK(plan_memory(cfg).time.attention_flops_per_token == L * (core + backward));
}

TEST_CASE(
    "kept attention: every path on the cpu and GPU profiles keeps one output and LSE per block from the "
    "forward, and its recompute is cheaper",
    "[planner][terms][kept]") {
  // One output [B, s, H*hd] (head layout on the standard path: the same bytes) in the compute dtype
  // and one [B, H/P, S] fp32 LSE per block, held from its forward through the loss; nothing else
  // stays. On each profile (its own layouts: the CPU's output copy, the GPU's views), at P = 1 and
  // P = 2, standard attention, Ulysses and the Untied stages, fp32 and bf16.
  for (const char* profile : {"cpu", "h100-sxm"}) {
    for (const bool one_rank : {true, false}) {
      for (const bool untied : {false, true}) {
        for (const DType dtype : {DType::Float32, DType::BFloat16}) {
          RunConfig plain = one_rank ? small_config_one_rank() : small_config();
          plain.hardware = *find_hardware_profile(profile);
          plain.training.dtype = dtype;
          plain.memory.untied_ulysses = untied;
          plain.memory.heads_per_stage = untied ? 2 * plain.parallel.ulysses_degree : 0;
          RunConfig kept = plain;
          kept.memory.keep_attention = true;
          INFO(profile << (one_rank ? ", one rank" : ", P = 2") << (untied ? ", Untied" : ", standard")
                       << (dtype == DType::Float32 ? ", fp32" : ", bf16"));
          REQUIRE(validate(kept).empty());
          const MemoryPlan p = plan_memory(plain), k = plan_memory(kept);
          const int64_t P = plain.parallel.ulysses_degree, S = plain.training.seq_len, s = S / P;
          const int64_t c = dtype == DType::Float32 ? 4 : 2;
          const int64_t per_block = s * 4 * 16 * c + (4 / P) * S * 4;  // H = 4 heads of 16
          auto saved_at_loss = [](const MemoryPlan& plan) {
            for (const auto& ph : plan.phases)
              if (ph.name == "fwd/loss") return ph.category_bytes[static_cast<int>(PlanCategory::SavedActivations)];
            return int64_t{-1};
          };
          CHECK(saved_at_loss(k) - saved_at_loss(p) == plain.model.n_layers * per_block);
          CHECK(term_bytes(k, "kept attention output") + term_bytes(k, "kept attention log-sum-exp") > 0);
          CHECK(k.time.recompute_s < p.time.recompute_s);
          CHECK(k.time.attention_flops_per_token < p.time.attention_flops_per_token);
        }
      }
    }
  }
}

TEST_CASE("document masking: the attention backward holds the longest segment's dq, dk, dv beside the whole ones",
          "[planner][terms][documents]") {
  // The GPU profile's walk (no CPU kernel blocks, which follow the segment too): each backward
  // attention phase's peak, the kernel's backward, holds one segment's dq [n, q, hd] and dk, dv
  // [n, kv, hd] more than without masking, n the longest segment: the profile's longest document
  // at most S, S without a profile. Without masking the segment kinds are 0 bytes.
  for (const bool untied : {false, true}) {
    RunConfig plain = small_config();  // S = 2048, P = 2: 2 query and 1 KV head per rank, fp32
    plain.hardware = *find_hardware_profile("h100-sxm");
    plain.memory.untied_ulysses = untied;
    plain.memory.heads_per_stage = untied ? 2 : 0;  // one query head per rank per stage, its one KV head
    plain.training.dataset = DatasetKind::Documents;
    plain.training.dataset_path = "unread.odoc";  // the planner reads only the profile below
    const int64_t S = plain.training.seq_len, q_heads = untied ? 1 : 2, kv_heads = 1, hd = 16, c = 4;
    const planner_detail::PlanShapes off = planner_detail::make_shapes(plain);
    for (auto kind : {planner_detail::TensorKind::QSegment, planner_detail::TensorKind::KvSegment,
                      planner_detail::TensorKind::LseSegment, planner_detail::TensorKind::QStageSegment,
                      planner_detail::TensorKind::KvStageSegment, planner_detail::TensorKind::LseStageSegment})
      CHECK(planner_detail::kind_bytes(kind, off) == 0);
    auto backward_attention = [](const MemoryPlan& plan) {
      for (const auto& ph : plan.phases)
        if (ph.name == "bwd/block.0/attn") return ph.resident_bytes;
      return int64_t{-1};
    };
    const MemoryPlan p = plan_memory(plain);
    struct Profile {
      std::shared_ptr<const DocumentLengthProfile> lengths;
      int64_t segment;
    };
    for (const Profile& profile :
         {Profile{nullptr, S}, Profile{std::make_shared<DocumentLengthProfile>(std::vector<int64_t>{300, 40, 7}), 300},
          Profile{std::make_shared<DocumentLengthProfile>(std::vector<int64_t>{5000, 40}), S}}) {
      RunConfig masked = plain;
      masked.training.document_mask = true;
      masked.document_lengths = profile.lengths;
      INFO((untied ? "Untied" : "standard") << ", longest segment " << profile.segment);
      CHECK(planner_detail::make_shapes(masked).kernel_seq == profile.segment);
      CHECK(backward_attention(plan_memory(masked)) - backward_attention(p) ==
            profile.segment * (q_heads + 2 * kv_heads) * hd * c);
      // bf16 on the GPU: one FlashAttention-2 variable-length call over every segment
      // (documents_run_varlen) writes the whole tensors: no segment's copies, the same phase peak
      RunConfig plain16 = plain, masked16 = masked;
      plain16.training.dtype = masked16.training.dtype = DType::BFloat16;
      const planner_detail::PlanShapes varlen = planner_detail::make_shapes(masked16);
      CHECK_FALSE(varlen.segment_calls);
      CHECK(planner_detail::kind_bytes(planner_detail::TensorKind::QSegment, varlen) == 0);
      CHECK(planner_detail::kind_bytes(planner_detail::TensorKind::KvStageSegment, varlen) == 0);
      CHECK(backward_attention(plan_memory(masked16)) == backward_attention(plan_memory(plain16)));
    }
  }
}
