// Checkpoints that cannot lie: every byte of a rank file flipped, hostile header fields, a
// corrupt pointer or config, a config that does not match the run, a busy or unwritable run
// directory; each refused cleanly with the file and the tensor or key named, the trainer
// untouched. And the files a resumed run continues: metrics.jsonl and trace.json keep each step
// once. defines: test cases [checkpoint]
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "../common/engine_test_util.h"
#include "engine/telemetry/metrics_jsonl.h"
#include "engine/telemetry/trace_writer.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/checksum.h"
#include "engine/train/hf_checkpoint.h"
#include "engine/train/run.h"
#include "engine/util/files.h"
#include "engine/util/json_read.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = "/tmp/odyssey_checkpoint_test_" + std::to_string(::getpid()) + "_" + name;
  remove_tree(dir);
  return dir;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

RunConfig small_config() {
  RunConfig cfg = tiny_config(1, 64);
  cfg.training.steps = 4;
  cfg.output.trace_steps = 3;
  return cfg;
}

/// A run directory with a checkpoint after `steps` steps.
std::string checkpointed_run(const std::string& name, const RunConfig& cfg, int64_t steps) {
  RunOptions opt;
  opt.out_dir = fresh_dir(name);
  opt.steps = steps;
  const RunOutcome o = run_training(cfg, opt);
  REQUIRE(o.status == RunOutcome::Status::Finished);
  return opt.out_dir;
}

/// small_config on two rank threads, each holding half of every parameter group (FSDP).
RunConfig two_rank_config() {
  RunConfig cfg = small_config();
  cfg.parallel.world_size = 2;
  cfg.parallel.fsdp = true;
  return cfg;
}

/// Options that resume the run in `dir` into itself, up to step `steps`.
RunOptions resumed_in(const std::string& dir, int64_t steps) {
  RunOptions opt;
  opt.out_dir = dir;
  opt.resume_dir = dir;
  opt.steps = steps;
  return opt;
}

/// The byte offsets of every header field of every entry of a format-2 rank file (the layout in
/// checkpoint_io.cpp, walked independently here): where a flip is most likely to mislead a parser.
std::vector<size_t> header_offsets(const std::string& bytes) {
  std::vector<size_t> out;
  size_t at = 8;                                     // magic
  for (size_t i = 0; i < 12; ++i) out.push_back(i);  // magic + count
  uint32_t count = 0;
  std::memcpy(&count, bytes.data() + at, 4);
  at += 4;
  for (uint32_t e = 0; e < count; ++e) {
    uint32_t name_len = 0;
    std::memcpy(&name_len, bytes.data() + at, 4);
    const size_t head = 4 + name_len + 4 + 8 + 4;  // name_len, name, type code, numel, crc32
    for (size_t k = 0; k < head; ++k) out.push_back(at + k);
    int32_t code = 0;
    int64_t numel = 0;
    std::memcpy(&code, bytes.data() + at + 4 + name_len, 4);
    std::memcpy(&numel, bytes.data() + at + 4 + name_len + 4, 8);
    const size_t element = code == 3 ? 1 : code == 2 ? 8 : 4;
    at += head + static_cast<size_t>(numel) * element;
  }
  REQUIRE(at == bytes.size());
  return out;
}

/// The master weights of a trainer, to prove a refused load changed nothing.
std::vector<at::Tensor> masters(Trainer& t) { return group_params(t); }

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("checkpoint: every flipped byte of a rank file is refused, naming the file, the trainer untouched",
          "[engine][checkpoint]") {
  RunConfig cfg = small_config();
  // with the optimizer offloaded, the states a load would write are the host pool's
  cfg.memory.offload_optimizer = GENERATE(false, true);
  INFO("optimizer offload " << cfg.memory.offload_optimizer);
  const std::string dir = checkpointed_run(cfg.memory.offload_optimizer ? "flip_offloaded" : "flip", cfg, 2);
  const auto info = read_checkpoint_info(dir);
  REQUIRE(info);
  const std::string file = join_path(info->path, "rank0.bin");
  const std::string good = read_bytes(file);
  std::vector<size_t> offsets = header_offsets(good);
  for (size_t k = 1; k <= 200; ++k) offsets.push_back(good.size() * k / 201);  // and through the data
  Trainer t(cfg, cpu_rank());
  const auto before = masters(t);
  int refused = 0;
  for (size_t offset : offsets) {
    std::string bad = good;
    bad[offset] = static_cast<char>(bad[offset] ^ 0x5a);
    write_bytes(file, bad);
    INFO("byte " << offset << " of " << good.size());
    try {
      load_checkpoint(t, dir);
      FAIL("a corrupt checkpoint loaded");
    } catch (const CheckpointError& e) {
      CHECK_THAT(e.what(), Catch::Contains(file));
      ++refused;
    }
  }
  CHECK(refused == static_cast<int>(offsets.size()));
  CHECK(same(masters(t), before));  // every check runs before the first copy
  write_bytes(file, good);
  CHECK_NOTHROW(load_checkpoint(t, dir));
  CHECK(t.next_step() == 2);
}

TEST_CASE("checkpoint: hostile header fields give a clear refusal, never a crash or a huge allocation",
          "[engine][checkpoint]") {
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("hostile", cfg, 1);
  const std::string file = join_path(read_checkpoint_info(dir)->path, "rank0.bin");
  const std::string good = read_bytes(file);
  // The first entry ("step") starts at byte 12: name_len (4), "step" (4), type code, numel.
  const size_t code_at = 12 + 4 + 4, numel_at = code_at + 4;
  struct Case {
    const char* what;
    size_t offset;
    int64_t value;
    int width;
    const char* expect;
  };
  const Case cases[] = {
      {"dtype -1", code_at, -1, 4, "unknown element type code -1"},
      {"dtype 99", code_at, 99, 4, "unknown element type code 99"},
      {"numel -5", numel_at, -5, 8, "claims -5 int64 elements"},
      {"numel 2^40 + 1", numel_at, 1 + (int64_t{1} << 40), 8, "the file is truncated or corrupt"},
      {"numel 2^36", numel_at, int64_t{1} << 36, 8, "claims 68719476736 int64 elements"},
      {"count 0", 8, 0, 4, "claims 0 tensors"},
      {"name length 2^31", 12, int64_t{1} << 31, 4, "name length 2147483648"},
  };
  Trainer t(cfg, cpu_rank());
  for (const Case& c : cases) {
    INFO(c.what);
    std::string bad = good;
    std::memcpy(bad.data() + c.offset, &c.value, c.width);
    write_bytes(file, bad);
    try {
      load_checkpoint(t, dir);
      FAIL("loaded");
    } catch (const CheckpointError& e) {
      CHECK_THAT(e.what(), Catch::Contains(c.expect));
    }
  }
  // Truncated and extended files.
  write_bytes(file, good.substr(0, good.size() - 3));
  CHECK_THROWS_WITH(load_checkpoint(t, dir), Catch::Contains("the file is truncated or corrupt"));
  write_bytes(file, good + "xyz");
  CHECK_THROWS_WITH(load_checkpoint(t, dir), Catch::Contains("3 bytes follow the last tensor"));
  // Valid structure, corrupt weights: 1e30 written over the first master element.
  std::string big = good;
  const size_t data_at = big.size() - 64;
  const float huge = 1e30f;
  std::memcpy(big.data() + data_at, &huge, 4);
  write_bytes(file, big);
  CHECK_THROWS_WITH(load_checkpoint(t, dir), Catch::Contains("fails its CRC-32 check"));
}

TEST_CASE("checkpoint: a random generator state ATen refuses is refused by name, the trainer untouched",
          "[engine][checkpoint]") {
  // A forged rng_cpu entry with a valid CRC (or a format-1 file, which has none): every byte 0xff,
  // which CPUGeneratorImpl::set_state refuses. That error escaped with a LibTorch stack trace
  // (exit 1) after the weights had been copied into the trainer.
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("rng", cfg, 1);
  const std::string file = join_path(read_checkpoint_info(dir)->path, "rank0.bin");
  std::string bytes = read_bytes(file);
  const std::string name = "rng_cpu";
  const size_t name_at = bytes.find(name);
  REQUIRE(name_at != std::string::npos);
  const size_t head_at = name_at - 4, code_at = name_at + name.size(), crc_at = code_at + 4 + 8;
  int64_t numel = 0;
  std::memcpy(&numel, bytes.data() + code_at + 4, 8);
  REQUIRE(numel > 0);
  std::memset(bytes.data() + crc_at + 4, 0xff, static_cast<size_t>(numel));  // the state, one byte each
  uint32_t crc = crc32_update(0, bytes.data() + head_at, crc_at - head_at);
  crc = crc32_update(crc, bytes.data() + crc_at + 4, static_cast<size_t>(numel));
  std::memcpy(bytes.data() + crc_at, &crc, 4);
  write_bytes(file, bytes);
  Trainer t(cfg, cpu_rank());
  const auto before = masters(t);
  CHECK_THROWS_WITH(load_checkpoint(t, dir), Catch::Contains(file) && Catch::Contains("tensor 'rng_cpu' is not a "
                                                                                      "random generator's state"));
  CHECK(same(masters(t), before));
}

TEST_CASE("checkpoint: a rank file read as another rank's, or of another checkpoint, is refused by name",
          "[engine][checkpoint]") {
  // FSDP shards of one shape fit every rank: swapped rank files, or one of another run's
  // checkpoint at the same step, resumed silently on the wrong weights.
  const RunConfig cfg = two_rank_config();
  const std::string dir = checkpointed_run("owner", cfg, 2);
  const auto info = read_checkpoint_info(dir);
  REQUIRE(info);
  const std::string rank0 = join_path(info->path, "rank0.bin"), rank1 = join_path(info->path, "rank1.bin");
  const std::string bytes0 = read_bytes(rank0), bytes1 = read_bytes(rank1);
  const RunOptions again = resumed_in(dir, 3);
  write_bytes(rank0, bytes1);
  write_bytes(rank1, bytes0);
  RunOutcome o = run_training(cfg, again);
  CHECK(o.status == RunOutcome::Status::Failed);
  CHECK(o.bad_input);
  // whichever rank thread reads its file first is the one reported
  CHECK_THAT(o.error,
             (Catch::Contains(rank0) && Catch::Contains("written by rank 1 of 2, and is read as rank 0 of 2's")) ||
                 (Catch::Contains(rank1) && Catch::Contains("written by rank 0 of 2, and is read as rank 1 of 2's")));
  CHECK_THROWS_WITH(read_full_masters(*info, cfg), Catch::Contains("was written by rank 1 of 2"));  // export, eval
  // rank 1's file of a run with another seed, at the same step
  RunConfig other_cfg = cfg;
  other_cfg.training.seed = 99;
  const std::string other = checkpointed_run("owner_other", other_cfg, 2);
  write_bytes(rank0, bytes0);
  write_bytes(rank1, read_bytes(join_path(read_checkpoint_info(other)->path, "rank1.bin")));
  o = run_training(cfg, again);
  CHECK(o.bad_input);
  CHECK_THAT(o.error, Catch::Contains(rank1) && Catch::Contains("belongs to a checkpoint of another config"));
  write_bytes(rank1, bytes1);
  CHECK(run_training(cfg, again).status == RunOutcome::Status::Finished);
}

TEST_CASE("summary: each rank's run peak with its categories, the peaks of metrics.jsonl's steps",
          "[engine][checkpoint]") {
  // "ranks" was always empty, though the docs promised each rank's peaks and categories.
  const std::string dir = checkpointed_run("summary_ranks", two_rank_config(), 2);
  const auto summary = parse_json(read_bytes(join_path(dir, "summary.json")));
  REQUIRE(summary);
  std::vector<int64_t> most(2, 0);
  std::istringstream lines(read_bytes(join_path(dir, "metrics.jsonl")));
  for (std::string line; std::getline(lines, line);)
    for (size_t r = 0; r < 2; ++r)
      most[r] = std::max(most[r], parse_json(line)->at("rank_peak_bytes").at(r).get<int64_t>());
  const Json& ranks = summary->at("ranks");
  REQUIRE(ranks.size() == 2);
  for (size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(ranks[r].at("rank").get<int64_t>() == static_cast<int64_t>(r));
    CHECK(ranks[r].at("device_peak").get<int64_t>() == most[r]);  // the same tracker windows
    int64_t categories = 0;
    for (const auto& [name, bytes] : ranks[r].at("category_at_peak").items()) categories += bytes.get<int64_t>();
    CHECK(categories >= most[r]);  // both pools' bytes at the device peak
    CHECK(summary->at("rank_peak_bytes").at(r).get<int64_t>() == most[r]);
  }
}

TEST_CASE("summary: a run whose step ran out of memory keeps the rank's peak and the failing step's phases",
          "[engine][checkpoint]") {
  // "ranks" was empty for a failed run, where an OOM's peak and categories are what one reads, and
  // the failing step's phases reached neither trace.json nor summary.json's phase table.
  // Step 3 gets room for what is held after step 2 and a quarter of a step more: it runs out.
  RunConfig cfg = small_config();
  cfg.memory.activation_checkpointing = true;
  cfg.output.trace_steps = 2;  // the failing step 3 is past them: in the trace all the same
  RunOptions opt;
  opt.out_dir = fresh_dir("summary_failed_step");
  opt.steps = 4;
  MemoryTracker& tracker = MemoryTracker::instance();
  opt.on_step = [&](const StepMetrics& m, const StepResult& r) {
    if (m.step == 2) {
      const int64_t held = tracker.device_bytes(0);
      tracker.set_device_limit(0, held + (r.device_peak - held) / 4);
    }
  };
  const RunOutcome o = run_training(cfg, opt);
  tracker.set_device_limit(0, 0);
  REQUIRE(o.status == RunOutcome::Status::Failed);
  CHECK_THAT(o.error, Catch::Contains("out of memory"));
  const auto summary = parse_json(read_bytes(join_path(opt.out_dir, "summary.json")));
  REQUIRE(summary);
  const Json& ranks = summary->at("ranks");
  REQUIRE(ranks.size() == 1);
  CHECK(ranks[0].at("device_peak").get<int64_t>() > 0);
  CHECK(ranks[0].at("ooms").get<int64_t>() >= 1);  // the failing step's window
  // The failing step's phases, closed as the out-of-memory error unwound them, marked so.
  const auto trace = parse_json(read_bytes(join_path(opt.out_dir, "trace.json")));
  REQUIRE(trace);
  int64_t failed_phases = 0, unwound = 0;
  for (const Json& e : trace->at("traceEvents")) {
    if (e.at("ph") != "X" || !e.contains("args") || e.at("args").value("step", int64_t{0}) != 3) continue;
    ++failed_phases;
    unwound += e.at("args").value("unwound", false);
  }
  CHECK(unwound >= 1);
  CHECK(failed_phases >= unwound);
  // Summary's phase table counts each phase once a step: the outermost, "step", ran three times.
  int64_t step_count = 0;
  for (const Json& p : summary->at("phases"))
    if (p.at("path") == "step") step_count = p.at("count").get<int64_t>();
  CHECK(step_count == 3);
}

TEST_CASE("checkpoint: the pointer file's fields are checked for type and range", "[engine][checkpoint]") {
  const std::string dir = checkpointed_run("pointer", small_config(), 1);
  const std::string latest = join_path(join_path(dir, "checkpoints"), "latest.json");
  const std::string good = read_bytes(latest);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    write_bytes(latest, text);
  };
  with("\"step\":1", "\"step\":\"ten\"");
  CHECK_THROWS_WITH(read_checkpoint_info(dir), Catch::Contains("\"step\" = \"ten\": must be a whole number"));
  with("\"step\":1", "\"step\":1e300");
  CHECK_THROWS_WITH(read_checkpoint_info(dir), Catch::Contains("\"step\" = 1e+300"));
  with("\"step\":1", "\"step\":-4");
  CHECK_THROWS_WITH(read_checkpoint_info(dir), Catch::Contains("\"step\" = -4"));
  with("\"path\":\"step_00000001\"", "\"path\":\"../../elsewhere\"");
  CHECK_THROWS_WITH(read_checkpoint_info(dir), Catch::Contains("does not name step 1's folder"));
  write_bytes(latest, "[1, 2]");
  CHECK_THROWS_WITH(read_checkpoint_info(dir), Catch::Contains("not a JSON object"));
  write_bytes(latest, good);
  // config.toml is covered by latest.json's config_crc32.
  const std::string config = join_path(read_checkpoint_info(dir)->path, "config.toml");
  const std::string text = read_bytes(config);
  write_bytes(config, text + "\n# edited\n");
  CHECK_THROWS_WITH(read_checkpoint_info(dir), Catch::Contains("config.toml: fails its CRC-32 check"));
  write_bytes(config, text);
  CHECK_NOTHROW(read_checkpoint_info(dir));
}

TEST_CASE("checkpoint: resume refuses a different shape and names every other change", "[engine][checkpoint]") {
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("config", cfg, 2);
  const auto info = read_checkpoint_info(dir);
  REQUIRE(info);
  CHECK(check_resume_config(*info, cfg, dir).empty());

  RunConfig changed = cfg;
  changed.training.lr = 2e-3;
  changed.training.seed = 8;
  changed.training.seq_len = 128;
  changed.model.rope_theta = 500000;  // context extension: allowed
  const auto notes = check_resume_config(*info, changed, dir);
  REQUIRE(notes.size() == 4);
  CHECK(notes[0] == "resume: model.rope_theta = 10000.0 -> 500000.0 (checkpoint -> this run)");
  CHECK(notes[1] == "resume: training.seq_len = 64 -> 128 (checkpoint -> this run)");
  CHECK(notes[2] == "resume: training.lr = 0.001 -> 0.002 (checkpoint -> this run)");
  CHECK(notes[3] == "resume: training.seed = 7 -> 8 (checkpoint -> this run)");

  RunConfig deeper = cfg;
  deeper.model.n_layers = 2;
  deeper.parallel.fsdp = true;
  CHECK_THROWS_WITH(check_resume_config(*info, deeper, dir),
                    Catch::Contains("model.n_layers = 1 -> 2") && Catch::Contains("parallel.fsdp = false -> true"));
  // Through run_training: refused as bad input before any output changes.
  RunOptions opt;
  opt.resume_dir = dir;
  opt.out_dir = dir;
  const std::string metrics_before = read_bytes(join_path(dir, "metrics.jsonl"));
  const RunOutcome o = run_training(deeper, opt);
  CHECK(o.status == RunOutcome::Status::Failed);
  CHECK(o.bad_input);
  CHECK(read_bytes(join_path(dir, "metrics.jsonl")) == metrics_before);
}

/// A run that got to step 3 in `dir` and was killed after checkpoint 2: its files hold step 3 (and
/// a torn line) that a resumed run will take again.
void run_killed_after_checkpoint_2(const RunConfig& cfg, const std::string& dir) {
  {
    RunOptions opt;
    opt.out_dir = dir;
    opt.steps = 3;
    opt.checkpoints = false;
    REQUIRE(run_training(cfg, opt).status == RunOutcome::Status::Finished);
    RunOptions two;
    two.out_dir = fresh_dir("continue_ckpt");
    two.steps = 2;
    REQUIRE(run_training(cfg, two).status == RunOutcome::Status::Finished);
    std::string error;
    REQUIRE(make_dirs(join_path(dir, "checkpoints"), &error));
    for (const auto& name : list_dir(join_path(two.out_dir, "checkpoints")))
      REQUIRE(rename_path(join_path(join_path(two.out_dir, "checkpoints"), name),
                          join_path(join_path(dir, "checkpoints"), name)));
    std::ofstream(join_path(dir, "metrics.jsonl"), std::ios::app) << "{\"step\":4,\"loss\":";  // torn by the kill
  }
}

TEST_CASE("checkpoint: a resumed run keeps each step once in metrics.jsonl and trace.json", "[engine][checkpoint]") {
  RunConfig cfg = small_config();
  cfg.output.checkpoint_every = 2;
  const std::string dir = fresh_dir("continue");
  run_killed_after_checkpoint_2(cfg, dir);
  RunOptions rest;
  rest.out_dir = dir;
  rest.resume_dir = dir;
  std::vector<std::string> log;
  rest.log = [&](const std::string& line) { log.push_back(line); };
  const RunOutcome o = run_training(cfg, rest);
  REQUIRE(o.status == RunOutcome::Status::Finished);
  // The events of step 3 that the first process wrote go, and the log says so.
  CHECK(std::any_of(log.begin(), log.end(), [](const std::string& line) {
    return line.rfind("trace.json: kept ", 0) == 0 &&
           line.find(" events through step 2, dropped ") != std::string::npos;
  }));
  CHECK(o.metrics.front().step == 3);
  std::istringstream lines(read_bytes(join_path(dir, "metrics.jsonl")));
  std::vector<int64_t> steps, process_starts;
  std::map<int64_t, double> step_times;
  for (std::string line; std::getline(lines, line);) {
    auto v = parse_json(line);
    REQUIRE(v);
    steps.push_back(v->at("step").get<int64_t>());
    step_times[steps.back()] = v->at("step_time_s").get<double>();
    if (v->contains("first_of_process")) process_starts.push_back(steps.back());
  }
  CHECK(steps == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(process_starts == std::vector<int64_t>{1, 3});  // where each process began: its warm-up step
  // The trace: every (rank, step, phase path) once: the first process's steps 1 and 2 (its step 3
  // is cut), then the resumed process's first trace_steps steps (3 and 4), after them in time.
  auto trace = parse_json(read_bytes(join_path(dir, "trace.json")));
  REQUIRE(trace);
  std::set<std::tuple<int64_t, int64_t, std::string>> seen;
  std::set<int64_t> traced_steps;
  double last_end_step2 = 0, first_begin_step3 = 1e300;
  for (const auto& e : trace->at("traceEvents")) {
    if (e.at("ph").get<std::string>() != "X") continue;
    const int64_t step = e.at("args").at("step").get<int64_t>();
    traced_steps.insert(step);
    CHECK(seen.insert({e.at("pid").get<int64_t>(), step, e.at("args").at("path").get<std::string>()}).second);
    if (step == 2) last_end_step2 = std::max(last_end_step2, e.at("ts").get<double>() + e.at("dur").get<double>());
    if (step == 3) first_begin_step3 = std::min(first_begin_step3, e.at("ts").get<double>());
  }
  CHECK(traced_steps == std::set<int64_t>{1, 2, 3, 4});
  CHECK(first_begin_step3 > last_end_step2);
  // summary.json is the whole run's: the kept steps 1 and 2 read back, then this process's.
  auto summary = parse_json(read_bytes(join_path(dir, "summary.json")));
  REQUIRE(summary);
  CHECK(summary->at("steps").get<int64_t>() == 4);
  CHECK(summary->at("extra").at("resumed_at_step").get<int64_t>() == 2);
  // The means leave out each process's first step (steps 1 and 3): the mean of steps 2 and 4, the
  // one sum and division summary_json makes of the values the lines print (round-trip exact).
  CHECK(summary->at("step_time_s_mean").get<double>() == (step_times[2] + step_times[4]) / 2);
  std::istringstream first_line(read_bytes(join_path(dir, "metrics.jsonl")));
  std::string line;
  std::getline(first_line, line);
  const auto first = parse_json(line);
  CHECK(summary->at("loss_first").get<double>() == first->at("loss").get<double>());
  // the long-range task's answer loss too (it was this process's first step's)
  REQUIRE(first->contains("answer_loss"));
  CHECK(summary->at("extra").at("answer_loss_first").get<double>() == first->at("answer_loss").get<double>());
}

TEST_CASE("checkpoint: a resume that writes no trace still cuts the earlier one, and drops the old summary",
          "[engine][checkpoint]") {
  // Resumed with output.trace = false, the killed process's events of step 3 stayed, and a later
  // traced resume kept them as its own; summary.json said "finished at step 3" while the resume
  // ran, and still did after a kill.
  RunConfig cfg = small_config();
  cfg.output.checkpoint_every = 2;
  const std::string dir = fresh_dir("continue_untraced");
  run_killed_after_checkpoint_2(cfg, dir);
  REQUIRE(path_exists(join_path(dir, "summary.json")));
  RunConfig untraced = cfg;
  untraced.output.trace = false;
  RunOptions rest;
  rest.out_dir = dir;
  rest.resume_dir = dir;
  bool summary_while_training = true;
  rest.on_step = [&](const StepMetrics&, const StepResult&) {
    summary_while_training = path_exists(join_path(dir, "summary.json"));
  };
  REQUIRE(run_training(untraced, rest).status == RunOutcome::Status::Finished);
  CHECK_FALSE(summary_while_training);
  CHECK(path_exists(join_path(dir, "summary.json")));  // this run's, at its end
  auto trace = parse_json(read_bytes(join_path(dir, "trace.json")));
  REQUIRE(trace);
  std::set<int64_t> traced_steps;
  for (const auto& e : trace->at("traceEvents"))
    if (e.at("ph") == "X") traced_steps.insert(e.at("args").at("step").get<int64_t>());
  CHECK(traced_steps == std::set<int64_t>{1, 2});
}

TEST_CASE("checkpoint: a resume that fails before its first step leaves the run's files as it found them",
          "[engine][checkpoint]") {
  // A runtime failure (not bad input) while the resumed run opens its files: summary.json was
  // replaced by a failed, zero-step one, and the whole run's summary lost.
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("resume_fails", cfg, 2);
  std::vector<std::string> before;
  std::vector<ino_t> inodes;  // a file still as found is left alone, not rewritten (a full disk)
  for (const char* name : {"summary.json", "metrics.jsonl", "trace.json"}) {
    before.push_back(read_bytes(join_path(dir, name)));
    struct stat st {};
    REQUIRE(::stat(join_path(dir, name).c_str(), &st) == 0);
    inodes.push_back(st.st_ino);
  }
  // metrics.jsonl cannot be rewritten: its temporary answers with ENOSPC, as a full disk does (a
  // directory there would be refused before the run starts, as bad input)
  REQUIRE(::symlink("/dev/full", join_path(dir, "metrics.jsonl.tmp").c_str()) == 0);
  const RunOptions again = resumed_in(dir, 3);
  const RunOutcome o = run_training(cfg, again);
  CHECK(o.status == RunOutcome::Status::Failed);
  CHECK_FALSE(o.bad_input);
  CHECK_THAT(o.error, Catch::Contains("metrics.jsonl.tmp"));
  size_t i = 0;
  for (const char* name : {"summary.json", "metrics.jsonl", "trace.json"}) {
    INFO(name);
    struct stat st {};
    REQUIRE(::stat(join_path(dir, name).c_str(), &st) == 0);
    CHECK(st.st_ino == inodes[i]);
    CHECK(read_bytes(join_path(dir, name)) == before[i++]);
  }
}

TEST_CASE("run directory: what a run cannot write there is refused first, as bad input, naming it",
          "[engine][checkpoint]") {
  // Each of these was a runtime failure (exit 1): a directory planted as the lock, at the lock;
  // summary.json a directory, after the last step (the steps' time spent). A latest.json that is a
  // link to nothing read as "no checkpoint there". (A folder this user may not write is refused
  // the same way, by access(2): not testable as root, who may write anywhere.)
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("unwritable", cfg, 2);
  const RunOptions again = resumed_in(dir, 3);
  const std::string summary = read_bytes(join_path(dir, "summary.json"));
  REQUIRE(std::remove(join_path(dir, "summary.json").c_str()) == 0);
  std::string error;
  REQUIRE(make_dirs(join_path(dir, "summary.json"), &error));
  RunOutcome o = run_training(cfg, again);
  CHECK(o.bad_input);
  CHECK_THAT(o.error, Catch::Contains("summary.json is a directory, where the run writes its summary.json"));
  REQUIRE(::rmdir(join_path(dir, "summary.json").c_str()) == 0);
  write_bytes(join_path(dir, "summary.json"), summary);

  RunOptions fresh;
  fresh.out_dir = fresh_dir("planted_lock");
  REQUIRE(make_dirs(join_path(fresh.out_dir, ".odyssey.lock"), &error));
  o = run_training(cfg, fresh);
  CHECK(o.bad_input);
  CHECK_THAT(o.error, Catch::Contains("cannot create the run lock") && Catch::Contains("Is a directory"));

  const std::string latest = join_path(dir, "checkpoints/latest.json");
  REQUIRE(std::rename(latest.c_str(), (latest + ".kept").c_str()) == 0);
  REQUIRE(::symlink("nothing", latest.c_str()) == 0);
  CHECK_THROWS_WITH(read_checkpoint_info(dir),
                    Catch::Contains(latest + ": cannot be read (a symbolic link to nothing)"));
  REQUIRE(std::remove(latest.c_str()) == 0);
  REQUIRE(std::rename((latest + ".kept").c_str(), latest.c_str()) == 0);
  CHECK(run_training(cfg, again).status == RunOutcome::Status::Finished);
}

TEST_CASE("trace: a resumed trace is valid JSON on disk before this process writes, and flush() writes",
          "[engine][checkpoint]") {
  // The resume constructor truncated the file and held the kept events in memory: a process killed
  // (or stopped while loading) before its first flush left an empty trace, every step lost.
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("trace_resume", cfg, 2);
  const std::string path = join_path(dir, "trace.json");
  auto count_x = [](const Json& trace) {
    int64_t n = 0;
    for (const auto& e : trace.at("traceEvents")) n += e.at("ph") == "X";
    return n;
  };
  const auto old_trace = parse_json(read_bytes(path));
  REQUIRE(old_trace);
  TraceWriter trace(path, 2);  // keeps both steps
  const auto on_disk = parse_json(read_bytes(path));
  REQUIRE(on_disk);  // closed and whole, before anything else is written
  CHECK(count_x(*on_disk) == count_x(*old_trace));
  PhaseRecord record;
  record.path = "forward";
  record.step = 3;
  record.t_end_s = 0.001;
  trace.on_record(record);
  trace.flush();
  const std::string killed = read_bytes(path);             // what a process killed now leaves
  CHECK(killed.find("\"forward\"") != std::string::npos);  // on disk before close
  trace.close();
  const auto closed = parse_json(read_bytes(path));  // the closing lines written over: one document
  REQUIRE(closed);
  CHECK(count_x(*closed) == count_x(*old_trace) + 1);
  // Resumed from the killed file: its last event, written without a newline after it, is kept
  // (the reader took only lines that ended in one, and dropped a checkpoint step's last event).
  write_bytes(path, killed);
  TraceWriter(path, 3).close();
  const auto resumed = parse_json(read_bytes(path));
  REQUIRE(resumed);
  CHECK(count_x(*resumed) == count_x(*old_trace) + 1);
}

TEST_CASE("run directory: one writer at a time, a dead owner's lock is taken over", "[engine][checkpoint]") {
  const std::string dir = fresh_dir("lock");
  std::string error;
  REQUIRE(make_dirs(dir, &error));
  {
    RunDirLock first(dir);
    CHECK(first.previous_owner().empty());
    CHECK_THROWS_AS(RunDirLock(dir), RunDirBusy);
    CHECK_THROWS_WITH(RunDirLock(dir), Catch::Contains("pid " + std::to_string(::getpid())));
    // A run into the busy directory is refused as bad input and writes nothing there.
    RunOptions opt;
    opt.out_dir = dir;
    opt.steps = 1;
    const RunOutcome o = run_training(small_config(), opt);
    CHECK(o.bad_input);
    CHECK_THAT(o.error, Catch::Contains("is in use by another run"));
    CHECK(!path_exists(join_path(dir, "metrics.jsonl")));
    CHECK(!path_exists(join_path(dir, "summary.json")));
  }
  // A lock file left with an owner (its process died holding it) and no flock: taken over.
  write_bytes(RunDirLock::lock_path(dir), "pid 999999 on elsewhere, since 2026-01-01 00:00:00\n");
  RunDirLock again(dir);
  CHECK_THAT(again.previous_owner(), Catch::Contains("pid 999999"));
}

TEST_CASE("checkpoint: a save removes the checkpoint it supersedes and nothing else of checkpoints/",
          "[engine][checkpoint]") {
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("supersede", cfg, 1);
  const std::string root = join_path(dir, "checkpoints");
  // what a user keeps beside the saves: a copy of one, notes, a folder the save's name rule never
  // makes (nine digits with a leading zero), a link named as a save to the kept copy
  REQUIRE(std::system(("cp -r '" + root + "/step_00000001' '" + root + "/step_00000001.keep' && echo notes > '" + root +
                       "/step_notes.txt' && mkdir '" + root + "/step_000000001' && ln -s step_00000001.keep '" + root +
                       "/step_00000000'")
                          .c_str()) == 0);
  const RunOutcome o = run_training(cfg, resumed_in(dir, 2));
  REQUIRE(o.status == RunOutcome::Status::Finished);
  REQUIRE(read_checkpoint_info(dir)->step == 2);
  CHECK(!path_exists(join_path(root, "step_00000001")));  // superseded by step 2
  CHECK(path_exists(join_path(root, "step_00000002/config.toml")));
  CHECK(path_exists(join_path(root, "step_00000001.keep/config.toml")));
  CHECK(read_file_bounded(join_path(root, "step_notes.txt"), 64, "notes") == "notes\n");
  CHECK(path_exists(join_path(root, "step_000000001")));
  struct stat st {};
  CHECK((::lstat(join_path(root, "step_00000000").c_str(), &st) == 0 && S_ISLNK(st.st_mode)));
}

TEST_CASE("checkpoint: a checkpoint read before another run replaced it is named as superseded, never resumed",
          "[engine][checkpoint]") {
  // What a second process sees when a live run saves meanwhile: it read latest.json (step 1), and
  // the run then saved step 2 and removed step 1's folder.
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("superseded", cfg, 1);
  const std::optional<CheckpointInfo> stale = read_checkpoint_info(dir);
  REQUIRE(stale->step == 1);
  CHECK_NOTHROW(read_full_masters(*stale, cfg));  // still the pointer's: read whole, nothing said
  REQUIRE(run_training(cfg, resumed_in(dir, 2)).status == RunOutcome::Status::Finished);
  // export and eval: the missing rank file, and why it is missing
  CHECK_THROWS_WITH(read_full_masters(*stale, cfg),
                    Catch::Contains("step_00000001/rank0.bin") &&
                        Catch::Contains("latest.json has moved on to step 2 meanwhile: a live run is saving "
                                        "checkpoints in " +
                                        dir));
  // a resume that read step 1 before it held the directory: refused once it holds it (exit 2),
  // not resumed from a step already trained past
  RunOptions late = resumed_in(dir, 3);
  late.resume_info = stale;
  const RunOutcome o = run_training(cfg, late);
  CHECK(o.status == RunOutcome::Status::Failed);
  CHECK(o.bad_input);
  CHECK_THAT(o.error, Catch::Contains("its checkpoint moved on from step 1 to step 2 while this run started"));
  CHECK(read_checkpoint_info(dir)->step == 2);  // untouched
}

TEST_CASE("checkpoint: a write that fails is a runtime failure naming the file, the old checkpoint kept",
          "[engine][checkpoint]") {
  CHECK_THROWS_WITH(
      [] {
        const std::string dir = fresh_dir("full");
        std::string error;
        REQUIRE(make_dirs(dir, &error));
        // /dev/full answers every write with ENOSPC, as a full disk does.
        REQUIRE(::symlink("/dev/full", join_path(dir, "out.tmp").c_str()) == 0);
        AtomicFile f(join_path(dir, "out"));
        f.write(std::string(4096, 'x'));
        f.commit();
      }(),
      Catch::Contains("disk full"));
  const RunConfig cfg = small_config();
  const std::string dir = checkpointed_run("full_run", cfg, 1);
  const std::string next = join_path(join_path(dir, "checkpoints"), "step_00000002");
  std::string error;
  REQUIRE(make_dirs(next, &error));
  REQUIRE(::symlink("/dev/full", join_path(next, "rank0.bin.tmp").c_str()) == 0);
  const RunOptions opt = resumed_in(dir, 2);
  const RunOutcome o = run_training(cfg, opt);
  CHECK(o.status == RunOutcome::Status::Failed);
  CHECK(!o.bad_input);  // exit 1, not 2
  CHECK_THAT(o.error, Catch::Contains("rank0.bin.tmp") && Catch::Contains("disk full"));
  CHECK(read_checkpoint_info(dir)->step == 1);  // the previous checkpoint still stands

  // A rename that fails (the pointer's name is taken by a directory): also exit 1, never 2.
  const std::string blocked = fresh_dir("rename");
  REQUIRE(make_dirs(join_path(join_path(blocked, "checkpoints"), "latest.json"), &error));
  RunOptions fresh;
  fresh.out_dir = blocked;
  fresh.steps = 1;
  const RunOutcome r = run_training(cfg, fresh);
  CHECK(r.status == RunOutcome::Status::Failed);
  CHECK(!r.bad_input);
  CHECK_THAT(r.error, Catch::Contains("cannot rename") && Catch::Contains("latest.json"));
}
