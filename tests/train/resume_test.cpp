// Checkpoints and resume through run_training: a run stopped between steps and resumed gives the
// uninterrupted run's losses bit for bit; checkpoints are complete and atomic; a checkpoint of
// another model is refused with the reason; live toggles and stop requests apply at step boundaries.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>

#include "../common/engine_test_util.h"
#include "engine/train/checkpoint_io.h"
#include "engine/util/files.h"
#include "engine/train/run.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = "/tmp/odyssey_resume_test_" + name;
  remove_tree(dir);
  return dir;
}

std::vector<double> losses(const RunOutcome& o) {
  std::vector<double> out;
  for (const auto& m : o.metrics) out.push_back(m.loss);
  return out;
}

RunConfig resume_config() {
  RunConfig cfg = tiny_config(2, 64);
  cfg.training.steps = 6;
  cfg.training.warmup_steps = 2;
  cfg.memory.activation_checkpointing = true;
  cfg.memory.offload_activations = true;
  cfg.memory.tiled_loss = true;
  cfg.output.checkpoint_every = 2;
  cfg.output.trace_steps = 2;
  return cfg;
}

}  // namespace

TEST_CASE("resume: stop between steps, resume, the losses equal the uninterrupted run bit for bit", "[engine][train]") {
  RunConfig cfg = resume_config();
  // The host AdamW's states save and resume too, into either pool: a checkpoint written with the
  // optimizer on the host resumes with it on the device and the other way round (on the CPU both
  // AdamW paths are the same pass, so the losses stay bit-equal).
  cfg.memory.offload_optimizer = GENERATE(false, true);
  const bool resume_offloaded = GENERATE(false, true);
  INFO("optimizer offload " << cfg.memory.offload_optimizer << ", resumed with " << resume_offloaded);
  RunOptions whole;
  whole.out_dir = fresh_dir("whole");
  const RunOutcome a = run_training(cfg, whole);
  REQUIRE(a.status == RunOutcome::Status::Finished);
  REQUIRE(a.metrics.size() == 6);

  // First part: stop after 3 steps (a checkpoint at the stop), as Ctrl-C would.
  RunOptions part;
  part.out_dir = fresh_dir("part");
  part.steps = 3;
  const RunOutcome b1 = run_training(cfg, part);
  REQUIRE(b1.next_step == 3);
  auto info = read_checkpoint_info(part.out_dir);
  REQUIRE(info);
  CHECK(info->step == 3);
  CHECK(path_exists(join_path(info->path, "rank0.bin")));
  CHECK(path_exists(join_path(info->path, "config.toml")));
  // Only the latest checkpoint is kept; no temporary files are left behind.
  int folders = 0;
  for (const auto& name : list_dir(join_path(part.out_dir, "checkpoints"))) {
    CHECK(name.find(".tmp") == std::string::npos);
    if (is_directory(join_path(join_path(part.out_dir, "checkpoints"), name))) ++folders;
  }
  CHECK(folders == 1);

  // Second part: a new process would do exactly this.
  RunOptions rest;
  rest.out_dir = part.out_dir;
  rest.resume_dir = part.out_dir;
  RunConfig resumed = cfg;
  resumed.memory.offload_optimizer = resume_offloaded;
  const RunOutcome b2 = run_training(resumed, rest);
  INFO(b2.error);
  REQUIRE(b2.status == RunOutcome::Status::Finished);
  REQUIRE(b2.metrics.size() == 3);
  CHECK(b2.metrics.front().step == 4);  // resumed after 3 steps: the 4th step comes next
  std::vector<double> joined = losses(b1);
  for (double l : losses(b2)) joined.push_back(l);
  CHECK(joined == losses(a));  // exact equality: bit for bit
  // The metrics file continues from the checkpoint's step, the summary says finished.
  CHECK(path_exists(join_path(part.out_dir, "summary.json")));
  CHECK(path_exists(join_path(part.out_dir, "trace.json")));
}

TEST_CASE("run: a stop right after the cadence's checkpoint does not write it again", "[engine][train]") {
  // checkpoint_every = 2 saves after step 4; a stop asked during step 4 ends the run there, and
  // the end's checkpoint would be the same state written twice (minutes for a large model, within
  // a scheduler's grace period). The files the cadence wrote stay: same inode, never replaced.
  RunConfig cfg = resume_config();
  RunControl control;
  RunOptions opt;
  opt.control = &control;
  opt.out_dir = fresh_dir("stop_after_cadence");
  std::vector<std::string> log;
  ino_t cadence_inode = 0;
  opt.log = [&](const std::string& line) {
    log.push_back(line);
    struct stat st {};
    if (line == "checkpoint at step 4" &&
        ::stat(join_path(opt.out_dir, "checkpoints/step_00000004/rank0.bin").c_str(), &st) == 0)
      cadence_inode = st.st_ino;
  };
  opt.on_step = [&](const StepMetrics& m, const StepResult&) {
    if (m.step == 4) control.request_stop();  // before the cadence's save of step 4
  };
  const RunOutcome o = run_training(cfg, opt);
  CHECK(o.status == RunOutcome::Status::Stopped);
  REQUIRE(o.next_step == 4);
  REQUIRE(cadence_inode != 0);
  struct stat st {};
  REQUIRE(::stat(join_path(opt.out_dir, "checkpoints/step_00000004/rank0.bin").c_str(), &st) == 0);
  CHECK(st.st_ino == cadence_inode);
  CHECK(read_checkpoint_info(opt.out_dir)->step == 4);
  // the end still says where the checkpoint is
  CHECK(std::count(log.begin(), log.end(), "checkpoint at step 4 in " + opt.out_dir + "/checkpoints") == 1);
}

TEST_CASE("run: a save that fails on one rank fails on both, and its folder goes", "[engine][train]") {
  // Rank 1 cannot put its file of step 4 in place (a folder stands at its name, as a full disk or a
  // node's quota would stop it); rank 0 writes its own. The two agree in the collective that stood
  // as the save's barrier: the run fails naming the file, step 4's folder is removed (it was left
  // beside the checkpoint until the next save, one rank's state of GiBs on a large model), and
  // latest.json still names step 2, which resumes.
  RunConfig cfg = resume_config();
  cfg.parallel.world_size = 2;
  RunOptions opt;
  opt.out_dir = fresh_dir("failed_save");
  const std::string step4 = join_path(opt.out_dir, "checkpoints/step_00000004");
  bool blocked = false;  // made once the run started (a fresh run clears checkpoints/ a run left)
  opt.on_step = [&](const StepMetrics& m, const StepResult&) {
    if (m.step == 3) blocked = make_dirs(join_path(step4, "rank1.bin"));
  };
  const RunOutcome o = run_training(cfg, opt);
  REQUIRE(blocked);
  REQUIRE(o.status == RunOutcome::Status::Failed);
  CHECK_THAT(o.error, Catch::Contains("checkpoint at step 4") && Catch::Contains("rank1.bin") &&
                          Catch::Contains("the step's folder was removed, and the previous checkpoint stays"));
  struct stat st {};
  CHECK(::stat(step4.c_str(), &st) != 0);
  const auto info = read_checkpoint_info(opt.out_dir);
  REQUIRE(info);
  CHECK(info->step == 2);

  // latest.json that rank 0 cannot move (a folder at its name): every rank's file of step 2 was
  // written, and the pointer fails; the save fails on both ranks with rank 0's message, and the
  // folder no pointer names is removed.
  RunOptions pointer = opt;
  pointer.out_dir = fresh_dir("failed_pointer");
  const std::string latest = join_path(pointer.out_dir, "checkpoints/latest.json");
  bool pointer_blocked = false;
  pointer.on_step = [&](const StepMetrics& m, const StepResult&) {
    if (m.step == 1) pointer_blocked = make_dirs(latest);
  };
  const RunOutcome p = run_training(cfg, pointer);
  REQUIRE(pointer_blocked);
  REQUIRE(p.status == RunOutcome::Status::Failed);
  CHECK_THAT(p.error, Catch::Contains("checkpoint at step 2") && Catch::Contains("latest.json") &&
                          Catch::Contains("the step's folder was removed"));
  CHECK(::stat(join_path(pointer.out_dir, "checkpoints/step_00000002").c_str(), &st) != 0);
}

TEST_CASE("resume: a checkpoint of another model or world size is refused with the reason", "[engine][train]") {
  const RunConfig cfg = resume_config();
  RunOptions part;
  part.out_dir = fresh_dir("other");
  part.steps = 2;
  REQUIRE(run_training(cfg, part).status == RunOutcome::Status::Finished);
  RunConfig wider = cfg;
  wider.model.d_model = 48;
  wider.model.head_dim = 12;
  RunOptions rest;
  rest.resume_dir = part.out_dir;
  const RunOutcome o = run_training(wider, rest);
  CHECK(o.status == RunOutcome::Status::Failed);
  CHECK(o.bad_input);
  // Every key the saved state depends on is named with both values.
  CHECK_THAT(o.error, Catch::Contains("model.d_model = 32 -> 48"));
  CHECK_THAT(o.error, Catch::Contains("model.head_dim = 8 -> 12"));
  RunOptions nowhere;
  nowhere.resume_dir = fresh_dir("nowhere");
  const RunOutcome n = run_training(cfg, nowhere);
  CHECK(n.bad_input);
  CHECK_THAT(n.error, Catch::Contains("no checkpoint there"));
}

TEST_CASE("run: stop and live memory toggles take effect at step boundaries", "[engine][train]") {
  RunConfig cfg = resume_config();
  cfg.training.steps = 8;
  RunControl control;
  RunOptions opt;
  opt.control = &control;
  opt.checkpoints = false;
  std::vector<std::string> log;
  opt.log = [&](const std::string& line) { log.push_back(line); };
  // From step 3 the block inputs are neither checkpointed nor offloaded; the loss keeps its tiles,
  // so both runs' every step runs the same kernels on the same values (a recompute repeats its
  // forward's operations, an offload copies without rounding): their losses are equal bit for bit
  // whatever kernels this CPU picks, and no tolerance is needed. (Other tiles would sum the loss
  // in another order: that equivalence, within its derived tolerance, is equivalence_test's.)
  MemoryConfig plain = cfg.memory;
  plain.activation_checkpointing = false;
  plain.offload_activations = false;
  opt.on_step = [&](const StepMetrics& m, const StepResult&) {
    if (m.step == 2) control.set_memory(plain, 1);  // after the 2nd step (steps count from 1)
    if (m.step == 5) control.request_stop();
  };
  const RunOutcome o = run_training(cfg, opt);
  CHECK(o.status == RunOutcome::Status::Stopped);
  REQUIRE(o.metrics.size() == 5);
  CHECK(o.metrics[1].config_version == 0);
  CHECK(o.metrics[2].config_version == 1);
  bool applied = false;
  for (const auto& l : log) applied = applied || l.find("memory toggles applied from step 3") != std::string::npos;
  CHECK(applied);
  // The toggles changed no numbers: the losses equal a run that never had them.
  RunConfig plain_cfg = cfg;
  plain_cfg.memory = plain;
  RunOptions ref;
  ref.steps = 5;
  ref.checkpoints = false;
  const RunOutcome r = run_training(plain_cfg, ref);
  CHECK(losses(o) == losses(r));
}

TEST_CASE("run: optimizer offload switched on live moves the states to the host pool from the next step",
          "[engine][train][offload_optimizer]") {
  // What the studio's per-rank bars show when its toggle is flipped: from the step after the edit
  // the host peak holds the fp32 states (16 B a parameter) and the device peak drops by them, less
  // the fp32 device copy (4 B a parameter); the losses do not move.
  RunConfig cfg = resume_config();
  cfg.memory.offload_activations = false;  // the host pool holds only the optimizer's states
  cfg.training.steps = 4;
  RunControl control;
  RunOptions opt;
  opt.control = &control;
  opt.checkpoints = false;
  opt.on_step = [&](const StepMetrics& m, const StepResult&) {
    if (m.step == 2) {
      MemoryConfig offloaded = cfg.memory;
      offloaded.offload_optimizer = true;
      control.set_memory(offloaded, 1);
    }
  };
  const RunOutcome o = run_training(cfg, opt);
  REQUIRE(o.metrics.size() == 4);
  int64_t params = 0;
  {
    Trainer t(cfg, cpu_rank());
    for (auto* g : t.model().groups()) params += g->shard_numel();
  }
  CHECK(o.metrics[1].rank_host_peak_bytes.at(0) == 0);
  CHECK(o.metrics[2].rank_host_peak_bytes.at(0) >= 16 * params);
  CHECK(o.metrics[1].peak_bytes - o.metrics[3].peak_bytes == 12 * params);  // 16 B leave, a 4 B copy stays
  RunOptions ref;
  ref.steps = 4;
  ref.checkpoints = false;
  const RunOutcome r = run_training(cfg, ref);
  for (size_t i = 0; i < 4; ++i)
    CHECK(o.metrics[i].loss == r.metrics[i].loss);  // bit for bit (see optimizer_offload_test)
}
