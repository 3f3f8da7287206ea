// odyssey train as scripts use it: the output files of the CLI contract, exit codes for bad input,
// and the resume guarantee with a real process killed between steps (SIGKILL) or stopped with
// Ctrl-C (SIGINT): the resumed run's losses equal an uninterrupted run's bit for bit. Under
// torchrun's conventions (two processes on loopback): the in-process run's losses, sharded
// checkpoints that resume, rank 0's outputs with both ranks, and a killed or hung rank named by
// the survivor within the timeout; and the real torchrun launcher (the wheel's torch.distributed.run).
#include <fstream>
#include <regex>
#include <set>

#include "cli_test_util.h"
#include "shared_gpu_jobs.h"

using namespace odyssey;
using namespace odyssey::test;

TEST_CASE("odyssey train: metrics.jsonl, trace.json, summary.json and a falling loss", "[cli][train]") {
  const std::string dir = fresh_dir("outputs");
  const Run r = run_odyssey("train " + kTiny + "--set training.steps=30 --quiet --out " + dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("finished at step 30"));
  // metrics.jsonl: one object per step with the contract's fields.
  std::istringstream lines(read_text(dir + "/metrics.jsonl"));
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    auto v = parse_json(line);
    REQUIRE(v.has_value());
    for (const char* key : {"step", "loss", "tokens_per_s", "step_time_s", "peak_bytes", "rank_peak_bytes"})
      CHECK(v->contains(key));
    CHECK(v->at("rank_peak_bytes").size() == 1);
    CHECK(v->at("peak_bytes").get<int64_t>() > 0);
    CHECK(v->at("step").get<int64_t>() == count + 1);  // steps count from 1, as the progress line does
    // The long-range task's answers: their loss and accuracy, as the progress line shows them.
    REQUIRE(v->contains("answer_accuracy"));
    CHECK(v->at("answer_accuracy").get<double>() >= 0.0);
    CHECK(v->at("answer_accuracy").get<double>() <= 1.0);
    CHECK(v->at("answer_loss").get<double>() > 0.0);
    ++count;
  }
  CHECK(count == 30);
  // trace.json parses, with phase events of the engine's phases.
  const std::string trace = read_text(dir + "/trace.json");
  REQUIRE(parse_json(trace).has_value());
  for (const char* phase : {"\"recompute\"", "\"embed\"", "\"reduce_scatter\"", "bwd/block.3/mlp", "fwd/loss"})
    CHECK_THAT(trace, Catch::Contains(phase));
  // The kernels the attention ran, in the trace's metadata and the summary: the tiny preset's
  // Untied stages on the CPU run its flash kernel, and nothing goes through SDPA.
  const Json kernels = Json::array({"cpu_flash"});
  CHECK(parse_json(trace)->at("otherData").at("attention_kernels") == kernels);
  // summary.json: finished, the loss fell well below its start.
  auto summary = parse_json(read_text(dir + "/summary.json"));
  REQUIRE(summary.has_value());
  CHECK(summary->at("status").get<std::string>() == "finished");
  CHECK(summary->at("loss_final").get<double>() < 0.6 * summary->at("loss_first").get<double>());
  CHECK(summary->at("extra").contains("answer_loss_final"));
  CHECK(summary->at("extra").at("attention_kernels") == kernels);
  CHECK(summary->at("extra").at("collective_backend").get<std::string>() == "none");  // one rank: no collective
  // the binaries that ran, as `odyssey version --json` names them
  CHECK(summary->at("extra").at("build") == *parse_json(run_odyssey("version --json").out));
  CHECK(summary->at("final").at("step").get<int64_t>() == 30);
  CHECK(checkpoint_step(dir) == 30);
}

TEST_CASE("odyssey train: bad input exits 2 naming the problem", "[cli][train]") {
  Run r = run_odyssey("train presets/does-not-exist.toml");
  CHECK(r.code == 2);
  const std::string bad_bin = std::string(ODYSSEY_BINARY_DIR) + "/train_cli_test_bad.bin";
  {
    std::ofstream f(bad_bin, std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 1234;
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  r = run_odyssey("train " + kTiny + "--set training.dataset=tokens --set training.dataset_path=" + bad_bin +
                  " --quiet --out " + fresh_dir("bad"));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("train_cli_test_bad.bin") && Catch::Contains("wrong magic 1234"));
  // Printed once, on stderr, also without --quiet (the log's "error:" line is the studio's).
  r = run_odyssey("train " + kTiny + "--set training.dataset=tokens --set training.dataset_path=" + bad_bin +
                  " --out " + fresh_dir("bad_loud"));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("wrong magic 1234"));
  CHECK_THAT(r.out, !Catch::Contains("wrong magic 1234"));
  r = run_odyssey("train " + kTiny + "--resume " + fresh_dir("no_checkpoint"));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("no checkpoint there"));
}

TEST_CASE("odyssey train: killed between steps, resumed, losses bit for bit", "[cli][train]") {
  const std::string args = kTiny + "--set training.steps=40 --set output.checkpoint_every=2 --quiet ";
  const std::string whole = fresh_dir("whole");
  REQUIRE(run_odyssey("train " + args + "--out " + whole).code == 0);
  const auto reference = losses(whole);
  REQUIRE(reference.size() == 40);

  const std::string dir = fresh_dir("killed");
  const pid_t pid = spawn_odyssey("train " + args + "--out " + dir, dir + ".log");
  const bool reached = wait_for_checkpoint(pid, dir, 6);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(reached);
  REQUIRE(WIFSIGNALED(status));  // it really was killed mid-run
  const int64_t resumed_at = checkpoint_step(dir);
  REQUIRE(resumed_at < 40);
  // The kill ran no destructor: the trace is whole as each traced step's end wrote it (the open
  // array it left before, Perfetto refused), the default output.trace_steps = 4 in it.
  const auto killed_trace = parse_json(read_text(dir + "/trace.json"));
  REQUIRE(killed_trace.has_value());
  std::set<int64_t> traced_steps;
  for (const Json& e : killed_trace->at("traceEvents"))
    if (e.at("ph") == "C" && e.at("name") == "step") traced_steps.insert(e.at("args").at("step").get<int64_t>());
  CHECK(traced_steps == std::set<int64_t>{1, 2, 3, 4});
  const Run r = run_odyssey("train " + args + "--resume " + dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // The killed process held the directory's lock: the kernel dropped it, the resume took it over.
  CHECK_THAT(r.out, Catch::Contains("took over the lock of a run that ended without releasing it"));
  const auto got = losses(dir);
  REQUIRE(got.size() == 40);
  CHECK(metrics_lines(dir) == 40);  // the steps after the checkpoint were run again, listed once
  for (const auto& [step, loss] : reference) {
    INFO("step " << step << " (resumed at " << resumed_at << ")");
    CHECK(got.at(step) == loss);  // bit for bit
  }
}

TEST_CASE("odyssey train: Ctrl-C stops at a step boundary with a checkpoint, resume continues", "[cli][train]") {
  const std::string args = kTiny + "--set training.steps=40 --quiet ";
  const std::string dir = fresh_dir("sigint"), exported = fresh_dir("sigint_export");
  const std::string export_hf = "--set output.export_hf=" + exported + " ";
  const pid_t pid =
      spawn_odyssey("train " + args + export_hf + "--set output.checkpoint_every=2 --out " + dir, dir + ".log");
  REQUIRE(wait_for_checkpoint(pid, dir, 4));
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO(read_text(dir + ".log"));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);  // 128 + SIGINT: stopped, not finished
  CHECK_THAT(read_text(dir + ".log"), Catch::Contains("stopping at the next step boundary with a checkpoint"));
  auto summary = parse_json(read_text(dir + "/summary.json"));
  REQUIRE(summary.has_value());
  const std::string status_text = summary->at("status").get<std::string>();
  CHECK((status_text == "stopped" || status_text == "finished"));
  // The checkpoint is at the step where it stopped: every step in metrics.jsonl is in it.
  const int64_t stopped_at = checkpoint_step(dir);
  CHECK(stopped_at == static_cast<int64_t>(losses(dir).size()));
  // a stopped run does not export, and says how to (it used to say nothing)
  if (status_text == "stopped") {
    CHECK_THAT(read_text(dir + ".log"), Catch::Contains("not exported to " + exported + " (output.export_hf)"));
    CHECK(read_text(exported + "/config.json").empty());
  }
  const Run r = run_odyssey("train " + args + export_hf + "--resume " + dir);
  REQUIRE(r.code == 0);
  CHECK(losses(dir).size() == 40);
  CHECK_THAT(r.out, Catch::Contains("exported step 40 as a Hugging Face model"));  // the resume finished it
}

TEST_CASE("odyssey bench --json: every variant with its ratio and peaks", "[cli][train]") {
  // 512 tokens in tiles of 64: the tiled variants really tile.
  const Run r =
      run_odyssey("bench " + kTiny +
                  "--set training.seq_len=512 --set memory.mlp_tile_tokens=64 --set memory.loss_tile_tokens=64 "
                  "--steps 2 --json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto v = parse_json(r.out);
  REQUIRE(v.has_value());
  CHECK(v->at("rounds").get<int64_t>() == 2);
  std::map<std::string, const Json*> by_name;
  for (const auto& variant : v->at("variants")) by_name[variant.at("name").get<std::string>()] = &variant;
  for (const char* name :
       {"plain", "checkpointing", "offload", "tiled_mlp", "tiled_loss", "all", "offload_optimizer"}) {
    REQUIRE(by_name.count(name));
    CHECK(by_name[name]->at("median_step_s").get<double>() > 0);
    CHECK(by_name[name]->at("ratio").get<double>() > 0);
    CHECK(by_name[name]->at("device_peak_bytes").get<int64_t>() > 0);
  }
  CHECK(by_name["offload"]->at("baseline").get<std::string>() == "checkpointing");
  // Measured peaks: checkpointing below plain, offload below checkpointing with host bytes.
  CHECK(by_name["checkpointing"]->at("device_peak_bytes").get<int64_t>() <
        by_name["plain"]->at("device_peak_bytes").get<int64_t>());
  CHECK(by_name["offload"]->at("device_peak_bytes").get<int64_t>() <
        by_name["checkpointing"]->at("device_peak_bytes").get<int64_t>());
  CHECK(by_name["offload"]->at("host_peak_bytes").get<int64_t>() > 0);
  CHECK(by_name["all"]->at("device_peak_bytes").get<int64_t>() <
        by_name["offload"]->at("device_peak_bytes").get<int64_t>());
  CHECK(by_name["tiled_mlp"]->at("device_peak_bytes").get<int64_t>() <
        by_name["plain"]->at("device_peak_bytes").get<int64_t>());
  // The optimizer offload against plain: the fp32 states (16 B a parameter) on the host, the
  // device keeping a compute copy (4 B in fp32), so its device peak is lower and its host peak not 0.
  CHECK(by_name["offload_optimizer"]->at("baseline").get<std::string>() == "plain");
  CHECK(by_name["offload_optimizer"]->at("device_peak_bytes").get<int64_t>() <
        by_name["plain"]->at("device_peak_bytes").get<int64_t>());
  CHECK(by_name["offload_optimizer"]->at("host_peak_bytes").get<int64_t>() >
        by_name["plain"]->at("host_peak_bytes").get<int64_t>());

  // Beside each measured ratio, the planner's for the same configs: `odyssey plan` of the plain
  // config (every memory toggle off) and of checkpointing alone gives the same two step times.
  // Both sides are the same double arithmetic, printed to 17 digits: relative 1e-12.
  const std::string plain =
      kTiny +
      "--set training.seq_len=512 --set memory.mlp_tile_tokens=64 --set memory.loss_tile_tokens=64 "
      "--set memory.activation_checkpointing=false --set memory.offload_activations=false "
      "--set memory.tiled_mlp=false --set memory.tiled_loss=false --set memory.untied_ulysses=false "
      "--set memory.offload_optimizer=false ";
  auto planned_step = [](const std::string& args) {
    const Run plan = run_odyssey("plan " + args + "--json");
    REQUIRE(plan.code == 0);
    return parse_json(plan.out)->at("time").at("step_s").get<double>();
  };
  const double plain_s = planned_step(plain);
  const double ckpt_s = planned_step(plain + "--set memory.activation_checkpointing=true ");
  REQUIRE(ckpt_s > plain_s);  // the recompute: one block forward more
  CHECK(by_name["plain"]->at("planned_step_s").get<double>() == Approx(plain_s).epsilon(1e-12));
  CHECK(by_name["plain"]->at("planned_ratio").get<double>() == 1.0);
  CHECK(by_name["checkpointing"]->at("planned_step_s").get<double>() == Approx(ckpt_s).epsilon(1e-12));
  CHECK(by_name["checkpointing"]->at("planned_ratio").get<double>() == Approx(ckpt_s / plain_s).epsilon(1e-12));
  for (const char* name : {"offload", "tiled_mlp", "tiled_loss", "all", "offload_optimizer"}) {
    INFO(name);
    CHECK(by_name[name]->at("planned_ratio").get<double>() > 0);
  }
}

// The 2-rank preset on short sequences: Ulysses 2 + FSDP + every technique, one rank per process.
const std::string kTwoRanks = "presets/tiny-cpu.toml --set training.seq_len=128 --quiet ";

TEST_CASE("odyssey train under torchrun: two processes equal the in-process run and resume from sharded checkpoints",
          "[cli][train][torchrun]") {
  const std::string args =
      kTwoRanks + "--set training.steps=4 --set training.warmup_steps=1 --set output.checkpoint_every=2 ";
  const std::string threads = fresh_dir("torchrun_reference");
  const Run reference_run = run_odyssey("train " + args + "--out " + threads);  // 2 rank threads in one process
  INFO(reference_run.out << reference_run.err);
  REQUIRE(reference_run.code == 0);
  const auto reference = losses(threads);
  REQUIRE(reference.size() == 4);

  // Two steps, one process per rank, then two more resumed from their sharded checkpoint. Rank 1's
  // process prints every 7th step (a key that changes no state): every rank file still names rank
  // 0's config.toml, so the checkpoint resumes (it read as two checkpoints mixed).
  const std::string dir = fresh_dir("torchrun");
  const std::string rank1_only = "$([ \"$RANK\" = 1 ] && echo --set output.log_every=7) ";
  for (const std::string& part : {rank1_only + "--steps 2 --out " + dir, "--resume " + dir}) {
    const std::vector<pid_t> pids = spawn_torchrun("train " + args + part, dir);
    for (int rank = 0; rank < 2; ++rank) {
      const auto status = wait_exit(pids[rank], 300);
      INFO("rank " << rank << " (" << part << "): " << read_text(dir + ".rank" + std::to_string(rank) + ".log"));
      REQUIRE(status.has_value());
      CHECK(WIFEXITED(*status));
      CHECK(WEXITSTATUS(*status) == 0);
    }
    CHECK_THAT(read_text(dir + ".rank0.log"), Catch::Contains("one process each"));
    CHECK(read_text(dir + ".rank1.log").empty());  // ranks other than 0 print errors only
    const std::string shard =
        dir + "/checkpoints/step_0000000" + (part.find("--resume") == std::string::npos ? "2" : "4") + "/rank1.bin";
    CHECK(std::ifstream(shard).good());
  }
  const auto got = losses(dir);
  REQUIRE(got.size() == 4);
  for (const auto& [step, loss] : reference) {
    INFO("step " << step << ": threads " << loss << ", processes " << got.at(step));
    CHECK(got.at(step) == loss);  // bit for bit: same collectives, same order, one intra-op thread
  }
  // Rank 0's outputs carry both ranks: peaks in every metrics line, a trace process per rank.
  std::istringstream lines(read_text(dir + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) CHECK(parse_json(line)->at("rank_peak_bytes").size() == 2);
  auto trace = parse_json(read_text(dir + "/trace.json"));
  REQUIRE(trace.has_value());
  std::set<int64_t> pids;
  for (const auto& e : trace->at("traceEvents"))
    if (e.at("ph").get<std::string>() == "X") pids.insert(e.at("pid").get<int64_t>());
  CHECK(pids == std::set<int64_t>{0, 1});
  auto summary = parse_json(read_text(dir + "/summary.json"));
  REQUIRE(summary.has_value());
  CHECK(summary->at("status").get<std::string>() == "finished");
  CHECK(summary->at("final").at("step").get<int64_t>() == 4);
  CHECK(summary->at("final").at("rank_peak_bytes").size() == 2);
  CHECK(summary->at("extra").at("collective_backend").get<std::string>() == "gloo");  // CPU ranks
}

TEST_CASE("odyssey train under torchrun: the shared-GPU jobs' CPU halves run as rank threads do",
          "[cli][train][torchrun]") {
  // tests/cli/shared_gpu_test.cpp's jobs (shared_gpu_jobs.h: Untied stages over 2 and 1 KV heads,
  // plain Ulysses over 1, each with FSDP, checkpointing with offload, tiled MLP and loss, fp32) are
  // compared there on a GPU against their CPU runs under torchrun; here those CPU runs themselves,
  // 2 and 4 processes over Gloo, equal the same jobs as rank threads bit for bit.
  for (const SharedGpuSetup& setup : kSharedGpuSetups) {
    for (const int ranks : {2, 4}) {
      INFO(setup.name << ", " << ranks << " ranks");
      const std::string job = shared_gpu_job(ranks, "cpu", setup) + "--steps 2 --no-checkpoint --quiet ";
      const std::string tag = std::to_string(&setup - kSharedGpuSetups.data()) + "_" + std::to_string(ranks);
      const std::string threads = fresh_dir("torchrun_shared_reference_" + tag);
      const Run reference_run = run_odyssey("train " + job + "--out " + threads);
      INFO(reference_run.out << reference_run.err);
      REQUIRE(reference_run.code == 0);
      const auto reference = losses(threads);
      REQUIRE(reference.size() == 2);
      const std::string dir = fresh_dir("torchrun_shared_" + tag);
      require_ranks_exit_zero(spawn_torchrun("train " + job + "--out " + dir, dir, ranks), dir);
      const auto got = losses(dir);
      REQUIRE(got.size() == 2);
      for (const auto& [step, loss] : reference) {
        INFO("step " << step << ": threads " << loss << ", processes " << got.at(step));
        CHECK(got.at(step) == loss);  // the same collectives in the same order, one intra-op thread a rank
      }
      std::istringstream lines(read_text(dir + "/metrics.jsonl"));
      for (std::string line; std::getline(lines, line);)
        CHECK(parse_json(line)->at("rank_peak_bytes").size() == static_cast<size_t>(ranks));
    }
  }
}

TEST_CASE("odyssey train under the real torchrun launcher equals the in-process run", "[cli][train][torchrun]") {
  // torch.distributed.run from the wheel LibTorch came from: its elastic agent serves the store
  // (TORCHELASTIC_USE_AGENT_STORE=True) and sets every variable itself, as on a cluster.
  const std::string python = ODYSSEY_TORCH_PYTHON;
  INFO("LibTorch came from -DTorch_DIR without a Python; this test needs the wheel's torchrun");
  REQUIRE_FALSE(python.empty());
  const std::string args = kTwoRanks + "--set training.steps=3 --set training.warmup_steps=1 ";
  const std::string threads = fresh_dir("real_torchrun_reference");
  const Run reference_run = run_odyssey("train " + args + "--out " + threads);
  REQUIRE(reference_run.code == 0);
  const auto reference = losses(threads);
  REQUIRE(reference.size() == 3);

  const std::string dir = fresh_dir("real_torchrun");
  const std::string log = dir + ".log";
  const std::string cmd = std::string("cd ") + ODYSSEY_SOURCE_DIR + " && OMP_NUM_THREADS=1 '" + python +
                          "' -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port " +
                          std::to_string(free_port()) + " --no-python " + ODYSSEY_BIN_DIR + "/odyssey train " + args +
                          "--out " + dir + " >" + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  INFO(read_text(log));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const auto got = losses(dir);
  REQUIRE(got.size() == 3);
  for (const auto& [step, loss] : reference) {
    INFO("step " << step << ": threads " << loss << ", torchrun " << got.at(step));
    CHECK(got.at(step) == loss);
  }
}

TEST_CASE("odyssey train under torchrun: a killed or hung rank is named by the other within the timeout",
          "[cli][train][torchrun]") {
  // The collective that failed and the rank that caused it, in the survivor's error.
  const std::regex collective(
      "(all_to_all|all_gather|all_reduce_sum|all_reduce_max|reduce_scatter_sum|broadcast|barrier)");
  constexpr double kTimeout = 4;
  const std::string args = kTwoRanks + "--set parallel.timeout_s=4 --set output.checkpoint_every=0 --steps 100000 ";
  struct Case {
    const char* name;
    int victim;
    int signal;
  };
  for (const Case& c : {Case{"rank 1 killed", 1, SIGKILL}, Case{"rank 0 killed", 0, SIGKILL},
                        Case{"rank 1 hung", 1, SIGSTOP}, Case{"rank 0 hung", 0, SIGSTOP}}) {
    INFO(c.name);
    const std::string dir =
        fresh_dir(std::string("torchrun_dead_") + std::to_string(c.victim) + std::to_string(c.signal));
    const std::vector<pid_t> pids = spawn_torchrun("train " + args + "--out " + dir, dir);
    // Both are training once rank 0 has written two steps.
    bool training = false;
    for (int i = 0; i < 120000 && !training; ++i) {
      training = metrics_lines(dir) >= 2;
      if (!training) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const int survivor = 1 - c.victim;
    kill(pids[c.victim], c.signal);
    const auto t0 = std::chrono::steady_clock::now();
    const auto status = wait_exit(pids[survivor], 60);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    kill(pids[c.victim], SIGKILL);
    waitpid(pids[c.victim], nullptr, 0);
    if (!status) {
      kill(pids[survivor], SIGKILL);
      waitpid(pids[survivor], nullptr, 0);
    }
    const std::string log = read_text(dir + ".rank" + std::to_string(survivor) + ".log");
    INFO(log);
    REQUIRE(training);
    REQUIRE(status.has_value());  // no hang
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 1);
    if (c.victim == 0 && c.signal == SIGSTOP) {
      // The store's host stopped: the kernel keeps its connections open and no reply ever comes
      // (rank 1 waited in recv() for good). Each call into the store is bounded: parallel.timeout_s
      // + 10 s, then the process ends naming rank 0's process.
      CHECK_THAT(log, Catch::Contains("gave no answer to") &&
                          Catch::Contains("rank 0's process, which serves it, is stopped or hung"));
      CHECK(waited < kTimeout + 10 + 1.5 + 10);
      continue;
    }
    const std::string named = "rank " + std::to_string(c.victim) + " failed";
    CHECK_THAT(log, Catch::Contains(named));
    CHECK(std::regex_search(log, collective));
    // A death is seen at once (the connection closes) and named after the heartbeat check (1.5 s);
    // a hang is seen when the collective times out. Then the process ends: 10 s for the teardown
    // and a loaded host's scheduling, far below the 60 s a survivor that waited on would take.
    CHECK(waited < kTimeout + 1.5 + 10);
    if (c.signal == SIGSTOP) CHECK_THAT(log, Catch::Contains("timed out after 4 s"));
  }
}

TEST_CASE("odyssey train under torchrun: processes that run other jobs, a refusal in one, a stop in one end all alike",
          "[cli][train][torchrun]") {
  // One process per rank, each with its own arguments (`common` for both, then rank r's own).
  auto spawn_pair = [](const std::string& common, const std::string& rank0, const std::string& rank1,
                       const std::string& dir, const std::string& rank1_env = "") {
    const int port = free_port();
    std::vector<pid_t> pids;
    const std::string own[2] = {rank0, rank1};
    for (int rank = 0; rank < 2; ++rank)
      pids.push_back(spawn_odyssey("train " + common + own[rank], dir + ".rank" + std::to_string(rank) + ".log",
                                   "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
                                       " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                                       std::to_string(port) + (rank == 1 ? " " + rank1_env : std::string())));
    return pids;
  };
  const std::string common = kTwoRanks + "--set parallel.timeout_s=60 --set training.warmup_steps=1 ";
  // Another learning rate in rank 1's process: it trained in silence (another model, exit 0); another
  // shape crashed Gloo (SIGABRT); another --out split the checkpoint. Every process exits 2 now,
  // naming the difference, long before the 60 s timeout.
  const std::string lr = fresh_dir("torchrun_other_lr");
  auto t0 = std::chrono::steady_clock::now();
  auto logs =
      require_ranks_exit(spawn_pair(common + "--steps 2 --out " + lr, "", " --set training.lr=0.01", lr), lr, 2, 50);
  for (const std::string& log : logs)
    CHECK_THAT(log, Catch::Contains("rank 1 refused to start: its process runs another job than rank 0's "
                                    "(training.lr = 0.005 -> 0.01, rank 0's value first)"));
  const std::string a = fresh_dir("torchrun_out_a"), b = fresh_dir("torchrun_out_b");
  logs = require_ranks_exit(spawn_pair(common + "--steps 2", " --out " + a, " --out " + b, a), a, 2, 50);
  for (const std::string& log : logs) CHECK_THAT(log, Catch::Contains("--out " + a + " -> " + b));
  // A refusal of rank 1's own command line (an unknown key): rank 0 learns it at once.
  const std::string bad = fresh_dir("torchrun_bad_set");
  logs =
      require_ranks_exit(spawn_pair(common + "--steps 2 --out " + bad, "", " --set memory.bogus=1", bad), bad, 2, 50);
  CHECK_THAT(logs[0], Catch::Contains("rank 1 refused to start") && Catch::Contains("unknown key in [memory]"));
  // A host's own refusal (a network interface one node lacks): agreed before the groups, where
  // rank 0 waited the whole timeout for a rank that had left, then wrote a failed run.
  const std::string ifname = fresh_dir("torchrun_bad_interface");
  logs = require_ranks_exit(
      spawn_pair(common + "--steps 2 --out " + ifname, "", "", ifname, "GLOO_SOCKET_IFNAME=odyssey-no-such-if"), ifname,
      2, 50);
  CHECK_THAT(logs[0], Catch::Contains("rank 1 refused to start") &&
                          Catch::Contains("GLOO_SOCKET_IFNAME=odyssey-no-such-if is no network interface"));
  // Each process reads its own node's copy of the data file: processes whose copies differ (here
  // each in its own directory, the preset's relative path) trained their ranks on other sequences
  // in silence. Its size and its edges' CRC-32 are part of the job the processes agree on.
  const std::string nodes = fresh_dir("torchrun_data_nodes");
  for (const char* node : {"a", "b"}) {
    REQUIRE(std::system(("mkdir -p " + nodes + "/" + node).c_str()) == 0);
    std::ofstream bytes(nodes + "/" + node + "/data.bin", std::ios::binary);
    for (int i = 0; i < 70000; ++i) bytes.put(static_cast<char>((i * (node[0] == 'a' ? 7 : 11)) & 0xff));
  }
  {
    const int port = free_port();
    const std::string data_run = nodes + "/run";
    std::vector<pid_t> pids;
    for (int rank = 0; rank < 2; ++rank)
      pids.push_back(spawn_odyssey(
          "train " + std::string(ODYSSEY_SOURCE_DIR) + "/" + common +
              "--set training.dataset=bytes --set training.dataset_path=data.bin --steps 2 --out " + data_run,
          data_run + ".rank" + std::to_string(rank) + ".log",
          "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
              " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + "; cd " +
              nodes + "/" + (rank == 0 ? "a" : "b")));
    logs = require_ranks_exit(pids, data_run, 2, 50);
    CHECK_THAT(logs[0], Catch::Contains("rank 1 refused to start") &&
                            Catch::Contains("the data file at training.dataset_path 70000 bytes, CRC-32"));
  }
  // A checkpoint shard of one rank that fails its check: that process refuses it as bad input
  // (exit 2) mid-setup, and the other's collective that failed for it ends the same way, where it
  // said exit 1 (a run's failure) for the same cause.
  const std::string shard = fresh_dir("torchrun_bad_shard");
  require_ranks_exit(spawn_pair(common + "--steps 2 --out " + shard, "", "", shard), shard, 0, 50);
  {
    std::fstream bin(shard + "/checkpoints/step_00000002/rank1.bin", std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(bin.good());
    bin.seekp(200);
    bin.put('\x5a');  // one byte of the shard's body: its CRC no longer holds
  }
  logs = require_ranks_exit(spawn_pair(common + "--steps 3 --resume " + shard, "", "", shard), shard, 2, 50);
  CHECK_THAT(logs[1], Catch::Contains("rank1.bin"));
  CHECK_THAT(logs[0], Catch::Contains("rank 1 failed") && Catch::Contains("rank1.bin"));
  // ... and rank 0's: its process serves the job's store and ended with it, so the other read
  // "the store is unreachable" as a run's failure (exit 1) whenever the store went first. The
  // failing process now waits until each other one has seen its declared failure and class.
  const std::string shard0 = fresh_dir("torchrun_bad_shard0");
  require_ranks_exit(spawn_pair(common + "--steps 2 --out " + shard0, "", "", shard0), shard0, 0, 50);
  {
    std::fstream bin(shard0 + "/checkpoints/step_00000002/rank0.bin", std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(bin.good());
    bin.seekp(200);
    bin.put('\x5a');
  }
  logs = require_ranks_exit(spawn_pair(common + "--steps 3 --resume " + shard0, "", "", shard0), shard0, 2, 50);
  CHECK_THAT(logs[0], Catch::Contains("rank0.bin"));
  CHECK_THAT(logs[1], Catch::Contains("rank 0 failed"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(200));
  // SIGTERM to rank 1's process alone stops the job at a step boundary: both exit 143 (rank 0 said
  // 0, "every step asked for ran", for a run that stopped).
  const std::string stop = fresh_dir("torchrun_stop_one");
  const std::vector<pid_t> pids = spawn_pair(common + "--steps 100000 --out " + stop, "", "", stop);
  bool training = false;
  for (int i = 0; i < 120000 && !training; ++i) {
    training = metrics_lines(stop) >= 2;
    if (!training) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(training);
  ::kill(pids[1], SIGTERM);
  logs = require_ranks_exit(pids, stop, 143, 60);
  CHECK_THAT(logs[0], Catch::Contains("stopped at step"));
}

TEST_CASE("odyssey train --no-checkpoint: a benchmark's run writes no checkpoint at all", "[cli][train]") {
  const std::string dir = fresh_dir("no_checkpoint");
  const Run r = run_odyssey("train " + kTiny +
                            "--set training.steps=3 --set training.warmup_steps=1 "
                            "--set output.checkpoint_every=1 --no-checkpoint --quiet --out " +
                            dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(metrics_lines(dir) == 3);
  CHECK(checkpoint_step(dir) == -1);
  CHECK_FALSE(std::ifstream(dir + "/checkpoints/latest.json").good());
  // output.export_hf exports the final checkpoint: refused before the run, naming why there is none
  const Run exporting = run_odyssey("train " + kTiny + "--set output.export_hf=" + fresh_dir("no_checkpoint_export") +
                                    " --no-checkpoint --quiet --out " + fresh_dir("no_checkpoint_export_run"));
  require_exit(exporting, 2);
  CHECK_THAT(exporting.err, Catch::Contains("and this run writes none (--no-checkpoint)"));
  // ... and into a folder the export would refuse (not empty): refused before the run too, as the
  // export refuses it, where every step trained and the checkpoint was saved first
  const std::string full = fresh_dir("export_into_full");
  REQUIRE(std::system(("mkdir -p " + full + " && touch " + full + "/notes.txt").c_str()) == 0);
  const std::string spent = fresh_dir("export_into_full_run");
  const Run into_full = run_odyssey(
      "train " + kTiny + "--set training.steps=2 --set training.warmup_steps=1 --set output.export_hf=" + full +
      " --quiet --out " + spent);
  require_exit(into_full, 2);
  CHECK_THAT(into_full.err, Catch::Contains("export: " + full + " exists and is not empty"));
  CHECK(metrics_lines(spent) == 0);  // no step trained
  CHECK(checkpoint_step(spent) == -1);
  // ... and into the run's own --out, or a folder it lies in, which the run fills before the export
  // (it trained every step, then failed)
  const std::string base = fresh_dir("export_into_own"), own = base + "/run";
  for (const std::string& target : {own, base}) {
    INFO(target);
    const Run into_own = run_odyssey("train " + kTiny + "--set training.steps=2 --set training.warmup_steps=1 " +
                                     "--set output.export_hf=" + target + " --quiet --out " + own);
    require_exit(into_own, 2);
    CHECK_THAT(into_own.err, Catch::Contains("output.export_hf = \"" + target + "\" is ") &&
                                 Catch::Contains("the export needs an empty directory of its own"));
    CHECK(metrics_lines(own) == 0);
  }
}

TEST_CASE("odyssey train --kernel-profile: the last step's operators in a Chrome trace", "[cli][train]") {
  // Kineto records the run's last step (here the second); on the CPU its operators (a GPU run's
  // kernels too, bench/gpu/kernel_profile.py). The trace's folder is made by the run.
  const std::string dir = fresh_dir("kernel_profile");
  const std::string trace = dir + "/profiles/last_step.json";
  const Run r = run_odyssey("train " + kTiny +
                            "--set training.steps=2 --set training.warmup_steps=1 --no-checkpoint "
                            "--out " +
                            dir + "/run --kernel-profile " + trace);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("kernel profile of step 2"));
  CHECK(metrics_lines(dir + "/run") == 2);
  const auto v = parse_json(read_text(trace));
  REQUIRE(v.has_value());
  REQUIRE(v->contains("traceEvents"));
  int matmuls = 0, operators = 0;
  for (const auto& e : v->at("traceEvents")) {
    if (!e.contains("cat") || e.at("cat") != "cpu_op") continue;
    ++operators;
    const std::string name = e.at("name").get<std::string>();
    if (name == "aten::mm" || name == "aten::addmm" || name == "aten::matmul") ++matmuls;
  }
  CHECK(operators > 100);
  CHECK(matmuls > 0);
  CHECK_FALSE(std::ifstream(trace + ".partial").good());  // written through a temporary, moved into place
}

TEST_CASE("odyssey train --kernel-profile under a file is refused before any output", "[cli][train]") {
  const std::string dir = fresh_dir("kernel_profile_refused");
  std::system(("mkdir -p '" + dir + "' && touch '" + dir + "/a_file'").c_str());
  const Run r = run_odyssey("train " + kTiny +
                            "--set training.steps=1 --set training.warmup_steps=1 --no-checkpoint "
                            "--quiet --out " +
                            dir + "/run --kernel-profile " + dir + "/a_file/trace.json");
  INFO(r.out << r.err);
  CHECK(r.code == 2);  // a file where the folder must be: the argument's fault, as for --out
  CHECK_THAT(r.err, Catch::Contains("--kernel-profile: ") && Catch::Contains(dir + "/a_file"));
  CHECK(read_text(dir + "/run/metrics.jsonl").empty());
}
