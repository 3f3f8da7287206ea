// The FSDP overlap schedule without a GPU: rank 0 of a 2-rank FSDP job over a logging group whose
// started collectives complete only when finished (their work is done then), beside the phase
// edges of the same step. Each block's forward starts the next block's all-gather before its own
// compute and the next block finishes it; with deferred reduce-scatters, a block's reduction
// starts at the end of its backward and finishes at the end of the next block's, after that
// block's compute. defines: test cases [overlap]
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../common/engine_test_util.h"
#include "engine/parallel/emulated_comm.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// Emulated rank 0 of a group of 2 that logs its collectives; started ones run at finish().
class LoggingComm final : public Comm {
 public:
  LoggingComm(std::string name, std::vector<std::string>* log) : inner_(name, 2), name_(std::move(name)), log_(log) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return name_; }
  bool emulated() const override { return true; }
  std::string backend() const override { return "emulated"; }
  void all_gather(at::Tensor& out, const at::Tensor& in) override { inner_.all_gather(out, in); }
  void reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) override { inner_.reduce_scatter_sum(out, in); }
  void all_to_all(at::Tensor& out, const at::Tensor& in) override { inner_.all_to_all(out, in); }
  void all_reduce_sum(at::Tensor& t) override { inner_.all_reduce_sum(t); }
  void all_reduce_max(at::Tensor& t) override { inner_.all_reduce_max(t); }
  void broadcast(at::Tensor& t, int root) override { inner_.broadcast(t, root); }
  void barrier() override {}
  std::unique_ptr<PendingCollective> start_all_gather(at::Tensor& out, const at::Tensor& in) override {
    return start("all_gather", [this, out, in]() mutable { inner_.all_gather(out, in); });
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) override {
    return start("reduce_scatter", [this, out, in]() mutable { inner_.reduce_scatter_sum(out, in); });
  }

 private:
  struct Pending final : PendingCollective {
    std::function<void()> run;
    std::vector<std::string>* log;
    std::string id;
    void finish() override {
      run();
      log->push_back("finish " + id);
    }
  };
  std::unique_ptr<PendingCollective> start(const std::string& op, std::function<void()> run) {
    auto p = std::make_unique<Pending>();
    p->id = op + " #" + std::to_string(++started_[op]);
    p->run = std::move(run);
    p->log = log_;
    log_->push_back("start " + p->id);
    return p;
  }
  EmulatedComm inner_;
  std::string name_;
  std::vector<std::string>* log_;
  std::map<std::string, int> started_;
};

/// Index of the first log line equal to `line` (-1 when absent).
int64_t at_line(const std::vector<std::string>& log, const std::string& line) {
  const auto it = std::find(log.begin(), log.end(), line);
  return it == log.end() ? -1 : it - log.begin();
}

}  // namespace

TEST_CASE("fsdp overlap: all-gathers prefetch the next block, deferred reduce-scatters overlap the next backward",
          "[parallel][overlap]") {
  std::vector<std::string> log;
  RunConfig cfg = tiny_config(/*layers=*/3, /*seq=*/64);
  cfg.parallel.world_size = 2;
  cfg.parallel.fsdp = true;
  cfg.parallel.emulate = true;
  RankContext ctx;
  ctx.world_size = 2;
  ctx.dp_size = 2;
  ctx.emulated = true;
  ctx.world = std::make_shared<LoggingComm>("world", &log);
  ctx.dp = ctx.world;
  Trainer t(cfg, ctx);
  t.set_defer_reduce_scatter(true);
  t.recorder().add_edge_sink([&](const PhaseEdge& e) { log.push_back((e.begin ? "begin " : "end ") + *e.path); });
  t.forward_backward(0);
  INFO([&] {
    std::string all;
    for (const auto& l : log) all += l + "\n";
    return all;
  }());
  // Forward: blocks 1 and 2 are gathered while blocks 0 and 1 compute (gathers #1-#3 are the
  // embedding's, block 0's and the prefetch of block 1, in that order).
  for (int block = 0; block < 2; ++block) {
    const std::string prefetch = "all_gather #" + std::to_string(block + 3);
    const int64_t start = at_line(log, "start " + prefetch), finish = at_line(log, "finish " + prefetch);
    const int64_t compute = at_line(log, "begin fwd/block." + std::to_string(block) + "/attn");
    const int64_t compute_end = at_line(log, "end fwd/block." + std::to_string(block) + "/mlp");
    REQUIRE(start >= 0);
    REQUIRE(compute >= 0);
    CHECK(start < compute);       // issued before this block's compute ...
    CHECK(finish > compute_end);  // ... and only waited for after it
  }
  // Backward: block 2's reduce-scatter (the first started) finishes after block 1's backward
  // compute, and block 0's, the last, after the whole backward.
  const int64_t rs1_start = at_line(log, "start reduce_scatter #1"),
                rs1_finish = at_line(log, "finish reduce_scatter #1");
  REQUIRE(rs1_start >= 0);
  CHECK(rs1_start < at_line(log, "begin bwd/block.1/mlp"));
  CHECK(rs1_finish > at_line(log, "end bwd/block.1/attn"));
  CHECK(at_line(log, "finish reduce_scatter #3") > at_line(log, "end bwd/block.0/attn"));
  CHECK(at_line(log, "start reduce_scatter #4") == -1);  // three blocks: three deferred reductions
  // Every started collective was finished.
  int started = 0, finished = 0;
  for (const auto& l : log) {
    started += l.rfind("start ", 0) == 0;
    finished += l.rfind("finish ", 0) == 0;
  }
  CHECK(started == finished);
}

TEST_CASE("host AdamW pipeline under FSDP: the prefetch awaits the next block's update, bit-equal to the serial step",
          "[parallel][overlap][offload_optimizer]") {
  // Rank 0 of an emulated 2-rank FSDP job with the optimizer offloaded, the host AdamW pipelined
  // under the next forward (as on a GPU) against the passes run after backward: the same fused
  // pass on the same shard values, so losses and shards are equal (tolerance 0). The all-gather a
  // block's forward starts for the next block reads that block's device copy: the prefetch is
  // where the next block's update is awaited, inside the previous block's forward.
  RunConfig cfg = tiny_config(/*layers=*/3, /*seq=*/64);
  cfg.parallel.world_size = 2;
  cfg.parallel.fsdp = true;
  cfg.parallel.emulate = true;
  cfg.training.dtype = DType::BFloat16;
  cfg.memory.offload_optimizer = true;
  auto run = [&](bool pipelined, std::vector<std::string>* edges) {
    RankContext ctx;
    ctx.world_size = 2;
    ctx.dp_size = 2;
    ctx.emulated = true;
    ctx.world = std::make_shared<EmulatedComm>("world", 2);
    ctx.dp = ctx.world;
    Trainer t(cfg, ctx);
    t.set_defer_reduce_scatter(true);
    t.set_overlap_host_optimizer(pipelined);
    int step = 0;
    t.recorder().add_edge_sink([&](const PhaseEdge& e) {
      if (step == 1 && e.begin) edges->push_back(*e.path);  // step 2's phases, in the order they open
    });
    Trajectory out;
    for (step = 0; step < 3; ++step) out.losses.push_back(t.step().loss);
    out.params = group_params(t);
    return out;
  };
  std::vector<std::string> serial_edges, edges;
  const Trajectory serial = run(false, &serial_edges), pipelined = run(true, &edges);
  CHECK(pipelined.losses == serial.losses);
  REQUIRE(pipelined.params.size() == serial.params.size());
  for (size_t g = 0; g < serial.params.size(); ++g) CHECK(at::equal(pipelined.params[g], serial.params[g]));
  INFO([&] {
    std::string all;
    for (const auto& e : edges) all += e + "\n";
    return all;
  }());
  auto awaits = [](const std::vector<std::string>& opened) {
    return std::count_if(opened.begin(), opened.end(),
                         [](const std::string& p) { return p.find("host_update") != std::string::npos; });
  };
  CHECK(awaits(serial_edges) == 0);
  CHECK(awaits(edges) == 5);  // embedding, 3 blocks, head: each once
  // Block 1's update is awaited by the prefetch in block 0's forward, before block 0 computes;
  // block 2's by block 1's, after block 0's compute and before block 1's.
  const int64_t block1 = at_line(edges, "block.1/host_update"), block2 = at_line(edges, "block.2/host_update");
  REQUIRE(block1 >= 0);
  REQUIRE(block2 >= 0);
  CHECK(at_line(edges, "block.0/host_update") < block1);
  CHECK(block1 < at_line(edges, "fwd/block.0/attn"));
  CHECK(at_line(edges, "fwd/block.0/mlp") < block2);
  CHECK(block2 < at_line(edges, "fwd/block.1/attn"));
  CHECK(at_line(edges, "fwd/loss/head/host_update") > at_line(edges, "fwd/block.2/mlp"));
}
