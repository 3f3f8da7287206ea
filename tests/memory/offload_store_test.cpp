// The offload store's protocol without a GPU: the calls a training step makes on its transport
// (recorded by a fake that moves the bytes as the CPU transport does), and the two device slots'
// memory call by call, including the misuses the slot rotation refuses. defines: test cases [offload]
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../common/engine_test_util.h"
#include "engine/layout/planned_buffers.h"
#include "engine/memory/offload.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// Moves the bytes with the CPU transport and logs each call: "offload 0", "prefetch 2", ...
class RecordingTransport final : public OffloadTransport {
 public:
  explicit RecordingTransport(std::vector<std::string>* log, OffloadedKind kind = OffloadedKind::BlockInputs)
      : inner_(make_host_clone_transport(kind)), log_(log) {}
  void start_step(const OffloadedBlocks& blocks, int64_t bytes) override {
    log_->push_back("start blocks " + std::to_string(blocks.first) + ".." +
                    std::to_string(blocks.first + blocks.count - 1) + " x " + std::to_string(bytes) + " B");
    inner_->start_step(blocks, bytes);
  }
  void offload(int64_t layer, const at::Tensor& x) override {
    log_->push_back("offload " + std::to_string(layer));
    inner_->offload(layer, x);
  }
  void prefetch(int64_t layer, const at::Tensor& slot) override {
    log_->push_back("prefetch " + std::to_string(layer));
    inner_->prefetch(layer, slot);
  }
  void fence_copy(int64_t layer) override {
    log_->push_back("fence " + std::to_string(layer));
    inner_->fence_copy(layer);
  }
  void acquire(int64_t layer) override { log_->push_back("acquire " + std::to_string(layer)); }
  void release(int64_t layer) override { log_->push_back("release " + std::to_string(layer)); }
  void end_step() override {
    log_->push_back("end");
    inner_->end_step();
  }
  int64_t host_bytes() const override { return inner_->host_bytes(); }

 private:
  std::unique_ptr<OffloadTransport> inner_;
  std::vector<std::string>* log_;
};

}  // namespace

TEST_CASE(
    "offload: a training step offloads blocks 1..L-2, prefetches each while the block above recomputes, "
    "releases each after its backward, and looks block 0's input up again from the token ids",
    "[offload]") {
  RunConfig cfg = tiny_config(/*layers=*/4, /*seq=*/64);
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
  Trainer t(cfg, cpu_rank());
  std::vector<std::string> log;
  t.offload_store().set_transport(std::make_unique<RecordingTransport>(&log));
  t.forward_backward(0);
  const int64_t input_bytes = 64 * cfg.model.d_model * 4;  // [1, 64, d] fp32
  const std::vector<std::string> expected{
      "start blocks 1..2 x " + std::to_string(input_bytes) + " B",
      // forward; block 0's input is the embedding's, block 3's stays on the device; each copied
      // input is freed behind its copy once the next block's attention is queued
      "offload 1", "fence 1", "offload 2", "fence 2",
      "prefetch 2",                            // block 3 recomputes from its saved input
      "acquire 2", "prefetch 1", "release 2",  // block 2 from slot 0, block 1 into slot 1
      "acquire 1", "release 1",                // block 0 recomputes its input from the token ids: nothing to prefetch
      "end"};                                  // Trainer: after the backward
  CHECK(log == expected);
  CHECK(t.offload_store().device_bytes() == 0);
  CHECK(t.offload_store().host_bytes() == 0);
}

TEST_CASE(
    "offload: the kept attention's store is sized by the payload rule before any block runs, and every block's "
    "packed payload has those bytes",
    "[offload][kept]") {
  // memory.offload_kept_attention. The store is sized at the step's start from the run's shapes
  // (LlamaModel::start_kept_offload_step: kept_attention_step_payload), before any block has packed
  // anything, so that on a GPU the trainer pins the same slab at setup and no step pins again; a
  // packed payload of other bytes would be refused by put(). The bytes by hand: the output of the 4
  // query heads over 64 tokens, then one fp32 [1, k, 64] log-sum-exp per stage of k heads, each
  // part from a multiple of 256 B. Pure shapes: no kernel's choice enters them.
  struct Path {
    const char* name;
    bool untied;
    int64_t heads_per_stage;
  };
  for (const Path& path :
       {Path{"standard", false, 0}, Path{"untied 2 heads a stage", true, 2}, Path{"untied 1 head a stage", true, 1}}) {
    INFO(path.name);
    RunConfig cfg = tiny_config(/*layers=*/4, /*seq=*/64);  // 4 query heads over 2 KV heads of 8, fp32
    cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
    cfg.memory.keep_attention = cfg.memory.offload_kept_attention = true;
    cfg.memory.untied_ulysses = path.untied;
    cfg.memory.heads_per_stage = path.heads_per_stage;
    Trainer t(cfg, cpu_rank());
    std::vector<std::string> log;
    t.kept_attention_store().set_transport(std::make_unique<RecordingTransport>(&log, OffloadedKind::KeptAttention));
    const int64_t H = cfg.model.n_heads, hd = cfg.model.head_dim, S = 64;
    const int64_t stage_heads = path.untied ? path.heads_per_stage : H;
    const auto aligned = [](int64_t n) { return (n + 255) / 256 * 256; };
    const int64_t payload = aligned(S * H * hd * 4) + (H / stage_heads) * aligned(stage_heads * S * 4);
    CHECK(kept_attention_step_payload(1, S, H, hd, 4, stage_heads, S).bytes() ==
          payload);                         // the CPU's kernel: no padding
    for (int step = 0; step < 2; ++step) {  // the second step finds the store sized the same
      log.clear();
      t.forward_backward(t.next_step());
      // blocks 0..2 send theirs (block 3's, the last, stays on the device): one start, first
      REQUIRE(!log.empty());
      CHECK(log.front() == "start blocks 0..2 x " + std::to_string(payload) + " B");
      CHECK(std::count_if(log.begin(), log.end(), [](const std::string& e) { return e.rfind("start", 0) == 0; }) == 1);
      CHECK(std::count(log.begin(), log.end(), "offload 0") == 1);
      CHECK(std::count(log.begin(), log.end(), "offload 2") == 1);
    }
    CHECK(t.kept_attention_store().total_offloaded() == 2 * 3);  // put() took each packed payload
  }
}

TEST_CASE("offload: the two slots hold exactly the block computing and the one prefetched, and refuse misuse",
          "[offload]") {
  OffloadStore store(at::kCPU);
  store.start_step(offloaded_blocks(4), {1, 8, 16}, at::kFloat);
  const int64_t D = 8 * 16 * 4;  // one input, fp32
  std::vector<at::Tensor> inputs;
  for (int64_t i = 0; i < 3; ++i) {
    inputs.push_back(at::full({1, 8, 16}, static_cast<double>(i + 1)));
    store.put(i, inputs.back());
  }
  CHECK_THROWS_WITH(store.put(2, at::zeros({1, 4, 16})), Catch::Contains("another shape"));
  CHECK(store.host_bytes() == 3 * D);
  CHECK(store.device_bytes() == 0);

  store.prefetch(2);  // block 3 recomputes
  CHECK(store.device_bytes() == D);
  CHECK(store.host_bytes() == 2 * D);  // block 2's host copy is freed once on the device
  const at::Tensor x2 = store.take(2);
  CHECK(at::equal(x2, inputs[2]));
  const int64_t x2_version = x2._version();
  CHECK_THROWS_WITH(store.prefetch(0), Catch::Contains("block 0 needs slot 0, which is in use (block 2)"));
  store.prefetch(1);
  CHECK(store.device_bytes() == 2 * D);
  store.release(2);
  CHECK(store.device_bytes() == 2 * D);  // slot 0 is kept: block 0 will use it
  CHECK_THROWS_WITH(store.release(2), Catch::Contains("which is free"));
  const at::Tensor x1 = store.take(1);
  CHECK(at::equal(x1, inputs[1]));
  store.prefetch(0);                   // into slot 0, block 2's until its release
  CHECK(x2._version() == x2_version);  // its own version counter: the refill is no in-place change to it
  store.release(1);
  CHECK(store.device_bytes() == D);  // slot 1 freed: no block left for it
  const at::Tensor x0 = store.take(0);
  CHECK(at::equal(x0, inputs[0]));
  store.release(0);
  CHECK(store.device_bytes() == 0);
  CHECK(store.host_bytes() == 0);
  CHECK_THROWS_WITH(store.take(3), Catch::Contains("block 3 was never offloaded"));
  CHECK(store.total_offloaded() == 3);
}

TEST_CASE("offload: the store holds the input it copies until release_copied_input fences compute behind the copy",
          "[offload]") {
  std::vector<std::string> log;
  OffloadStore store(at::kCPU, std::make_unique<RecordingTransport>(&log));
  store.start_step(offloaded_blocks(5), {1, 8, 16}, at::kFloat);
  at::Tensor x1 = at::full({1, 8, 16}, 1.0), x2 = at::full({1, 8, 16}, 2.0);
  store.put(1, x1);
  CHECK(x1.use_count() == 2);  // the caller's and the store's: its copy may still read it
  store.release_copied_input();
  CHECK(x1.use_count() == 1);
  store.release_copied_input();  // nothing held: no second fence
  store.put(2, x2);
  at::Tensor x3 = at::full({1, 8, 16}, 3.0);
  store.put(3, x3);  // at most one is held: block 2's is fenced and dropped first
  CHECK(x2.use_count() == 1);
  CHECK(x3.use_count() == 2);
  store.clear();  // the end of a step (or a failed one) drops it after waiting for the copies
  CHECK(x3.use_count() == 1);
  const std::vector<std::string> expected{
      "start blocks 1..3 x 512 B", "offload 1", "fence 1", "offload 2", "fence 2", "offload 3", "end"};
  CHECK(log == expected);
}
