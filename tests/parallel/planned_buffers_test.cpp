// The planner against the engine buffer by buffer: every buffer the engine preallocates is noted
// under the planner term that predicts it, and planned_buffer_bytes must equal it byte for byte.
// defines: [planner][buffers]
//
// Walks every model flavor (shrunk to tiny widths, its query/KV head counts, QK-norm and tied
// embeddings kept) x GQA ratios (the flavor's, MHA, and 1 and 2 KV heads: fewer than the degree)
// x Ulysses degree {1, 2, 4, 8} x every valid heads per stage x batch {1, 2}, on rank 0 of an
// emulated job (EmulatedComm: the real shard and all-to-all shapes), with the full stack on, plus
// the plain and the tied (Ulysses without Untied) stacks, fp32 and bf16. No tolerance: the bytes
// are integers and both sides read the same layout (engine/layout).
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/engine_test_util.h"
#include "engine/config/validate.h"
#include "engine/layout/heads.h"
#include "engine/layout/planned_buffers.h"
#include "engine/parallel/job.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/planned_buffer_log.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

struct BufferCase {
  std::string label;
  RunConfig cfg;
};

std::string describe(const RunConfig& c) {
  std::ostringstream o;
  o << "H=" << c.model.n_heads << " Hkv=" << c.model.n_kv_heads << (c.model.qk_norm ? " qk_norm" : "")
    << (c.model.tie_embeddings ? " tied" : "") << " P=" << c.parallel.ulysses_degree << " W=" << c.parallel.world_size
    << (c.parallel.fsdp ? " fsdp" : "") << " B=" << c.training.batch_size << " S=" << c.training.seq_len
    << (c.training.dtype == DType::BFloat16 ? " bf16" : " fp32")
    << (c.memory.untied_ulysses ? " untied k/rank=" + std::to_string(c.memory.heads_per_stage) : "")
    << (c.memory.activation_checkpointing ? " ckpt" : "") << (c.memory.offload_activations ? " offload" : "")
    << (c.memory.offload_kept_attention ? " kept-attention-offload" : "")
    << (c.memory.keep_attention_blocks > 0 ? " kept-top-" + std::to_string(c.memory.keep_attention_blocks) : "")
    << (c.memory.offload_optimizer ? " offload-optimizer" : "") << (c.memory.tiled_mlp ? " tiled_mlp" : "")
    << (c.memory.tiled_loss ? " tiled_loss" : "");
  return o.str();
}

/// A flavor's attention structure at widths that run in milliseconds: three blocks (block 0's
/// input is looked up again, block 1's offloaded, the last one's stays), head_dim 2, d 16, d_ffn
/// 24, vocab 40, 32 tokens (the long-range task's least), tiles of 2 (two per rank's sequence at P = 8).
RunConfig shrunk(const ModelConfig& flavor, int64_t kv_heads, int64_t degree) {
  RunConfig c = tiny_config(/*layers=*/3, /*seq=*/32);
  c.model.n_heads = flavor.n_heads;
  c.model.n_kv_heads = kv_heads;
  c.model.qk_norm = flavor.qk_norm;
  c.model.tie_embeddings = flavor.tie_embeddings;
  c.model.head_dim = 2;
  c.model.d_model = 16;
  c.model.d_ffn = 24;
  c.model.vocab_size = 40;  // not a multiple of every world size: the flat groups pad
  c.memory.mlp_tile_tokens = 2;
  c.memory.loss_tile_tokens = 2;
  c.hardware = *find_hardware_profile("cpu");
  c.hardware.profile = "cpu";
  c.parallel.world_size = static_cast<int>(degree);
  c.parallel.ulysses_degree = static_cast<int>(degree);
  c.parallel.emulate = degree > 1;
  c.parallel.timeout_s = 60;
  return c;
}

std::vector<BufferCase> buffer_cases() {
  std::vector<BufferCase> out;
  std::set<std::string> seen;  // flavors that shrink to the same structure run once
  auto add = [&](RunConfig c) {
    if (!validate(c).empty()) return;  // e.g. P does not divide the heads
    const std::string label = describe(c);
    if (seen.insert(label).second) out.push_back({label, c});
  };
  for (const ModelFlavor& flavor : model_flavors()) {
    const int64_t H = flavor.shape.n_heads;
    for (int64_t kv : {flavor.shape.n_kv_heads, H, int64_t{1}, int64_t{2}}) {
      if (kv > H || H % kv != 0) continue;
      for (int64_t P : {1, 2, 4, 8}) {
        for (int64_t batch : {1, 2}) {
          RunConfig base = shrunk(flavor.shape, kv, P);
          base.training.batch_size = batch;
          add(base);  // plain: whole-sequence MLP, no gathers, no offload

          RunConfig stack = base;  // everything but Untied: Ulysses' all-to-all attention
          stack.parallel.fsdp = true;
          stack.memory.activation_checkpointing = stack.memory.offload_activations = true;
          stack.memory.tiled_mlp = stack.memory.tiled_loss = true;
          stack.memory.offload_optimizer = batch == 2;  // the device parameter copies, half the stacks
          // the kept attention's payload (KeptAttentionPayload) beside the inputs, the other half
          stack.memory.keep_attention = stack.memory.offload_kept_attention = batch == 1;
          // ... at P = 2 by the top two blocks only: one payload to the host (block 1's)
          stack.memory.keep_attention_blocks = batch == 1 && P == 2 ? 2 : 0;
          add(stack);

          RunConfig untied = stack;
          untied.memory.untied_ulysses = true;
          for (int64_t heads : valid_heads_per_stage(untied)) {
            untied.memory.heads_per_stage = heads;
            add(untied);
            if (batch == 1) {  // element sizes: bf16 stage buffers, gathered weights and shard casts
              RunConfig bf16 = untied;
              bf16.training.dtype = DType::BFloat16;
              bf16.memory.offload_optimizer = P == 2 || P == 8;  // bf16 device copies, no shard casts
              add(bf16);
            }
          }
        }
      }
    }
  }
  return out;
}

/// The distinct byte counts the engine allocated under each tag during one step of rank 0.
std::map<PlannedBuffer, std::set<int64_t>> engine_buffers(const RunConfig& cfg) {
  PlannedBufferLog log;
  run_on_ranks(cfg, "odyssey train PRESET", [&](RankContext& ctx) {
    Trainer trainer(cfg, ctx);
    trainer.step();
  });
  return log.seen();
}

}  // namespace

TEST_CASE("buffers: every buffer the engine preallocates is the planner's bytes, byte for byte", "[planner][buffers]") {
  const std::vector<BufferCase> cases = buffer_cases();
  // the sweep must reach what the issue names: KV heads fewer than the degree, several KV heads
  // per stage per rank, batch 2, every degree, bf16
  bool few_kv = false, wide_kv_stage = false, batch2 = false, p8 = false, bf16 = false;
  bool kept_offload_standard = false, kept_offload_untied = false;
  for (const BufferCase& c : cases) {
    const ModelConfig& m = c.cfg.model;
    const int64_t P = c.cfg.parallel.ulysses_degree;
    few_kv |= c.cfg.memory.untied_ulysses && m.n_kv_heads < P;
    wide_kv_stage |=
        c.cfg.memory.untied_ulysses &&
        plan_untied_stages(m.n_heads, m.n_kv_heads, m.head_dim, P, c.cfg.memory.heads_per_stage).max_kv_count > 1;
    batch2 |= c.cfg.training.batch_size == 2 && c.cfg.memory.untied_ulysses;
    p8 |= P == 8 && c.cfg.memory.untied_ulysses;
    bf16 |= c.cfg.training.dtype == DType::BFloat16;
    kept_offload_standard |= c.cfg.memory.offload_kept_attention && !c.cfg.memory.untied_ulysses;
    kept_offload_untied |= c.cfg.memory.offload_kept_attention && c.cfg.memory.untied_ulysses && P > 1;
  }
  CHECK(kept_offload_standard);
  CHECK(kept_offload_untied);
  CHECK(few_kv);
  CHECK(wide_kv_stage);
  CHECK(batch2);
  CHECK(p8);
  CHECK(bf16);
  INFO(cases.size() << " configurations");
  CHECK(cases.size() > 200);

  for (const BufferCase& c : cases) {
    const auto seen = engine_buffers(c.cfg);
    for (int i = 0; i < kPlannedBufferCount; ++i) {
      const auto tag = static_cast<PlannedBuffer>(i);
      const int64_t planned = planned_buffer_bytes(c.cfg, tag);
      const auto it = seen.find(tag);
      std::ostringstream engine;
      if (it == seen.end())
        engine << "none";
      else
        for (int64_t b : it->second) engine << b << " B ";
      INFO(c.label << "\n  " << planned_buffer_name(tag) << ": planned " << planned << " B, engine " << engine.str());
      if (planned == 0)
        CHECK(it == seen.end());
      else
        CHECK((it != seen.end() && it->second == std::set<int64_t>{planned}));
    }
  }
}
