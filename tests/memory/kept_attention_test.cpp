// Kept attention (memory.keep_attention) on one rank: with checkpointing, the step that keeps each
// block's attention output and log-sum-exp gives the loss and gradients of the step that
// recomputes them, bit for bit, on every attention path (standard, Untied stages, GQA, fp32 and
// bf16); the kept bytes are the planner's, and the recompute runs no attention kernel. Kept on
// the host (memory.offload_kept_attention): the same step bit for bit, the payload's layout, and
// the device and host bytes it moves, the planner's to the byte.
// defines: test cases [engine][memory][kept]
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "../common/engine_test_util.h"
#include "engine/config/validate.h"
#include "engine/layout/planned_buffers.h"
#include "engine/parallel/kept_attention.h"
#include "measure_util.h"

#include <c10/util/Flags.h>

// c10's CPU allocator fills each new block with a junk pattern while this is set (alloc_cpu.cpp)
C10_DECLARE_bool(caffe2_cpu_allocator_do_junk_fill);

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

RunConfig kept_config(const Path& path, DType dtype, bool keep, bool on_host = false) {
  RunConfig c = tiny_config(/*layers=*/3, /*seq=*/64);  // 4 query heads over 2 KV heads of 8
  c.training.dtype = dtype;
  c.memory.activation_checkpointing = true;
  c.memory.untied_ulysses = path.untied;
  c.memory.heads_per_stage = path.heads_per_stage;
  c.memory.keep_attention = keep;
  c.memory.offload_activations = c.memory.offload_kept_attention = on_host;
  return c;
}

/// The saved activations at the loss phase's peak (the forward's end): measured, and planned.
int64_t saved_at_loss(const Measured& m) {
  return m.phases.at("fwd/loss").category_at_peak[static_cast<int>(MemCategory::SavedActivations)];
}
int64_t planned_saved_at_loss(const MemoryPlan& p) {
  const PhasePlan* loss = planned_phase(p, "fwd/loss");
  return loss ? loss->category_bytes[static_cast<int>(MemCategory::SavedActivations)] : int64_t{-1};
}

/// `c` is refused once, under `key`, by a rule that says `rule`.
void check_refused(const RunConfig& c, const char* key, const char* rule) {
  const auto issues = validate(c);
  REQUIRE(issues.size() == 1);
  CHECK(issues[0].key == key);
  CHECK_THAT(issues[0].rule, Catch::Contains(rule));
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
  check_refused(c, "memory.keep_attention", "needs memory.activation_checkpointing = true");
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

TEST_CASE(
    "kept attention on the host and in the top blocks only: the step equals every block's kept on the device "
    "bit for bit on every path",
    "[engine][memory][kept][equivalence]") {
  // All runs offload the block inputs and keep the attention of some blocks: every block's on the
  // device (the reference), every block's packed and sent to the host pool and back, only the top
  // two blocks' (on the host) or the top one's (on the device) while the others recompute. Packing
  // and the copies move bytes without arithmetic, the replay reads them in the strides the kernel
  // wrote, and a block that recomputes runs the kernel the keeping one ran in its forward on the
  // same input, so the loss and every gradient are equal exactly on any CPU (the same kernels run
  // in every run).
  struct Variant {
    const char* name;
    bool on_host;
    int64_t blocks;
    int64_t offloaded_per_step;  // kept_attention_offloaded_blocks(3, blocks).count on the host
  };
  constexpr Variant kVariants[] = {
      {"every block's on the host", true, 0, 2}, {"the top two on the host", true, 2, 1}, {"the top one", false, 1, 0}};
  for (const Path& path : kPaths) {
    for (const DType dtype : {DType::Float32, DType::BFloat16}) {
      for (const Variant& variant : kVariants) {
        INFO(path.name << (dtype == DType::Float32 ? ", fp32, " : ", bf16, ") << variant.name);
        RunConfig device_cfg = kept_config(path, dtype, true, true);
        device_cfg.memory.offload_kept_attention = false;
        REQUIRE(validate(device_cfg).empty());
        RunConfig variant_cfg = kept_config(path, dtype, true, variant.on_host);
        variant_cfg.memory.offload_activations = true;
        variant_cfg.memory.keep_attention_blocks = variant.blocks;
        REQUIRE(validate(variant_cfg).empty());
        const int64_t L = variant_cfg.model.n_layers;
        // the keeping blocks are the top ones; the host takes all of them but the last
        CHECK(kept_attention_blocks(L, variant.blocks).first == (variant.blocks == 0 ? 0 : L - variant.blocks));
        if (variant.on_host)
          CHECK(kept_attention_offloaded_blocks(L, variant.blocks).count == variant.offloaded_per_step);
        Trainer on_device(device_cfg, cpu_rank());
        Trainer other(variant_cfg, cpu_rank());
        for (int step = 0; step < 2; ++step) {
          const double loss_device = on_device.forward_backward(on_device.next_step());
          const double loss_other = other.forward_backward(other.next_step());
          CHECK(loss_other == loss_device);
          const auto a = group_grads(on_device), b = group_grads(other);
          REQUIRE(a.size() == b.size());
          for (size_t g = 0; g < a.size(); ++g) {
            INFO("group " << g << " at step " << step + 1);
            CHECK(at::equal(a[g], b[g]));
          }
          on_device.apply_gradients();
          other.apply_gradients();
        }
        // the keeping blocks but the last sent theirs each step; the device run none
        CHECK(other.kept_attention_store().total_offloaded() == 2 * variant.offloaded_per_step);
        CHECK(on_device.kept_attention_store().total_offloaded() == 0);
      }
    }
  }
}

TEST_CASE("kept attention on the host: the payload holds each part at its offset, in the strides it had",
          "[engine][memory][kept]") {
  // Standard attention: the output in a kernel's permuted layout ([B, S, h, hd] in memory, seen as
  // [B, h, S, hd]) and one LSE. Untied: the whole output and two stages' LSEs. Copies only, so
  // every value comes back exactly.
  const int64_t B = 2, h = 4, S = 9, hd = 6;  // odd sizes: parts that do not end on the alignment
  auto arange = [](std::vector<int64_t> sizes, at::ScalarType dtype) {
    int64_t n = 1;
    for (int64_t d : sizes) n *= d;
    return at::arange(n, at::TensorOptions().dtype(at::kFloat)).reshape(sizes).to(dtype);
  };
  for (const bool untied : {false, true}) {
    INFO((untied ? "untied" : "standard"));
    KeptAttention kept;
    std::vector<at::Tensor> lses;
    at::Tensor out;
    if (untied) {
      out = arange({B, S, h * hd}, at::kBFloat16);
      kept.untied_out = out;
      for (int stage = 0; stage < 2; ++stage) {
        FlashResult r;
        r.lse = arange({B, h / 2, S}, at::kFloat) + stage;
        lses.push_back(r.lse);
        kept.results.push_back(r);
      }
    } else {
      out = arange({B, S, h, hd}, at::kBFloat16).transpose(1, 2);  // [B, h, S, hd], not contiguous
      REQUIRE_FALSE(out.is_contiguous());
      FlashResult r;
      r.out = out;
      r.lse = arange({B, h, S}, at::kFloat);
      lses.push_back(r.lse);
      kept.results.push_back(r);
    }
    const KeptAttentionPayload layout = kept_attention_payload(
        static_cast<int64_t>(out.nbytes()), static_cast<int64_t>(lses[0].nbytes()), static_cast<int64_t>(lses.size()));
    // c10's CPU allocator fills each new block with a junk pattern meanwhile, so a byte the
    // packing left unwritten shows (copies and fills only: no kernel choice of the CPU matters)
    struct JunkFill {
      bool before = FLAGS_caffe2_cpu_allocator_do_junk_fill;
      JunkFill() { FLAGS_caffe2_cpu_allocator_do_junk_fill = true; }
      ~JunkFill() { FLAGS_caffe2_cpu_allocator_do_junk_fill = before; }
    };
    const at::Tensor payload = [&] {
      const JunkFill junk;
      // the fill is on: a fresh block holds no zero byte (the pattern 0x7fedbeef has none)
      REQUIRE(at::empty({layout.bytes()}, at::TensorOptions().dtype(at::kByte)).ne(0).all().item<bool>());
      return pack_kept_attention(kept);
    }();
    CHECK(payload.scalar_type() == at::kByte);
    CHECK(payload.numel() == layout.bytes());
    // every byte is written: the gaps to each part's alignment are zeros (the copy to the host reads them)
    for (int64_t part = 0; part <= layout.lse_parts; ++part) {
      const int64_t end = layout.offset(part) + (part == 0 ? layout.out_bytes : layout.lse_bytes);
      CAPTURE(part, end, layout.offset(part + 1));
      REQUIRE(layout.offset(part + 1) > end);  // these odd sizes leave a gap after every part
      CHECK(payload.narrow(0, end, layout.offset(part + 1) - end).eq(0).all().item<bool>());
    }
    CHECK(layout.offset(1) % KeptAttentionPayload::kAlignment == 0);
    CHECK(layout.offset(1) >= layout.out_bytes);
    CHECK_FALSE(kept.untied_out.defined());  // only the payload holds them now
    for (const FlashResult& r : kept.results) {
      CHECK_FALSE(r.out.defined());
      CHECK_FALSE(r.lse.defined());
    }
    const at::Tensor back = payload.clone();  // the payload's trip to the host and back
    unpack_kept_attention(kept, back);
    const at::Tensor kept_out = untied ? kept.untied_out : kept.results[0].out;
    CHECK(kept_out.strides().vec() == out.strides().vec());
    CHECK(at::equal(kept_out, out));
    for (size_t i = 0; i < lses.size(); ++i) {
      CHECK(at::equal(kept.results[i].lse, lses[i]));
      CHECK(kept.results[i].lse.data_ptr() ==
            static_cast<void*>(static_cast<uint8_t*>(back.data_ptr()) + layout.offset(static_cast<int64_t>(i) + 1)));
    }
  }
}

TEST_CASE("kept attention on the host and by the top blocks: a key without what it needs is refused, naming it",
          "[engine][memory][kept]") {
  RunConfig c = kept_config(kPaths[0], DType::Float32, true, true);
  c.memory.offload_activations = false;
  check_refused(c, "memory.offload_kept_attention", "offload_activations is false");
  c = kept_config(kPaths[0], DType::Float32, false, true);
  check_refused(c, "memory.offload_kept_attention", "keep_attention is false");
  // keep_attention_blocks: only with kept attention, and no more blocks than the model has
  c = kept_config(kPaths[0], DType::Float32, false);
  c.memory.keep_attention_blocks = 2;
  check_refused(c, "memory.keep_attention_blocks", "needs memory.keep_attention = true");
  c = kept_config(kPaths[0], DType::Float32, true);
  c.memory.keep_attention_blocks = c.model.n_layers + 1;
  check_refused(c, "memory.keep_attention_blocks", "at most model.n_layers (3)");
  // the top block alone keeps, and its kept attention stays on the device: nothing would go
  c = kept_config(kPaths[0], DType::Float32, true, true);
  c.memory.keep_attention_blocks = 1;
  check_refused(c, "memory.offload_kept_attention", "sends nothing");
}

TEST_CASE(
    "measurement: kept attention on the host moves all but the last block's payload from the device to the host "
    "(planner to the byte)",
    "[engine][memory][measure][kept]") {
  // 8 blocks, inputs offloaded, attention kept. At the loss (the forward's end) the device run
  // holds every block's output and LSE; the host run only the last block's: blocks 0..6 sent
  // theirs, and the last payload sent (block 6's) was freed when block 7's attention was queued.
  // The host pool holds those 7 payloads at its peak. Measured and planned, to the byte.
  for (const Path& path : kPaths) {
    INFO(path.name);
    RunConfig on_device = long_measurement_config();  // 8 layers, 1024 tokens, 4/2 heads of 16, d 64, fp32
    on_device.memory.activation_checkpointing = on_device.memory.offload_activations = true;
    on_device.memory.keep_attention = true;
    on_device.memory.untied_ulysses = path.untied;
    on_device.memory.heads_per_stage = path.heads_per_stage;
    RunConfig on_host = on_device;
    on_host.memory.offload_kept_attention = true;
    const Measured md = measure_step(on_device), mh = measure_step(on_host);
    const MemoryPlan pd = plan_memory(on_device), ph = plan_memory(on_host);
    const int64_t S = on_device.training.seq_len, H = on_device.model.n_heads, hd = on_device.model.head_dim;
    const int64_t L = on_device.model.n_layers;
    const int64_t per_block = S * H * hd * 4 + H * S * 4;  // output + fp32 LSE (B = 1, P = 1, fp32)
    const int64_t stages = path.untied ? H / path.heads_per_stage : 1;
    const int64_t payload = kept_attention_payload(S * H * hd * 4, H * S * 4 / stages, stages).bytes();
    INFO("saved at the loss: measured " << saved_at_loss(md) << " -> " << saved_at_loss(mh) << " B; planned "
                                        << planned_saved_at_loss(pd) << " -> " << planned_saved_at_loss(ph) << " B");
    CHECK(saved_at_loss(md) - saved_at_loss(mh) == (L - 1) * per_block);
    CHECK(planned_saved_at_loss(pd) - planned_saved_at_loss(ph) == (L - 1) * per_block);
    INFO("host peak: measured " << md.host_peak << " -> " << mh.host_peak << " B; planned " << pd.host_bytes << " -> "
                                << ph.host_bytes << " B");
    CHECK(mh.host_peak - md.host_peak == (L - 1) * payload);
    CHECK(ph.host_bytes - pd.host_bytes == (L - 1) * payload);
    CHECK(mh.host_peak == ph.host_bytes);  // one rank: the node's host bytes are the rank's

    // Kept on the device by the top 3 blocks only: 5 blocks' output and LSE fewer at the loss, and
    // the lowest block's recompute allocates its attention kernel's buffers again, as plain
    // checkpointing's does (the planner's bytes, measured)
    RunConfig top3 = on_device;
    top3.memory.keep_attention_blocks = 3;
    const Measured mt = measure_step(top3);
    const MemoryPlan pt = plan_memory(top3);
    INFO("saved at the loss, top 3: measured " << saved_at_loss(mt) << " B, planned " << planned_saved_at_loss(pt));
    CHECK(saved_at_loss(md) - saved_at_loss(mt) == (L - 3) * per_block);
    CHECK(planned_saved_at_loss(pd) - planned_saved_at_loss(pt) == (L - 3) * per_block);
    RunConfig plain = on_device;
    plain.memory.keep_attention = false;
    const Measured mp = measure_step(plain);
    const MemoryPlan pp = plan_memory(plain);
    auto recompute_peak = [](const Measured& m, const std::string& phase) { return m.phases.at(phase).device_peak; };
    auto planned_recompute_peak = [](const MemoryPlan& p, const std::string& phase) {
      const PhasePlan* r = planned_phase(p, phase);
      return r ? r->resident_bytes : int64_t{-1};
    };
    // block 0 (recomputes; the top blocks' kept tensors died with their backward): as plain checkpointing
    const std::string lowest = "bwd/block.0/recompute", top = "bwd/block." + std::to_string(L - 1) + "/recompute";
    CHECK(recompute_peak(mt, lowest) == recompute_peak(mp, lowest));
    CHECK(planned_recompute_peak(pt, lowest) == planned_recompute_peak(pp, lowest));
    // the top block (replays): as every block kept, less the 5 lower blocks' kept tensors
    CHECK(recompute_peak(md, top) - recompute_peak(mt, top) == (L - 3) * per_block);
    CHECK(planned_recompute_peak(pd, top) - planned_recompute_peak(pt, top) == (L - 3) * per_block);
  }
}
