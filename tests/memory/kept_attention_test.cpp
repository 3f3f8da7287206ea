// Kept attention (memory.keep_attention) on one rank: with checkpointing, the step that keeps each
// block's attention output and log-sum-exp gives the loss and gradients of the step that
// recomputes them, bit for bit, on every attention path (standard, Untied stages, GQA, fp32 and
// bf16); the kept bytes are the planner's, and the recompute runs no attention kernel.
// defines: test cases [engine][memory][kept]
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "../common/engine_test_util.h"
#include "engine/config/validate.h"
#include "measure_util.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// The attention paths of one rank: standard SDPA, and Untied stages of 1 and 2 query heads
/// (2 stages reading one KV head each, 4 stages sharing KV heads), over GQA 4/2.
struct Path {
  const char* name;
  bool untied;
  int64_t heads_per_stage;
};
constexpr Path kPaths[] = {
    {"standard", false, 0}, {"untied 2 heads a stage", true, 2}, {"untied 1 head a stage", true, 1}};

RunConfig kept_config(const Path& path, DType dtype, bool keep) {
  RunConfig c = tiny_config(/*layers=*/3, /*seq=*/64);  // 4 query heads over 2 KV heads of 8
  c.training.dtype = dtype;
  c.memory.activation_checkpointing = true;
  c.memory.untied_ulysses = path.untied;
  c.memory.heads_per_stage = path.heads_per_stage;
  c.memory.keep_attention = keep;
  return c;
}

}  // namespace

TEST_CASE("kept attention: the step equals plain checkpointing's bit for bit on every one-rank path",
          "[engine][memory][kept][equivalence]") {
  // Both runs compute the same forward with the same kernels on the same input (one intra-op
  // thread): keeping the attention's output and LSE instead of computing them again in the
  // recompute hands backward identical tensors, so the loss and every gradient are equal exactly,
  // whatever the CPU's vector width (it is the same for both runs).
  for (const Path& path : kPaths) {
    for (const DType dtype : {DType::Float32, DType::BFloat16}) {
      INFO(path.name << (dtype == DType::Float32 ? ", fp32" : ", bf16"));
      Trainer plain(kept_config(path, dtype, false), cpu_rank());
      Trainer kept(kept_config(path, dtype, true), cpu_rank());
      for (int step = 0; step < 2; ++step) {  // the second step's kept slots start empty again
        const double loss_plain = plain.forward_backward(plain.next_step());
        const double loss_kept = kept.forward_backward(kept.next_step());
        CHECK(loss_kept == loss_plain);
        const auto a = group_grads(plain), b = group_grads(kept);
        REQUIRE(a.size() == b.size());
        for (size_t g = 0; g < a.size(); ++g) {
          INFO("group " << g << " at step " << step + 1);
          CHECK(at::equal(a[g], b[g]));
        }
        plain.apply_gradients();
        kept.apply_gradients();
      }
    }
  }
}

TEST_CASE("kept attention: keep_attention without checkpointing is refused, naming both keys",
          "[engine][memory][kept]") {
  RunConfig c = kept_config(kPaths[0], DType::Float32, true);
  c.memory.activation_checkpointing = false;
  const auto issues = validate(c);
  REQUIRE(issues.size() == 1);
  CHECK(issues[0].key == "memory.keep_attention");
  CHECK_THAT(issues[0].rule, Catch::Contains("needs memory.activation_checkpointing = true"));
}

TEST_CASE(
    "measurement: kept attention holds each block's output and LSE from its forward, and its recompute "
    "allocates no attention kernel's buffers (planner to the byte)",
    "[engine][memory][measure][kept]") {
  // 8 blocks: after the forward (the loss phase's start) the kept config holds, beside the
  // checkpointed inputs, each block's attention output and LSE: [B, H, S, hd] + [B, H, S] fp32 on
  // the standard path, [B, S, H*hd] + the stages' LSEs on the Untied one. Measured and planned,
  // the growth is that and nothing else.
  for (const Path& path : kPaths) {
    for (const DType dtype : {DType::Float32, DType::BFloat16}) {
      INFO(path.name << (dtype == DType::Float32 ? ", fp32" : ", bf16"));
      RunConfig plain = long_measurement_config();  // 8 layers, 1024 tokens, 4/2 heads of 16, d 64
      plain.training.dtype = dtype;
      plain.memory.activation_checkpointing = true;
      plain.memory.untied_ulysses = path.untied;
      plain.memory.heads_per_stage = path.heads_per_stage;
      RunConfig kept = plain;
      kept.memory.keep_attention = true;
      const Measured mp = measure_step(plain), mk = measure_step(kept);
      const MemoryPlan pp = plan_memory(plain), pk = plan_memory(kept);
      const int64_t c = dtype == DType::Float32 ? 4 : 2;
      const int64_t S = plain.training.seq_len, H = plain.model.n_heads, hd = plain.model.head_dim;
      const int64_t per_block = S * H * hd * c + H * S * 4;  // output + fp32 LSE (B = 1, P = 1)
      const int64_t L = plain.model.n_layers;
      auto saved_at_loss = [](const Measured& m) {
        return m.phases.at("fwd/loss").category_at_peak[static_cast<int>(MemCategory::SavedActivations)];
      };
      auto planned_saved_at_loss = [](const MemoryPlan& p) {
        for (const auto& ph : p.phases)
          if (ph.name == "fwd/loss") return ph.category_bytes[static_cast<int>(MemCategory::SavedActivations)];
        return int64_t{-1};
      };
      INFO("measured saved at the loss: " << saved_at_loss(mp) << " -> " << saved_at_loss(mk) << " B; planned "
                                          << planned_saved_at_loss(pp) << " -> " << planned_saved_at_loss(pk) << " B");
      CHECK(saved_at_loss(mk) - saved_at_loss(mp) == L * per_block);
      CHECK(planned_saved_at_loss(pk) - planned_saved_at_loss(pp) == L * per_block);
      // The recompute of the top block: the plain one allocates the kernel's output, LSE and
      // scratch (or a whole Untied stage) beyond the kept one; the difference measured equals
      // the difference planned.
      const std::string recompute = "bwd/block." + std::to_string(L - 1) + "/recompute";
      const int64_t measured_cut = mp.phases.at(recompute).device_peak - mk.phases.at(recompute).device_peak;
      int64_t planned_cut = 0;
      for (const auto& ph : pp.phases)
        if (ph.name == recompute) planned_cut += ph.resident_bytes;
      for (const auto& ph : pk.phases)
        if (ph.name == recompute) planned_cut -= ph.resident_bytes;
      INFO("the top block's recompute peak falls by " << measured_cut << " B measured, " << planned_cut
                                                      << " B planned");
      CHECK(measured_cut == planned_cut);
    }
  }
}
