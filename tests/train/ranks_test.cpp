// run_training over several in-process ranks (engine/parallel's rank threads and Gloo): data
// parallel and Ulysses + FSDP with every memory technique equal the single-rank run on the same
// sequences; a sharded run stopped and resumed continues bit for bit; rank 0's outputs hold every
// rank's peaks and phases (gathered as they would be from other processes), steps counted from 1.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "../common/engine_test_util.h"
#include "engine/util/json_read.h"
#include "engine/util/files.h"
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
  // the master weights [N] fp32, as views of the states' host vectors
  auto master = [](const FullState& state, const std::string& name) {
    const std::vector<float>& v = state.groups.at(name)[0];
    return at::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}, at::kFloat);
  };
  for (const auto& [name, states] : a.state->groups) {
    INFO("group " << name);
    CHECK(relative_diff(master(*b.state, name), master(*a.state, name)) <= param_tol);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

TEST_CASE("ranks: rank 0 writes every rank's peaks and phases and steps count from 1", "[engine][train]") {
  RunConfig cfg = rank_config();
  cfg.model.n_layers = 3;  // block 1 is offloaded (offloaded_blocks: 1..L-2)
  cfg.parallel.world_size = 2;
  cfg.parallel.ulysses_degree = 2;
  cfg.parallel.fsdp = true;
  cfg.memory.activation_checkpointing = true;  // and offload: each rank's copies are trace spans
  cfg.memory.offload_activations = true;
  cfg.output.trace_steps = 2;
  RunOptions opt;
  opt.out_dir = "/tmp/odyssey_ranks_test_outputs";
  remove_tree(opt.out_dir);
  opt.steps = 3;
  const RunOutcome o = run_training(cfg, opt);
  INFO(o.error);
  REQUIRE(o.status == RunOutcome::Status::Finished);
  REQUIRE(o.metrics.size() == 3);
  CHECK(o.next_step == 3);
  // metrics.jsonl: steps 1, 2, 3 (= steps completed, as the progress line and --resume count).
  std::istringstream lines(read_file(opt.out_dir + "/metrics.jsonl"));
  std::string line;
  int64_t expected = 1;
  while (std::getline(lines, line)) {
    auto v = parse_json(line);
    REQUIRE(v.has_value());
    CHECK(v->at("step").get<int64_t>() == expected++);
    CHECK(v->at("rank_peak_bytes").size() == 2);
    CHECK(v->at("phase_peak_bytes").contains("fwd/block.1/attn"));
  }
  CHECK(expected == 4);
  // summary.json: the final step is 3; the phase table has rows from rank 1 too (gathered).
  auto summary = parse_json(read_file(opt.out_dir + "/summary.json"));
  REQUIRE(summary.has_value());
  CHECK(summary->at("final").at("step").get<int64_t>() == 3);
  // setup (groups, model, data) ends where step 1 begins: within the run, before its steps
  const double setup_s = summary->at("setup_s").get<double>(), wall_s = summary->at("wall_s").get<double>();
  double steps_s = 0;
  for (const StepMetrics& m : o.metrics) steps_s += m.step_time_s;
  CHECK(setup_s > 0);
  CHECK(setup_s + steps_s <= wall_s);
  std::set<int64_t> peak_ranks, peak_steps;
  for (const auto& row : summary->at("phases")) {
    peak_ranks.insert(row.at("peak_rank").get<int64_t>());
    peak_steps.insert(row.at("peak_step").get<int64_t>());
    CHECK(row.at("count").get<int64_t>() % 2 == 0);  // every phase ran on both ranks
  }
  CHECK(peak_ranks.count(1) == 1);
  CHECK(*peak_steps.begin() >= 1);
  CHECK(*peak_steps.rbegin() <= 3);
  // trace.json: one process per rank, phase events of both, steps 1 and 2 traced.
  auto trace = parse_json(read_file(opt.out_dir + "/trace.json"));
  REQUIRE(trace.has_value());
  std::map<int64_t, std::set<int64_t>> steps_of_rank;  // pid -> steps of its phase events
  for (const auto& e : trace->at("traceEvents"))
    if (e.at("ph").get<std::string>() == "X")
      steps_of_rank[e.at("pid").get<int64_t>()].insert(e.at("args").at("step").get<int64_t>());
  CHECK(steps_of_rank[0] == std::set<int64_t>{1, 2});
  CHECK(steps_of_rank[1] == std::set<int64_t>{1, 2});
  // The offload copies of both ranks, gathered to rank 0: per rank and traced step one d2h and
  // one h2d for each offloaded block (blocks 1..n_layers-2), on tracks named once.
  std::map<std::pair<int64_t, std::string>, int> copies;  // (pid, track) -> copy events
  std::set<std::pair<int64_t, int64_t>> named;            // (pid, tid) with a thread_name
  std::map<std::pair<int64_t, int64_t>, std::string> track_of;
  for (const auto& e : trace->at("traceEvents")) {
    const std::string ph = e.at("ph").get<std::string>();
    if (ph == "M" && e.at("name").get<std::string>() == "thread_name" && e.at("tid").get<int64_t>() > 0) {
      CHECK(named.insert({e.at("pid").get<int64_t>(), e.at("tid").get<int64_t>()}).second);
      track_of[{e.at("pid").get<int64_t>(), e.at("tid").get<int64_t>()}] = e.at("args").at("name").get<std::string>();
    }
    if (ph == "X" && e.at("cat").get<std::string>() == "copy") {
      const std::pair<int64_t, int64_t> thread{e.at("pid").get<int64_t>(), e.at("tid").get<int64_t>()};
      REQUIRE(track_of.count(thread) == 1);  // named before its first span
      ++copies[{thread.first, track_of[thread]}];
      CHECK(e.at("args").at("bytes").get<int64_t>() > 0);
    }
  }
  const int per_track = 2 * static_cast<int>(offloaded_blocks(cfg.model.n_layers).count);  // 2 traced steps
  REQUIRE(per_track > 0);
  for (int64_t pid : {0, 1})
    for (const std::string track : {"offload d2h", "offload h2d"}) {
      INFO("rank " << pid << " track " << track);
      CHECK(copies[{pid, track}] == per_track);
    }
}
