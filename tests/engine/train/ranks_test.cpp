// run_training over several in-process ranks (engine/parallel's rank threads and Gloo): data
// parallel and Ulysses + FSDP with every memory technique equal the single-rank run on the same
// sequences; a sharded run stopped and resumed continues bit for bit.
#include <catch2/catch.hpp>

#include "../engine_test_util.h"
#include "engine/train/files.h"
#include "engine/train/run.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

struct Finished {
  std::vector<double> losses;
  std::shared_ptr<FullState> state;
};

Finished run(const RunConfig& cfg, int64_t steps) {
  RunOptions opt;
  opt.steps = steps;
  opt.checkpoints = false;
  Finished f;
  opt.final_state = &f.state;
  const RunOutcome o = run_training(cfg, opt);
  INFO(o.error);
  REQUIRE(o.status == RunOutcome::Status::Finished);
  for (const auto& m : o.metrics) f.losses.push_back(m.loss);
  REQUIRE(f.state);
  return f;
}

void check_same_training(const Finished& a, const Finished& b, double loss_tol, double param_tol) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) CHECK(std::abs(a.losses[i] - b.losses[i]) <= loss_tol * a.losses[i]);
  for (const auto& [name, tensors] : a.state->groups) {
    INFO("group " << name);
    CHECK(relative_diff(b.state->groups.at(name)[0], tensors[0]) <= param_tol);
  }
}

RunConfig rank_config() {
  RunConfig cfg = tiny_config(2, 64);
  cfg.training.warmup_steps = 1;
  return cfg;
}

}  // namespace

TEST_CASE("ranks: two data-parallel ranks equal one rank training their two sequences", "[engine][train]") {
  RunConfig one = rank_config();
  one.training.batch_size = 2;
  RunConfig two = rank_config();
  two.parallel.world_size = 2;
  const Finished a = run(one, 3), b = run(two, 3);
  check_same_training(a, b, 1e-5, 1e-4);
}

TEST_CASE("ranks: Ulysses 2 + FSDP with every technique equals one plain rank", "[engine][train]") {
  const RunConfig plain = rank_config();
  RunConfig sharded = plain;
  sharded.parallel.world_size = 2;
  sharded.parallel.ulysses_degree = 2;
  sharded.parallel.fsdp = true;
  sharded.memory.activation_checkpointing = sharded.memory.offload_activations = true;
  sharded.memory.tiled_mlp = sharded.memory.tiled_loss = true;
  sharded.memory.untied_ulysses = true;
  sharded.memory.heads_per_stage = 2;
  const Finished a = run(plain, 3), b = run(sharded, 3);
  check_same_training(a, b, 1e-5, 1e-4);
}

TEST_CASE("ranks: a sharded run stopped and resumed continues bit for bit", "[engine][train]") {
  RunConfig cfg = rank_config();
  cfg.training.steps = 4;
  cfg.parallel.world_size = 2;
  cfg.parallel.ulysses_degree = 2;
  cfg.parallel.fsdp = true;
  cfg.memory.activation_checkpointing = true;
  RunOptions whole;
  whole.out_dir = "/tmp/odyssey_ranks_test_whole";
  remove_tree(whole.out_dir);
  const RunOutcome a = run_training(cfg, whole);
  REQUIRE(a.status == RunOutcome::Status::Finished);
  RunOptions part;
  part.out_dir = "/tmp/odyssey_ranks_test_part";
  remove_tree(part.out_dir);
  part.steps = 2;
  const RunOutcome b1 = run_training(cfg, part);
  REQUIRE(b1.next_step == 2);
  CHECK(path_exists(part.out_dir + "/checkpoints/step_00000002/rank1.bin"));
  RunOptions rest;
  rest.out_dir = rest.resume_dir = part.out_dir;
  const RunOutcome b2 = run_training(cfg, rest);
  INFO(b2.error);
  REQUIRE(b2.metrics.size() == 2);
  for (int i = 0; i < 2; ++i) CHECK(b1.metrics[i].loss == a.metrics[i].loss);
  for (int i = 0; i < 2; ++i) CHECK(b2.metrics[i].loss == a.metrics[i + 2].loss);
  CHECK(a.metrics[0].rank_peak_bytes.size() == 2);
}
