// The engine on a GPU (hidden tag [.cuda]: run `engine_tests "[.cuda]"` on a CUDA machine): every
// technique together equals the plain run (fp32), kept attention equals plain checkpointing, bf16 trains, checkpointing and offload lower the
// measured device peak and offload fills the host pool, the fused loss keeps its answer statistics
// inside its own workspace.
#include <catch2/catch.hpp>

#include <cmath>

#include <torch/cuda.h>

#include "../common/engine_test_util.h"
#include "engine/config/validate.h"
#include "engine/layout/attention_kernels.h"
#include "engine/layout/planned_buffers.h"
#include "engine/memory/tiled_loss.h"
#include "engine/planner/plan_shapes.h"
#include "engine/telemetry/memory_tracker.h"
#include "kernels/linear_cross_entropy_plan.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

RunConfig cuda_config() {
  RunConfig cfg = tiny_config(4, 256);
  cfg.training.device = DeviceKind::Cuda;
  return cfg;
}

RankContext cuda_rank() {
  RankContext ctx;
  ctx.device = test_gpu();
  return ctx;
}

/// One forward and backward of each trainer: the losses and every gradient equal within the
/// reordering bounds of engine_test_util.h for `cfg` on one sequence. The same sums in other
/// orders (cuBLAS split-K, the fused loss's online log-sum-exp, atomics in the attention
/// backward, another attention kernel) hold for any order, as long as fp32 matmuls stay fp32
/// (LibTorch's default: TF32 off for matmuls).
void check_same_step(Trainer& a, Trainer& b, const RunConfig& cfg) {
  const double la = a.forward_backward(0), lb = b.forward_backward(0);
  CHECK(std::abs(la - lb) <= loss_tolerance(cfg, 1) * std::abs(la));
  std::vector<at::Tensor> ga, gb;
  for (auto* g : a.model().groups()) ga.push_back(g->grad().cpu());
  for (auto* g : b.model().groups()) gb.push_back(g->grad().cpu());
  std::string worst;
  const double diff = per_param_max_relative_diff(a, gb, ga, &worst);
  INFO("worst gradient " << worst << ": " << diff);
  CHECK(diff <= gradient_tolerance(cfg, 1));
}

/// One block's kept attention in the host pool as the planner sizes it for `cfg`: the bytes the
/// pinned slab must hold per offloaded block.
int64_t kept_payload_planned(const RunConfig& cfg) {
  return planner_detail::kind_bytes(planner_detail::TensorKind::OffloadedKeptAttention,
                                    planner_detail::make_shapes(cfg));
}

}  // namespace

TEST_CASE("cuda: every technique together equals the plain run (fp32)", "[.cuda]") {
  REQUIRE(prepare_cuda().available);
  RunConfig plain = cuda_config();
  RunConfig all = plain;
  all.memory.activation_checkpointing = all.memory.offload_activations = true;
  all.memory.tiled_mlp = all.memory.tiled_loss = true;
  Trainer a(plain, cuda_rank()), b(all, cuda_rank());
  check_same_step(a, b, plain);
  CHECK(b.offload_store().total_offloaded() == offloaded_blocks(plain.model.n_layers).count);
}

TEST_CASE("cuda: kept attention equals plain checkpointing on every one-device path (fp32)", "[.cuda]") {
  // On CUDA the kept path's forward is FlashAttention's (it returns the LSE it keeps; fp32: the
  // memory-efficient kernel) where plain checkpointing's SDPA may pick another kernel.
  REQUIRE(prepare_cuda().available);
  for (const bool untied : {false, true}) {
    INFO((untied ? "Untied stages" : "standard attention"));
    RunConfig plain = cuda_config();
    plain.memory.activation_checkpointing = true;
    plain.memory.untied_ulysses = untied;
    RunConfig kept = plain;
    kept.memory.keep_attention = true;
    Trainer a(plain, cuda_rank()), b(kept, cuda_rank());
    check_same_step(a, b, plain);
  }
}

TEST_CASE(
    "cuda: kept attention on the host equals kept attention on the device, bit for bit; in the top block, "
    "plain checkpointing's step",
    "[.cuda]") {
  // The device run and the host run compute the same kernels on the same inputs; the host run only
  // packs what it keeps, copies it through its pinned slab on its own streams and replays views of
  // the slot: loss and gradients are equal exactly. (The embedding's gradient adds its repeated
  // tokens' rows in one fixed order on CUDA, add_embedding_rows in head.cpp; atomics would not.)
  // With the top block keeping only, the lower blocks run SDPA (which may pick another kernel than
  // the kept path's): the step equals within the tolerance of kept attention against plain
  // checkpointing (fp32).
  REQUIRE(prepare_cuda().available);
  for (const DType dtype : {DType::Float32, DType::BFloat16}) {
    for (const bool untied : {false, true}) {
      INFO((untied ? "Untied stages" : "standard attention") << (dtype == DType::Float32 ? ", fp32" : ", bf16"));
      RunConfig on_device = cuda_config();
      on_device.training.dtype = dtype;
      on_device.memory.activation_checkpointing = on_device.memory.offload_activations = true;
      on_device.memory.keep_attention = true;
      on_device.memory.untied_ulysses = untied;
      RunConfig on_host = on_device;
      on_host.memory.offload_kept_attention = true;
      Trainer a(on_device, cuda_rank()), b(on_host, cuda_rank());
      // the kept attention's pinned slab is made at setup, one payload of the rule's bytes a block
      // that sends its own (kept_attention_step_payload); step 1 finds it the right size
      b.pin_offload_slab();
      const OffloadedBlocks sent = kept_attention_offloaded_blocks(on_host.model.n_layers, 0);
      // the planner's payload (one head a stage under Untied, all H in one otherwise; fp32's
      // memory-efficient kernel pads the log-sum-exp to 32), not shapes re-derived here
      const int64_t payload = kept_payload_planned(on_host);
      const int64_t slab = b.kept_attention_store().host_bytes();
      CHECK(slab >= sent.count * payload);
      const double la = a.forward_backward(0), lb = b.forward_backward(0);
      CHECK(b.kept_attention_store().host_bytes() == slab);  // the same slab: not pinned again
      CHECK(lb == la);
      CHECK(b.kept_attention_store().total_offloaded() ==
            kept_attention_offloaded_blocks(on_device.model.n_layers, 0).count);
      std::vector<at::Tensor> ga, gb;
      for (auto* g : a.model().groups()) ga.push_back(g->grad().cpu());
      for (auto* g : b.model().groups()) gb.push_back(g->grad().cpu());
      for (size_t i = 0; i < ga.size(); ++i) {
        INFO("group " << i);
        CHECK(at::equal(ga[i], gb[i]));
      }
      if (dtype != DType::Float32) continue;
      RunConfig top_block = on_device;
      top_block.memory.keep_attention_blocks = 1;
      Trainer d(on_device, cuda_rank()), c(top_block, cuda_rank());
      check_same_step(d, c, on_device);
    }
  }
}

TEST_CASE("cuda: kept attention on the host in fp32 over a length the memory-efficient kernel pads", "[.cuda]") {
  // 200 tokens: the memory-efficient kernel's log-sum-exp is [1, h, 224] (a multiple of 32), and the
  // kept payload carries it so (lse_positions): the slab pinned at setup holds it, no step pins
  // again, and the step equals the one that keeps it on the device exactly (the same kernels on
  // the same inputs; the host run only copies the bytes).
  REQUIRE(prepare_cuda().available);
  RunConfig on_device = cuda_config();
  on_device.training.seq_len = 200;
  on_device.memory.activation_checkpointing = on_device.memory.offload_activations = true;
  on_device.memory.keep_attention = true;
  RunConfig on_host = on_device;
  on_host.memory.offload_kept_attention = true;
  REQUIRE(validate(on_host).empty());
  Trainer a(on_device, cuda_rank()), b(on_host, cuda_rank());
  b.pin_offload_slab();
  const OffloadedBlocks sent = kept_attention_offloaded_blocks(on_host.model.n_layers, 0);
  // the planner's payload; its log-sum-exp over 224 positions, 200 padded to 32 by the kernel
  const int64_t H = on_host.model.n_heads, hd = on_host.model.head_dim;
  const int64_t payload = kept_payload_planned(on_host);
  CHECK(payload == kept_attention_step_payload(1, 200, H, hd, 4, H, 224).bytes());
  const int64_t slab = b.kept_attention_store().host_bytes();
  CHECK(slab >= sent.count * payload);
  const double la = a.forward_backward(0), lb = b.forward_backward(0);
  CHECK(lb == la);
  CHECK(b.kept_attention_store().host_bytes() == slab);
  CHECK(b.kept_attention_store().total_offloaded() == sent.count);
}

TEST_CASE("cuda: bf16 trains, checkpointing and offload lower the measured peak", "[.cuda]") {
  REQUIRE(prepare_cuda().available);
  RunConfig cfg = cuda_config();
  cfg.training.dtype = DType::BFloat16;
  cfg.training.lr = 3e-3;
  int64_t plain_peak = 0;
  {
    Trainer t(cfg, cuda_rank());
    double first = 0, last = 0;
    for (int i = 0; i < 20; ++i) {
      const StepResult r = t.step();
      REQUIRE(std::isfinite(r.loss));
      if (i == 0) first = r.loss;
      last = r.loss;
      plain_peak = r.device_peak;
    }
    CHECK(last < 0.8 * first);
  }
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
  const int slot = cuda_rank().slot;
  const auto offloaded_bytes = [&] {
    return MemoryTracker::instance().snapshot(slot).category_bytes[static_cast<size_t>(MemCategory::Offloaded)];
  };
  const int64_t before = offloaded_bytes();
  Trainer t(cfg, cuda_rank());
  CHECK(offloaded_bytes() == before);  // a Trainer pins nothing until asked (an evaluation never is)
  t.pin_offload_slab();
  // the pinned slab of the offloaded inputs exists before the first step (made at setup), one
  // [B, s, d] bf16 region per offloaded block (1..L-2), charged to "offloaded"
  const int64_t slab = offloaded_bytes() - before;
  const OffloadedBlocks offloaded = offloaded_blocks(cfg.model.n_layers);
  CHECK(slab >= offloaded.count * cfg.training.batch_size * cfg.training.seq_len * cfg.model.d_model * 2);
  t.step();
  const StepResult r = t.step();
  INFO("plain peak " << plain_peak << ", checkpointing + offload peak " << r.device_peak);
  CHECK(r.device_peak < plain_peak);
  CHECK(r.host_peak > 0);
}

TEST_CASE("cuda: optimizer offload keeps the states in pinned host memory and trains as on the device", "[.cuda]") {
  REQUIRE(prepare_cuda().available);
  RunConfig on_device = cuda_config();
  RunConfig offloaded = on_device;
  offloaded.memory.offload_optimizer = true;
  Trainer a(on_device, cuda_rank()), b(offloaded, cuda_rank());
  int64_t elements = 0;
  for (auto* g : b.model().groups()) {
    CHECK(g->states_on_host());
    CHECK(g->master.device().is_cpu());
    CHECK(g->master.is_pinned());  // one exact pinned allocation per state tensor
    elements += g->shard_numel();
  }
  // the host pool holds exactly the fp32 master, gradient and both moments: 16 B a parameter
  CHECK(MemoryTracker::instance().host_bytes(cuda_rank().slot) >= 16 * elements);
  // One step on identical gradients (a's, copied to b's host gradient): the same forward (the
  // device copy holds the master's values), then AdamW on the CPU (the host's fused pass)
  // instead of the GPU (ATen's fused kernel, about 16 rounded ops an element): the parameters
  // within the optimizer bound of engine_test_util.h for AdamW on identical gradients.
  const double la = a.forward_backward(a.next_step());
  const double lb = b.forward_backward(b.next_step());
  CHECK(std::abs(la - lb) <= loss_tolerance(on_device, 1) * std::abs(la));
  auto ga = a.model().groups(), gb = b.model().groups();
  {
    at::NoGradGuard no_grad;
    for (size_t g = 0; g < ga.size(); ++g) {
      gb[g]->zero_gradient();  // a's gradient replaces b's own, down to b's pinned host gradient
      gb[g]->accumulate_gradient(ga[g]->grad());
    }
  }
  a.apply_gradients();
  b.apply_gradients();
  std::vector<at::Tensor> pa, pb;
  for (auto* g : ga) pa.push_back(g->master.detach().cpu());
  for (auto* g : b.model().groups()) pb.push_back(g->master.detach().cpu());  // model(): b's pipelined passes finished
  std::string worst;
  const double diff = per_param_max_relative_diff(a, pb, pa, &worst);
  INFO("worst parameter " << worst << ": " << diff);
  CHECK(diff <= optimizer_tolerance(on_device, 1, elements, /*ops_per_step=*/16));
}

TEST_CASE(
    "cuda: optimizer offload in bf16 with tied embeddings: the gradients sum as on the device, the upload "
    "casts the master",
    "[.cuda]") {
  REQUIRE(prepare_cuda().available);
  RunConfig on_device = cuda_config();
  on_device.training.dtype = DType::BFloat16;
  on_device.model.tie_embeddings = true;  // the embedding takes two contributions: the LM head's, its own
  RunConfig offloaded = on_device;
  offloaded.memory.offload_optimizer = true;
  Trainer a(on_device, cuda_rank()), b(offloaded, cuda_rank());
  a.forward_backward(a.next_step());
  b.forward_backward(b.next_step());
  // The same forward and backward (bf16 kernels on the same values), the sum of the embedding's two
  // contributions made on the device either way (accumulate_gradient), so each gradient within the
  // gradient bound of two reorderings of the same sums (atomics may reorder the embedding's).
  auto ga = a.model().groups(), gb = b.model().groups();
  for (size_t g = 0; g < ga.size(); ++g) {
    gb[g]->finish_gradient_copy();  // the copy down has landed
    INFO(ga[g]->name());
    CHECK(relative_diff(gb[g]->grad(), ga[g]->grad().cpu()) <= 2 * gradient_tolerance(on_device, 1));
  }
  b.apply_gradients();
  // After the step each group's device parameters are its master cast to bf16 (round to nearest
  // even on the device, as the all-gather's cast on the host would give): equal element by element.
  torch::cuda::synchronize();
  for (FlatParamGroup* g : gb) {
    g->unshard();
    for (size_t i = 0; i < g->specs().size(); ++i) {
      const ParamSpec& spec = g->specs()[i];
      const at::Tensor expected = g->master.detach().narrow(0, spec.offset, spec.numel()).to(at::kBFloat16);
      INFO(g->name() << "." << spec.name);
      CHECK(at::equal(g->view(i).reshape({-1}).cpu(), expected));
    }
    g->reshard();
  }
}

TEST_CASE("cuda: the fused loss reads its answer statistics inside the kernel's own workspace", "[.cuda]") {
  // Found on an H200 (2026-11-26): the long-range task's S/8 answer rows had their [k, V] logits
  // made at once (bf16, an fp32 copy, a gathered copy and log-softmax), 13 GiB of Llama-3.2-1B's
  // loss phase at 64K tokens, where the planner charges the kernel's workspace alone.
  REQUIRE(prepare_cuda().available);
  const at::Device gpu = test_gpu();
  MemoryTracker& tracker = MemoryTracker::instance();
  const int64_t S = 8192, d = 64, V = 32768, tile = 1024, answers = S / 8;
  at::manual_seed(5);
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(gpu);
  const at::Tensor normed = at::randn({1, S, d}, bf16);   // [1, S, d]
  const at::Tensor head = at::randn({V, d}, bf16) * 0.1;  // [V, d]
  const at::Tensor labels = at::randint(V, {1, S}, at::TensorOptions().dtype(at::kLong).device(gpu));
  const at::Tensor mask = at::arange(S, labels.options()).remainder(8).eq(0).unsqueeze(0);  // [1, S]
  AnswerStats stats;
  tiled_loss_forward(normed, head, labels, mask, 1.0 / S, tile, &stats);  // first use: cuBLAS, kernels
  torch::cuda::synchronize();
  const int64_t base = tracker.device_bytes(0);
  const int window = tracker.open_peak_window(0);
  LossOutputs out = tiled_loss_forward(normed, head, labels, mask, 1.0 / S, tile, &stats);
  torch::cuda::synchronize();
  const int64_t peak = tracker.close_peak_window(0, window).device_peak - base;
  const kernels::FusedLossTiles tiles = kernels::fused_loss_tiles(1, tile, V);
  const kernels::LceTilePlan plan =
      kernels::plan_linear_cross_entropy(kernels::KernelDtype::BF16, {S, d, V, tiles.seq_tile, tiles.vocab_tile});
  // What stays: d_head fp32 [V, d], dx [S, d] bf16 and the loss; while the kernel runs: its
  // workspace, per-token CE [S] fp32 and the label flag; then the answers' index tensors (rows,
  // targets int64, CE fp32) and nonzero()'s scratch over the mask (4 int64 words an entry); the
  // caching allocator rounds each of some 40 blocks up to 512 B. The chunked logits fit in the
  // released workspace (fused_loss_answer_rows), so nothing more.
  const int64_t bound =
      V * d * 4 + S * d * 2 + static_cast<int64_t>(plan.bytes) + S * 4 + answers * 20 + 4 * S * 8 + 40 * 512;
  INFO("peak " << peak << " B, bound " << bound << " B; all answers' bf16 logits alone " << answers * V * 2 << " B");
  CHECK(peak <= bound);
  CHECK(stats.count.item<double>() == 2.0 * answers);  // two calls
  CHECK(out.loss.item<double>() > 0);
  // The CE read from the kernel's per-token loss against the all-logits reference of the answer
  // rows (bf16 logits made fp32, as the path before the fix did): the kernel's fp32 logits differ
  // from the bf16-rounded ones by at most u = 2^-8 of their size, so each answer's CE (log-sum-exp
  // minus the label's logit) by at most 2 u max|logit|.
  AnswerStats reference;
  const at::Tensor rows = mask.reshape(-1).nonzero().squeeze(1);
  const at::Tensor picked = head_logits(normed.reshape({S, d}).index_select(0, rows), head);  // [k, V] fp32
  accumulate_answer_stats(picked.unsqueeze(0), labels.reshape(-1).index_select(0, rows).unsqueeze(0),
                          at::ones({1, answers}, mask.options()), &reference);
  const double max_logit = picked.abs().max().item<double>();
  INFO("CE sum " << stats.ce_sum.item<double>() / 2 << " against " << reference.ce_sum.item<double>());
  CHECK(std::abs(stats.ce_sum.item<double>() / 2 - reference.ce_sum.item<double>()) <=
        answers * 2.0 * std::ldexp(1.0, -8) * max_logit);
}

TEST_CASE("cuda: the host AdamW pipelined under the next forward trains as the passes after backward", "[.cuda]") {
  // bf16, optimizer offloaded: on a GPU the passes run under the next step's forward by default
  // (engine/layout/schedule_rules.h). Against the same trainer with the passes after backward:
  // the same fused pass on the same values. optimizer_tolerance holds for identical gradients
  // only: a gradient near zero whose sign differs moves AdamW's first step by 2 lr, far past it.
  // So the device's kernels that sum with atomics (FlashAttention's dq) run their deterministic
  // variants here (warn-only: an op without one warns, it does not throw), and both trainers see
  // the same gradients. Step 2's loss, whose forward awaited step 1's updates, within the loss
  // bound, and the parameters after two steps within the optimizer bound.
  REQUIRE(prepare_cuda().available);
  struct DeterministicScope {
    const bool was = at::globalContext().deterministicAlgorithms();
    const bool warned = at::globalContext().deterministicAlgorithmsWarnOnly();
    DeterministicScope() { at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true); }
    ~DeterministicScope() { at::globalContext().setDeterministicAlgorithms(was, warned); }
  } deterministic;
  RunConfig cfg = cuda_config();
  cfg.training.dtype = DType::BFloat16;
  cfg.memory.offload_optimizer = true;
  Trainer serial(cfg, cuda_rank()), pipelined(cfg, cuda_rank());
  serial.set_overlap_host_optimizer(false);
  CHECK(pipelined.overlaps_host_optimizer());
  std::vector<double> ls, lp;
  int awaited = 0;
  for (int s = 0; s < 2; ++s) {
    ls.push_back(serial.step().loss);
    lp.push_back(pipelined.step().loss);
    for (const PhaseRecord& r : pipelined.recorder().take_records())
      awaited += s == 1 && r.path.find("host_update") != std::string::npos;
  }
  CHECK(awaited == static_cast<int>(pipelined.model().groups().size()));  // each group once, in step 2's forward
  CHECK(std::abs(ls[1] - lp[1]) <= loss_tolerance(cfg, 1) * std::abs(ls[1]));
  int64_t elements = 0;
  std::vector<at::Tensor> pp;
  for (auto* g : pipelined.model().groups()) {
    pp.push_back(g->master.detach().clone());
    elements += g->shard_numel();
  }
  std::string worst;
  const double diff = per_param_max_relative_diff(serial, pp, group_params(serial), &worst);
  INFO("worst parameter " << worst << ": " << diff);
  CHECK(diff <= optimizer_tolerance(cfg, 2, elements));
}
