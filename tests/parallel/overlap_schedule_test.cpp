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

#include "../engine/engine_test_util.h"
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
    CHECK(start < compute);         // issued before this block's compute ...
    CHECK(finish > compute_end);    // ... and only waited for after it
  }
  // Backward: block 2's reduce-scatter (the first started) finishes after block 1's backward
  // compute, and block 0's, the last, after the whole backward.
  const int64_t rs1_start = at_line(log, "start reduce_scatter #1"), rs1_finish = at_line(log, "finish reduce_scatter #1");
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
