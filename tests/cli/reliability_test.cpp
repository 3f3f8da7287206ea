// The failures a hostile or unlucky user meets, through the real binary: corrupt checkpoints and
// pointer files, a resume under another shape, two runs into one directory, SIGTERM, a full disk,
// world sizes no process can run, sizes that would overflow the planner, values that once hung
// validation, FIFOs and malformed data files, a data file that shrinks mid-run, export arguments
// out of range, and the help text. Each gets a clear message and its exit code (0 ok, 1 runtime,
// 2 bad input, 128 + signal when stopped), never a crash.
// defines: test cases [cli][reliability]
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cli_test_util.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = std::string(ODYSSEY_BINARY_DIR) + "/reliability_" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

/// A run directory with a checkpoint after 2 steps of the tiny preset.
std::string checkpointed(const std::string& name) {
  const std::string dir = fresh_dir(name);
  require_exit(run_odyssey("train " + kShort + "--set training.steps=6 --steps 2 --quiet --out " + dir), 0);
  return dir;
}

std::string rank_file(const std::string& dir) { return dir + "/checkpoints/step_00000002/rank0.bin"; }

void patch(const std::string& path, size_t offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

/// The entries of `dir`, sorted ("." and ".." left out).
std::vector<std::string> list_dir_names(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("reliability: an allocator setting LibTorch would abort on is refused by odyssey before it loads LibTorch",
          "[cli][reliability]") {
  // LibTorch parses PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF while its libraries load and
  // aborted (SIGABRT, an internal assert) on an item without a value, before odyssey-engine's code.
  const std::string err = fresh_dir("alloc_conf") + ".stderr";
  for (const std::string& bad : {std::string("PYTORCH_CUDA_ALLOC_CONF=expandable_segments"),
                                 std::string("PYTORCH_ALLOC_CONF=expandable_segments:True,max_split_size_mb")}) {
    INFO(bad);
    Run r = run_shell(bad + " " + ODYSSEY_BIN_DIR + "/odyssey train " + kShort + "--steps 1 --quiet 2>" + err);
    r.err = read_text(err);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(bad + ": the item") && Catch::Contains("is not KEY:VALUE"));
  }
  // a well-formed one, lists included, goes through (the CPU run does not use it)
  Run ok = run_shell("PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True,roundup_power2_divisions:[256:1,512:2]' " +
                     std::string(ODYSSEY_BIN_DIR) + "/odyssey train " + kShort + "--steps 1 --quiet --out " +
                     fresh_dir("alloc_conf_run") + " 2>" + err);
  ok.err = read_text(err);
  require_exit(ok, 0);
}

TEST_CASE("reliability: an OMP_NUM_THREADS that OpenMP would ignore is refused before LibTorch loads",
          "[cli][reliability]") {
  // libgomp ignores a malformed value with a warning and runs on every core, while odyssey's own
  // reading took "4x" as 4 threads: the two disagreed. Refused by the LibTorch-free front end.
  const std::string err = fresh_dir("omp_threads") + ".stderr";
  for (const std::string bad : {"abc", "0", "000", "4x", "4,", "", "-1", "2147483648"}) {
    INFO("OMP_NUM_THREADS='" << bad << "'");
    Run r = run_shell("OMP_NUM_THREADS='" + bad + "' " + ODYSSEY_BIN_DIR + "/odyssey train " + kShort +
                      "--steps 1 --quiet 2>" + err);
    r.err = read_text(err);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("odyssey train: OMP_NUM_THREADS=" + bad + ": ") &&
                          Catch::Contains("OpenMP would ignore"));
  }
  // one count per nesting level, in strtoul's spelling (spaces around, "+", leading zeros), goes through
  Run ok = run_shell("OMP_NUM_THREADS=' +1, 001 ' " + std::string(ODYSSEY_BIN_DIR) + "/odyssey train " + kShort +
                     "--steps 1 --quiet --out " + fresh_dir("omp_threads_run") + " 2>" + err);
  ok.err = read_text(err);
  require_exit(ok, 0);
}

TEST_CASE("reliability: an option where a value belongs is refused, never taken as a file's name",
          "[cli][reliability]") {
  // `tune P -o --json` wrote a preset named "--json" and printed text, the option lost. Each
  // command's own parser refuses it (the shared one, eval's, export's, prepare's); the value is
  // still taken written as a path.
  const std::string dir = fresh_dir("option_as_value");
  REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
  const std::string cd = "cd " + dir + " && " + ODYSSEY_BIN_DIR + "/odyssey ";
  const std::string preset = std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml";
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {"tune " + preset + " -o --json", "-o"},
           {"tune " + preset + " -o --", "-o"},
           {"train " + preset + " --steps 1 --out --quiet", "--out"},
           {"eval runs/x --data --json --seq-len 64", "--data"},
           {"export runs/x --hf --json", "--hf"},
           {"prepare in.jsonl --tokenizer t.json --out --overwrite", "--out"}}) {
    INFO(args);
    const Run r = run_shell(cd + args + " 2>&1");
    require_exit(r, 2);
    CHECK_THAT(r.out, Catch::Contains(flag + " needs a value, and the next argument is the option --"));
    CHECK(std::system(("test -z \"$(ls -A " + dir + ")\"").c_str()) == 0);  // nothing written
  }
  require_exit(run_shell(cd + "tune " + preset + " -o ./--json"), 0);
  CHECK(!read_text(dir + "/--json").empty());
}

TEST_CASE("reliability: corrupt checkpoint fields are refused with exit 2, never a signal", "[cli][reliability]") {
  // The first entry ("step") begins at byte 12: name length, "step", then the type code and numel.
  const size_t code_at = 12 + 4 + 4, numel_at = code_at + 4;
  struct Case {
    const char* what;
    size_t offset;
    int64_t value;
    size_t width;
    const char* expect;
  };
  for (const Case& c : {Case{"dtype -1", code_at, -1, 4, "unknown element type code -1"},
                        Case{"dtype 99", code_at, 99, 4, "unknown element type code 99"},
                        Case{"numel -5", numel_at, -5, 8, "claims -5 int64 elements"},
                        Case{"numel 2^36", numel_at, int64_t{1} << 36, 8, "the file is truncated or corrupt"}}) {
    INFO(c.what);
    const std::string dir = checkpointed("corrupt");
    patch(rank_file(dir), c.offset, &c.value, c.width);
    // Found only while the ranks load it, after the run opened its files: they are put back.
    std::vector<std::string> before;
    for (const char* file : {"/summary.json", "/trace.json", "/metrics.jsonl"}) before.push_back(read_text(dir + file));
    const Run r = run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --steps 2 --quiet");
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(rank_file(dir)) && Catch::Contains(c.expect));
    CHECK(r.err.find("Exception raised from") == std::string::npos);  // no LibTorch stack trace
    size_t i = 0;
    for (const char* file : {"/summary.json", "/trace.json", "/metrics.jsonl"}) {
      INFO(file);
      CHECK(read_text(dir + file) == before[i++]);
    }
  }
  {
    // Through a link: the link is kept and the file it leads to put back (the put-back renamed a
    // file over the link, and the trace the link led to stayed cut).
    const std::string dir = checkpointed("corrupt_linked");
    const std::string target = dir + ".trace.json";
    REQUIRE(std::rename((dir + "/trace.json").c_str(), target.c_str()) == 0);
    REQUIRE(::symlink(target.c_str(), (dir + "/trace.json").c_str()) == 0);
    const std::string before = read_text(target);
    const int64_t bad_code = -1;
    patch(rank_file(dir), code_at, &bad_code, 4);
    const Run r = run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --steps 2 --quiet");
    require_exit(r, 2);
    struct stat st {};
    REQUIRE(::lstat((dir + "/trace.json").c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(read_text(target) == before);
  }
  // Weights overwritten with 1e30: the tensor named, exit 2.
  const std::string dir = checkpointed("overwritten");
  struct stat st {};
  REQUIRE(::stat(rank_file(dir).c_str(), &st) == 0);
  const float huge[4] = {1e30f, 1e30f, 1e30f, 1e30f};
  patch(rank_file(dir), static_cast<size_t>(st.st_size) - sizeof huge, huge, sizeof huge);
  const Run r = run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --steps 2 --quiet");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("exp_avg_sq' (#") && Catch::Contains("fails its CRC-32 check"));
}

TEST_CASE("reliability: latest.json with a wrong type or an absurd number names the key and value",
          "[cli][reliability]") {
  const std::string dir = checkpointed("latest");
  const std::string latest = dir + "/checkpoints/latest.json";
  const std::string good = read_text(latest);
  for (const auto& [value, shown] : std::vector<std::pair<std::string, std::string>>{{"\"ten\"", "\"step\" = \"ten\""},
                                                                                     {"1e300", "\"step\" = 1e+300"}}) {
    std::string text = good;
    text.replace(text.find("\"step\":2"), 8, "\"step\":" + value);
    std::ofstream(latest, std::ios::trunc) << text;
    const Run r = run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --quiet");
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(shown + ": must be a whole number"));
  }
  // Beyond a double: nlohmann's out_of_range (not a parse_error) escaped the parser, and the
  // message (its bare "[json.exception.out_of_range.406] ...") named no file.
  std::string text = good;
  text.replace(text.find("\"step\":2"), 8, "\"step\":1e400");
  std::ofstream(latest, std::ios::trunc) << text;
  const Run r = run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --quiet");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(latest) && Catch::Contains("number overflow parsing '1e400'"));
}

TEST_CASE("reliability: resume refuses another shape and states every other change first", "[cli][reliability]") {
  const std::string dir = checkpointed("reshape");
  Run r = run_odyssey("train " + kShort + "--set training.steps=6 --set model.n_layers=2 --resume " + dir + " --quiet");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("model.n_layers = 4 -> 2"));
  r = run_odyssey("train " + kShort + "--set training.steps=6 --set training.lr=0.002 --set training.seed=9 --resume " +
                  dir + " --steps 1");
  require_exit(r, 0);
  // The differences come before the first step's line.
  const size_t lr = r.out.find("resume: training.lr = 0.005 -> 0.002");  // tiny-cpu.toml: lr = 5e-3
  const size_t seed = r.out.find("resume: training.seed = 1234 -> 9");
  const size_t step = r.out.find("step 3/3");
  CHECK(lr != std::string::npos);
  CHECK(seed != std::string::npos);
  REQUIRE(step != std::string::npos);
  CHECK(lr < step);
  CHECK(seed < step);
}

TEST_CASE("reliability: a second run into a busy directory is refused with the owner's pid", "[cli][reliability]") {
  const std::string dir = fresh_dir("busy");
  const pid_t first = spawn_odyssey(
      "train " + kShort + "--set training.steps=100000 --set output.checkpoint_every=1 --quiet --out " + dir,
      dir + ".log");
  REQUIRE(wait_for_checkpoint(first, dir, 1));
  const std::string metrics_before = read_text(dir + "/metrics.jsonl");
  const Run second = run_odyssey("train " + kShort + "--set training.steps=3 --quiet --out " + dir);
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  require_exit(second, 2);
  CHECK_THAT(second.err, Catch::Contains("is in use by another run (pid " + std::to_string(first)));
  CHECK(read_text(dir + "/metrics.jsonl").rfind(metrics_before, 0) == 0);  // the first run's lines intact
}

TEST_CASE("reliability: SIGTERM checkpoints and exits 143, a full disk is a runtime failure (exit 1)",
          "[cli][reliability]") {
  const std::string dir = fresh_dir("sigterm");
  const pid_t pid = spawn_odyssey(
      "train " + kShort + "--set training.steps=100000 --set output.checkpoint_every=3 --quiet --out " + dir,
      dir + ".log");
  REQUIRE(wait_for_checkpoint(pid, dir, 3));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO(read_text(dir + ".log"));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 143);  // 128 + SIGTERM
  CHECK_THAT(read_text(dir + ".log"), Catch::Contains("SIGTERM: stopping at the next step boundary with a checkpoint"));
  // Nothing since the last checkpoint is lost: the checkpoint holds every step metrics.jsonl has.
  CHECK(checkpoint_step(dir) == metrics_lines(dir));
  CHECK(checkpoint_step(dir) >= 3);

  // /dev/full answers writes with ENOSPC, as a full disk does: the checkpoint write fails.
  const std::string full = fresh_dir("disk_full");
  REQUIRE(std::system(("mkdir -p " + full + "/checkpoints/step_00000001 && ln -s /dev/full " + full +
                       "/checkpoints/step_00000001/rank0.bin.tmp")
                          .c_str()) == 0);
  const Run r = run_odyssey("train " + kShort + "--set training.steps=1 --quiet --out " + full);
  require_exit(r, 1);
  CHECK_THAT(r.err, Catch::Contains("rank0.bin.tmp") && Catch::Contains("disk full"));
}

TEST_CASE("reliability: more in-process ranks than a process tracks is refused before any output",
          "[cli][reliability]") {
  const std::string dir = fresh_dir("world65");
  const Run r = run_odyssey(
      "train presets/tiny-cpu.toml --set parallel.world_size=65 --set parallel.ulysses_degree=1 "
      "--set memory.heads_per_stage=0 --steps 1 --quiet --out " +
      dir);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("parallel.world_size = 65: one process runs at most 64 rank threads"));
  CHECK(read_text(dir + "/metrics.jsonl").empty());
  CHECK(read_text(dir + "/summary.json").empty());
}

TEST_CASE("reliability: sizes out of their physical range are refused, nothing overflows or hangs",
          "[cli][reliability]") {
  Run r = run_odyssey("plan presets/llama3-8b-3m-8xh100.toml --set hardware.device_memory_gib=9e9");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("hardware.device_memory_gib = 9e+09: must be a number of GiB in (0, 65536]"));
  r = run_odyssey("plan presets/llama3-8b-3m-8xh100.toml --set hardware.runtime_overhead_gib=1e10");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("hardware.runtime_overhead_gib = 1e+10: must be a number of GiB in [0, 65536]"));
  // In range but beyond any machine: the planner's saturating arithmetic says so instead of wrapping,
  // and a total at its ceiling stays there through the frees after it (phases once went negative)
  for (const char* extra : {"--set memory.tiled_loss=false", "--set model.n_layers=1024"}) {
    INFO(extra);
    r = run_odyssey(
        "plan presets/llama3-8b-3m-8xh100.toml --set training.batch_size=65536 --set training.seq_len=16G --json " +
        std::string(extra));
    require_exit(r, 0);
    auto plan = parse_json(r.out);
    REQUIRE(plan.has_value());
    CHECK(plan->at("beyond_range").get<bool>());
    CHECK_FALSE(plan->at("fits").get<bool>());
    const int64_t peak = plan->at("peak_bytes").get<int64_t>();
    CHECK(peak > 0);
    // the peak is the ceiling, a lower bound: no category passes it, and no overhead is taken off it
    for (const auto& [category, bytes] : plan->at("categories").items()) {
      INFO(category);
      CHECK(bytes.get<int64_t>() >= 0);
      CHECK(bytes.get<int64_t>() <= peak);
    }
    CHECK(plan->at("tensor_peak_bytes").get<int64_t>() == peak);
    for (const auto& phase : plan->at("phases")) {
      INFO(phase.at("name").get<std::string>());
      CHECK(phase.at("resident_bytes").get<int64_t>() >= 0);
      CHECK(phase.at("host_bytes").get<int64_t>() >= 0);
      for (const auto& [category, bytes] : phase.at("categories").items()) CHECK(bytes.get<int64_t>() >= 0);
    }
  }
  // In text the total, and a category at the ceiling, read "beyond 4 EiB", not a figure the categories
  // above the total pass; a model whose "other" category alone passed the ceiling holds it there.
  for (const char* extra : {"", " --set model.d_model=65536 --set model.n_heads=64 --set model.n_kv_heads=8"}) {
    INFO(extra);
    r = run_odyssey(
        "plan presets/llama3-8b-5m-8xh100-untied.toml --set training.batch_size=65536 --set training.seq_len=16G" +
        std::string(extra));
    require_exit(r, 0);
    CHECK_THAT(r.out, Catch::Contains("Peak beyond 4 EiB of 79.10 GiB per device"));
    CHECK_THAT(r.out, Catch::Contains("device total           beyond 4 EiB"));
    CHECK_THAT(r.out, Catch::Contains("offloaded              beyond 4 EiB  (host, per rank)"));
    CHECK_THAT(r.out, !Catch::Contains("4294967296.00"));  // no term or phase prints the ceiling as a figure
  }
  // A huge head count once computed its hint's divisors one by one for an hour.
  const auto t0 = std::chrono::steady_clock::now();
  r = run_odyssey("check presets/qwen3-32b-16xh100.toml --set model.n_heads=1099511627776");
  require_exit(r, 2);
  CHECK(seconds_since(t0) < 5);
  CHECK_THAT(r.err, Catch::Contains("model.n_heads = 1099511627776: must be between 1 and 4096"));
}

TEST_CASE("reliability: FIFOs and malformed token files are refused at once", "[cli][reliability]") {
  const std::string fifo = std::string(ODYSSEY_BINARY_DIR) + "/reliability_fifo";
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  auto t0 = std::chrono::steady_clock::now();
  Run r = run_odyssey("train " + kShort +
                      "--set training.dataset=bytes --set model.vocab_size=256 "
                      "--set training.dataset_path=" +
                      fifo + " --quiet --out " + fresh_dir("fifo_data"));
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("not a regular file"));
  CHECK(seconds_since(t0) < 10);
  t0 = std::chrono::steady_clock::now();
  r = run_odyssey("check " + fifo);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("is not a regular file"));
  CHECK(seconds_since(t0) < 5);

  // An llm.c token file whose body is longer than its header's count.
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = 200;
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  bytes += std::string(2 * 300, '\1');  // 300 tokens of value 257: fine for vocab 512
  const std::string tokens = write_file("tokens.bin", bytes);
  r = run_odyssey("train " + kShort +
                  "--set training.dataset=tokens --set model.vocab_size=512 --set training.dataset_path=" + tokens +
                  " --quiet --out " + fresh_dir("trailing"));
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("the header says 200 tokens") && Catch::Contains("200 bytes would be ignored") &&
                        Catch::Contains("the body holds 300 tokens"));
}

TEST_CASE("reliability: odyssey --help keeps every command apart from its description", "[cli][reliability]") {
  const Run r = run_odyssey("--help");
  require_exit(r, 0);
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  int commands = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("  odyssey ", 0) != 0) continue;
    ++commands;
    INFO(lines[i]);
    // The summary starts in column 62 after at least two spaces, or on the next line there.
    const bool same_line = lines[i].size() > 62 && lines[i].compare(60, 2, "  ") == 0 && lines[i][62] != ' ';
    const bool next_line = i + 1 < lines.size() && lines[i + 1].size() > 62 &&
                           lines[i + 1].compare(0, 62, std::string(62, ' ')) == 0 && lines[i + 1][62] != ' ';
    CHECK((same_line || next_line));
  }
  CHECK(commands >= 7);
}

TEST_CASE("reliability: each command's --help names every option it takes", "[cli][reliability]") {
  // The README sends users to `odyssey COMMAND --help` for every option. Each flag below is both in
  // the command's help and taken by the command (given alone, it is never an unknown option: the
  // command stops at a missing argument or value instead, before any work).
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"check", {"--set", "--json"}},
      {"plan", {"--set", "--json"}},
      {"ladder", {"--set", "--json"}},
      {"maxlen", {"--set", "--json"}},
      {"tune", {"--set", "-o", "--overwrite", "--json"}},
      {"train",
       {"--set", "--steps", "--out", "--resume", "--overwrite", "--force", "--no-checkpoint", "--memory-snapshot",
        "--kernel-profile", "--quiet"}},
      {"bench", {"--set", "--steps", "--json", "--quiet"}},
      {"schema", {"--markdown", "--json", "--techniques-markdown", "--tensor-kinds-markdown"}},
      {"prepare", {"--tokenizer", "--preset", "--set", "--out", "--append-eos", "--overwrite", "--json"}},
      {"eval",
       {"--data", "--seq-len", "--preset", "--set", "--json", "--out", "--overwrite", "--tokenizer", "--trials",
        "--seed", "--first-bucket", "--needle-min", "--max-sequences", "--no-needle", "--quiet"}},
      {"export", {"--hf", "--dtype", "--max-shard-size", "--tokenizer", "--json"}},
  };
  // `flag` as a word of the help: between spaces, brackets, parentheses, bars or line ends
  auto names_flag = [](const std::string& text, const std::string& flag) {
    const std::string before = " [(|\n", after = " ])|\n";
    for (size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
      const size_t end = at + flag.size();
      if ((at == 0 || before.find(text[at - 1]) != std::string::npos) &&
          (end == text.size() || after.find(text[end]) != std::string::npos))
        return true;
    }
    return false;
  };
  for (const auto& [command, flags] : commands) {
    const Run help = run_odyssey(command + " --help");
    require_exit(help, 0);
    for (const std::string& flag : flags) {
      INFO("odyssey " << command << " " << flag);
      CHECK(names_flag(help.out, flag));
      if (command == "schema") continue;  // a flag of schema prints the schema: taken, as the help says
      const Run alone = run_odyssey(command + " " + flag);
      CHECK(alone.code != 0);  // nothing to work on
      CHECK_THAT(alone.err, !Catch::Contains("unknown option " + flag) && !Catch::Contains("unknown argument " + flag));
    }
  }
  // After "--" an argument is a name, "-h" too: a preset named -h is looked for, no help printed
  const Run named = run_odyssey("plan -- -h");
  require_exit(named, 2);
  CHECK(named.out.empty());
  CHECK_THAT(named.err, Catch::Contains("-h: cannot open"));
}

TEST_CASE("reliability: --memory-snapshot on a CPU run is refused before any output", "[cli][reliability]") {
  // It records the CUDA caching allocator's history; a CPU run has none to record.
  const std::string dir = fresh_dir("snapshot_cpu");
  const Run r = run_odyssey("train " + kShort + "--steps 1 --memory-snapshot " + dir + "/x.pickle --out " + dir);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--memory-snapshot " + dir + "/x.pickle: it records the CUDA caching allocator"));
  CHECK(read_text(dir + "/metrics.jsonl").empty());
}

TEST_CASE("reliability: a data file that shrinks during training fails the run (exit 1) with its trace and summary",
          "[cli][reliability]") {
  // Memory-mapped, the first read past the new end killed the run with SIGBUS: no summary.json, a
  // 0-byte trace.json. Truncated to nothing after step 1, every later read of it fails, so the
  // run ends at step 2 or 3 whatever the timing.
  std::string text;
  for (int i = 0; text.size() < (1 << 20); ++i) text += "line " + std::to_string(i) + " of a long text file\n";
  const std::string data = write_file("shrinking.txt", text);
  const std::string dir = fresh_dir("shrinking");
  const pid_t pid = spawn_odyssey("train " + kShort +
                                      "--set training.dataset=bytes --set model.vocab_size=256 "
                                      "--set training.dataset_path=" +
                                      data + " --set training.steps=100000 --out " + dir,
                                  dir + ".log");
  bool stepped = false;
  for (int i = 0; i < 12000 && !stepped; ++i) {  // 120 s at most
    stepped = metrics_lines(dir) >= 1;
    if (!stepped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(::truncate(data.c_str(), 0) == 0);
  const auto status = wait_exit(pid, 120);
  if (!status) kill(pid, SIGKILL);
  const std::string log = read_text(dir + ".log");
  INFO(log);
  REQUIRE(stepped);
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));  // not killed by a signal
  CHECK(WEXITSTATUS(*status) == 1);
  CHECK_THAT(log, Catch::Contains(data) && Catch::Contains("changed size during the run"));
  const auto summary = parse_json(read_text(dir + "/summary.json"));
  REQUIRE(summary.has_value());
  CHECK(summary->at("status").get<std::string>() == "failed");
  CHECK_THAT(summary->at("error").get<std::string>(), Catch::Contains("changed size during the run"));
  CHECK(parse_json(read_text(dir + "/trace.json")).has_value());
}

TEST_CASE(
    "reliability: export refuses overflowing shard sizes, a flag given twice, a file as --hf, a directory as a "
    "tokenizer file and a tokenizer directory without one, and takes --flag=value and trailing slashes",
    "[cli][reliability]") {
  const std::string run = checkpointed("export_args");
  const std::string root = fresh_dir("export_args_out");
  REQUIRE(std::system(("mkdir -p '" + root + "'").c_str()) == 0);
  // 9300000000GB is 9.3e18 bytes: past int64, it wrapped negative and wrote one tensor per file.
  for (const std::string& size :
       {std::string("9300000000GB"), std::string("=99999999999999999999"), std::string("0")}) {
    const std::string arg = size[0] == '=' ? "--max-shard-size" + size : "--max-shard-size " + size;
    const Run r = run_odyssey("export " + run + " --hf " + root + "/a " + arg);
    INFO(arg);
    require_exit(r, 2);
    CHECK_THAT(r.err,
               Catch::Contains("must be a positive size") && Catch::Contains("at most 9223372036854775807 bytes"));
  }
  CHECK(list_dir_names(root).empty());
  // The sizes transformers' max_shard_size reads (KiB, MiB, GiB; any case; a lowercase b counts
  // bits), and a 19-digit count of bytes within int64: once refused with a message naming the
  // very limit they are within.
  for (const std::string& size : {std::string("9223372036854775807"), std::string("1kib"), std::string("8Kb")}) {
    INFO(size);
    const std::string out = root + "/sized_" + std::to_string(list_dir_names(root).size());
    require_exit(run_odyssey("export " + run + " --hf " + out + " --max-shard-size " + size), 0);
  }
  REQUIRE(std::system(("rm -rf '" + root + "'/sized_* && mkdir -p '" + root + "'").c_str()) == 0);
  CHECK(list_dir_names(root).empty());
  // A value flag given twice names both values; the last no longer wins silently.
  Run twice = run_odyssey("export " + run + " --hf " + root + "/a --dtype bfloat16 --dtype=float32");
  require_exit(twice, 2);
  CHECK_THAT(twice.err, Catch::Contains("--dtype given twice (bfloat16, then float32): give it once"));
  CHECK(list_dir_names(root).empty());
  // --flag=value as every other subcommand takes it, and OUT/ staged beside OUT, not inside it.
  Run r = run_odyssey("export " + run + " --hf=" + root + "/b/ --max-shard-size=1KB --json");
  require_exit(r, 0);
  const auto done = parse_json(r.out);
  REQUIRE(done.has_value());
  CHECK(done->at("files").size() > 2);  // sharded at 1 KB, with an index
  // a flavor's run carries no tokenizer: said, with how to add one (it exported without a word)
  CHECK_THAT(r.err, Catch::Contains("no tokenizer exported") && Catch::Contains("--tokenizer DIR"));
  CHECK(list_dir_names(root) == std::vector<std::string>{"b"});
  CHECK(std::ifstream(root + "/b/config.json").good());
  // A regular file where the output directory belongs.
  const std::string file = write_file("export_target", "not a directory");
  r = run_odyssey("export " + run + " --hf " + file);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(file + " exists and is a file, not a directory"));
  CHECK(read_text(file) == "not a directory");
  // tokenizer.json that is a directory: once exported as an empty file.
  REQUIRE(std::system(("mkdir -p '" + root + "/tok/tokenizer.json'").c_str()) == 0);
  r = run_odyssey("export " + run + " --hf " + root + "/c --tokenizer=" + root + "/tok");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(root + "/tok/tokenizer.json") && Catch::Contains("is a directory"));
  CHECK(list_dir_names(root) == std::vector<std::string>{"b", "tok"});
  // A directory with no tokenizer in it: refused, not an export without one.
  REQUIRE(std::system(("mkdir -p '" + root + "/empty_tok'").c_str()) == 0);
  r = run_odyssey("export " + run + " --hf " + root + "/d --tokenizer " + root + "/empty_tok");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--tokenizer " + root + "/empty_tok: holds no tokenizer.json or tokenizer.model"));
  CHECK(list_dir_names(root) == std::vector<std::string>{"b", "empty_tok", "tok"});
  // What is named instead of a run directory is said as such, not as "has no checkpoint".
  const struct {
    std::string named, says;
  } not_runs[] = {
      {root + "/nowhere", root + "/nowhere does not exist"},
      {file, file + " is a file, not a run directory"},
      {run + "/checkpoints/step_" + std::string("00000002"),
       "is a checkpoint's folder: name the run directory, " + run},
      {root + "/b", root + "/b is a Hugging Face model directory already"},
  };
  for (const auto& c : not_runs) {
    INFO(c.named);
    r = run_odyssey("export " + c.named + " --hf " + root + "/e");
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(c.says));
  }
  r = run_odyssey("export " + run + " --hf " + root + "/e --tokenizer " + root + "/no_tok");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--tokenizer " + root + "/no_tok: does not exist"));
  CHECK(list_dir_names(root) == std::vector<std::string>{"b", "empty_tok", "tok"});
}
