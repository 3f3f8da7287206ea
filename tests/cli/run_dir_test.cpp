// What `odyssey train` does with its run directory and with runs it should not start, through the
// real binary: an earlier run is never overwritten unasked (--overwrite, --resume; every torchrun
// process refuses with rank 0), --out paths in every spelling and depth, a busy --resume, outputs
// the disk refused, a plan that does not fit (--force), a signal while loading, and the files
// --kernel-profile may write, links and FIFOs planted where it writes, a file size limit.
// defines: test cases [cli][reliability][rundir]
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "cli_test_util.h"

using namespace odyssey;
using namespace odyssey::test;

TEST_CASE("run directory: a new run into one holding a run is refused and leaves it whole, --overwrite replaces it",
          "[cli][reliability][rundir]") {
  const std::string dir = fresh_dir("holds_run");
  require_exit(run_odyssey("train " + kShort + "--set training.steps=6 --steps 3 --quiet --out " + dir), 0);
  const std::string metrics = read_text(dir + "/metrics.jsonl"), summary = read_text(dir + "/summary.json");
  REQUIRE(metrics_lines(dir) == 3);
  REQUIRE(checkpoint_step(dir) == 3);

  // Into --out, and into the preset's own output.dir: both refused, nothing changed.
  for (const std::string& where : {"--out " + dir, "--set output.dir=" + dir, "--out " + dir + "//"}) {
    INFO(where);
    const Run r = run_odyssey("train " + kShort + "--set training.steps=6 --steps 1 --quiet " + where);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("--out " + dir +
                                      " holds a run (metrics.jsonl with 3 steps, a checkpoint at step 3, "
                                      "summary.json, trace.json): continue it with --resume " +
                                      dir + ", choose another --out, or pass --overwrite to replace it"));
    CHECK(read_text(dir + "/metrics.jsonl") == metrics);
    CHECK(read_text(dir + "/summary.json") == summary);
    CHECK(checkpoint_step(dir) == 3);
  }
  // --resume into its own directory continues it.
  require_exit(run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --steps 1 --quiet"), 0);
  CHECK(metrics_lines(dir) == 4);
  CHECK(checkpoint_step(dir) == 4);
  // --resume elsewhere into a directory holding a run is refused like a fresh run.
  const std::string other = fresh_dir("holds_run_other");
  require_exit(run_odyssey("train " + kShort + "--set training.steps=6 --steps 1 --quiet --out " + other), 0);
  Run r =
      run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --steps 1 --quiet --out " + other);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out " + other + " holds a run"));
  // --overwrite: the earlier run's files are replaced, and the run says what it replaced.
  r = run_odyssey("train " + kShort + "--set training.steps=6 --steps 1 --overwrite --out " + dir);
  require_exit(r, 0);
  CHECK_THAT(r.out, Catch::Contains("--overwrite: replaced the run in " + dir + " (metrics.jsonl with 4 steps"));
  CHECK(metrics_lines(dir) == 1);
  CHECK(checkpoint_step(dir) == 1);
  // A data file among the run's own files: --overwrite removed it with the run, then refused the
  // run for it, losing both. Refused first now, the run and the file whole.
  const std::string steps_before = read_text(dir + "/metrics.jsonl");
  r = run_odyssey("train " + kShort + "--set training.dataset=bytes --set training.dataset_path=" + dir +
                  "/metrics.jsonl --steps 1 --overwrite --out " + dir);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("training.dataset_path = \"" + dir + "/metrics.jsonl\" is the run's own " +
                                    "metrics.jsonl in --out " + dir + ", which this run writes"));
  CHECK(read_text(dir + "/metrics.jsonl") == steps_before);
  CHECK(checkpoint_step(dir) == 1);
  // A device the machine lacks (CUDA_VISIBLE_DEVICES empty hides every GPU, on any host), on one
  // rank or emulated: refused before --overwrite touches the run. It was looked for only once the
  // ranks started, after the run was removed (emulated, as a rank's runtime failure, exit 1).
  {
    // restored however the block ends (a failed REQUIRE throws): later cases see the GPUs again
    struct HiddenGpus {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      const std::string saved = visible ? visible : "";
      HiddenGpus() { ::setenv("CUDA_VISIBLE_DEVICES", "", 1); }
      ~HiddenGpus() {
        if (visible)
          ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
        else
          ::unsetenv("CUDA_VISIBLE_DEVICES");
      }
    } hidden;
    for (const std::string ranks :
         {"--set parallel.world_size=1 --set parallel.ulysses_degree=1 ", "--set parallel.emulate=true "}) {
      INFO(ranks);
      r = run_odyssey("train " + kShort + ranks + "--set training.device=cuda --steps 1 --overwrite --out " + dir);
      require_exit(r, 2);
      CHECK_THAT(r.err, Catch::Contains("training.device = \"cuda\" but no CUDA device is available"));
      CHECK(read_text(dir + "/metrics.jsonl") == steps_before);
      CHECK(checkpoint_step(dir) == 1);
    }
  }
  // A switch given a value is refused, not read as on.
  r = run_odyssey("train " + kShort + "--steps 1 --overwrite=no --out " + dir);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--overwrite takes no value"));
}

TEST_CASE("run directory: under torchrun, rank 0's refusal of --out ends every process at once with its reason",
          "[cli][reliability][rundir]") {
  // Rank 0's process alone checks and locks --out. The other processes used to wait for it on the
  // job's store until parallel.timeout_s (twice over) and end with the store's stack trace; now the
  // processes agree before any starts, so each exits 2 well inside the 120 s timeout.
  const std::string dir = fresh_dir("holds_run_torchrun");
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --out " + dir), 0);
  const std::string metrics = read_text(dir + "/metrics.jsonl"), summary = read_text(dir + "/summary.json");
  const std::vector<pid_t> pids = spawn_torchrun(
      "train " + kShort + "--set parallel.world_size=2 --set parallel.timeout_s=120 --steps 1 --quiet --out " + dir,
      dir);
  const std::vector<std::string> logs = require_ranks_exit(pids, dir, 2, 60);
  CHECK_THAT(logs[0], Catch::Contains("--out " + dir + " holds a run"));
  CHECK_THAT(logs[1], Catch::Contains("rank 0 refused to start: --out " + dir + " holds a run"));
  CHECK(read_text(dir + "/metrics.jsonl") == metrics);
  CHECK(read_text(dir + "/summary.json") == summary);

  // A --resume only rank 0's process finds (another node without the checkpoint: rank 0 writes
  // latest.json); the shell gives rank 1 a path that holds none. Rank 1 refuses before its run
  // starts and tells rank 0, which used to wait for it until the timeout.
  const std::string two = fresh_dir("holds_run_torchrun_two");
  const std::string job = "train " + kShort + "--set parallel.world_size=2 --set parallel.timeout_s=120 --quiet ";
  require_exit(run_odyssey(job + "--set training.steps=4 --steps 1 --out " + two), 0);
  const std::string two_metrics = read_text(two + "/metrics.jsonl");
  const std::vector<pid_t> resumed =
      spawn_torchrun(job + "--set training.steps=4 --steps 1 --resume $([ \"$RANK\" = 1 ] && echo " + two +
                         "_elsewhere || echo " + two + ")",
                     two);
  const std::vector<std::string> resume_logs = require_ranks_exit(resumed, two, 2, 60);
  CHECK_THAT(resume_logs[0], Catch::Contains("rank 1 refused to start: --resume " + two + "_elsewhere: no checkpoint"));
  CHECK_THAT(resume_logs[1], Catch::Contains("--resume " + two + "_elsewhere: no checkpoint there"));
  CHECK(read_text(two + "/metrics.jsonl") == two_metrics);
}

TEST_CASE(
    "run directory: leftover checkpoints or a lone trace.json count as a run, and a finished run resumes with --steps",
    "[cli][reliability][rundir]") {
  // A step folder without latest.json (a run killed in its first checkpoint) was removed unasked.
  const std::string leftover = fresh_dir("leftover_checkpoint");
  REQUIRE(std::system(("mkdir -p " + leftover + "/checkpoints/step_00000007 && echo kept > " + leftover +
                       "/checkpoints/step_00000007/rank0.bin && mkdir -p " + leftover + "_trace && echo kept > " +
                       leftover + "_trace/trace.json")
                          .c_str()) == 0);
  Run r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + leftover);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out " + leftover + " holds a run (checkpoints/ without latest.json)"));
  CHECK(read_text(leftover + "/checkpoints/step_00000007/rank0.bin") == "kept\n");
  r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + leftover + "_trace");
  require_exit(r, 2);
  // without a checkpoint, --resume (which would refuse) is not offered
  CHECK_THAT(r.err, Catch::Contains("holds a run (trace.json): it has no checkpoint to continue from: choose "
                                    "another --out, or pass --overwrite to replace it"));
  CHECK(read_text(leftover + "_trace/trace.json") == "kept\n");

  // A finished run resumed without --steps has nothing to train: refused, its summary kept (it
  // was rewritten as a run of 0 steps).
  const std::string done = fresh_dir("finished_resume");
  require_exit(run_odyssey("train " + kShort + "--set training.steps=2 --quiet --out " + done), 0);
  const std::string summary = read_text(done + "/summary.json");
  r = run_odyssey("train " + kShort + "--set training.steps=2 --quiet --resume " + done);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--resume " + done +
                                    ": its checkpoint is at step 2, and this run ends at step 2 (training.steps): "
                                    "nothing to train; --steps N trains N more steps"));
  CHECK(read_text(done + "/summary.json") == summary);
  // --steps past training.steps runs, and says the schedule has ended.
  r = run_odyssey("train " + kShort + "--set training.steps=2 --resume " + done + " --steps 1");
  require_exit(r, 0);
  CHECK_THAT(r.out, Catch::Contains("past training.steps = 2"));
  CHECK(metrics_lines(done) == 3);
}

TEST_CASE("run directory: --kernel-profile never replaces a file unasked, nor the run's own files",
          "[cli][reliability][rundir]") {
  const std::string base = fresh_dir("profile_file");
  REQUIRE(std::system(("mkdir -p " + base + "/folder && echo kept > " + base + "/existing.json").c_str()) == 0);
  struct Case {
    std::string path, expect;
  };
  // Each refused before any output: no run directory is made.
  for (const Case& c : {Case{base + "/existing.json", "exists: pass --overwrite to replace it"},
                        Case{base + "/run/metrics.jsonl", "is the run's own metrics.jsonl in " + base + "/run"},
                        Case{base + "/run/checkpoints/latest.json", "is the run's own checkpoints in"},
                        Case{base + "/folder", "is a directory"},
                        Case{"presets/tiny-cpu.toml", "is the preset presets/tiny-cpu.toml"}}) {
    INFO(c.path);
    const Run r =
        run_odyssey("train " + kShort + "--steps 1 --quiet --out " + base + "/run --kernel-profile " + c.path);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("--kernel-profile " + c.path + " " + c.expect) ||
                          Catch::Contains("--kernel-profile " + c.path + ": " + c.expect));
    CHECK_FALSE(std::ifstream(base + "/run/metrics.jsonl").good());
  }
  CHECK(read_text(base + "/existing.json") == "kept\n");
  // The run writes summary.json where a link there leads: the profile named by the link (to no file
  // yet) was written, then replaced by the summary, the link and the profile lost, exit 0.
  const std::string linked = base + "/linked_run";
  REQUIRE(std::system(
              ("mkdir -p " + linked + " && ln -s ../summary_target.json " + linked + "/summary.json").c_str()) == 0);
  Run r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + linked + " --kernel-profile " + base +
                      "/summary_target.json");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--kernel-profile " + base + "/summary_target.json is the run's own summary.json"));
  r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + base + "/run --kernel-profile=");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--kernel-profile needs a file name, got an empty value"));
  // A value flag given twice is refused, naming both values; the last no longer wins silently.
  r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + base + "/a --out " + base + "/b");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out given twice (" + base + "/a, then " + base + "/b): give it once"));
  r = run_odyssey("train " + kShort + "--steps 1 --steps=2 --quiet --out " + base + "/a");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--steps given twice (1, then 2)"));
}

TEST_CASE(
    "run directory: --out naming a file, too deep a path, or an empty value is bad input (exit 2), never a signal",
    "[cli][reliability][rundir]") {
  const std::string base = fresh_dir("bad_out");
  REQUIRE(std::system(("mkdir -p " + base + " && echo x > " + base + "/file").c_str()) == 0);
  Run r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + base + "/file");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out: cannot create directory " + base + "/file: a file of that name is there"));
  r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + base + "/file/sub");
  require_exit(r, 2);
  // 30,000 levels (60 KB): the recursive mkdir overflowed the stack; now refused before any mkdir.
  std::string deep = base;
  for (int i = 0; i < 30000; ++i) deep += "/d";
  r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + deep);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("longer than the system's path limit"));
  CHECK_FALSE(std::ifstream(base + "/d").good());
  r = run_odyssey("train " + kShort + "--steps 1 --quiet --out=");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out needs a directory"));
  // The spellings of one directory: trailing and doubled slashes, --out=DIR.
  const std::string spelled = fresh_dir("spelled");
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --out=" + spelled + "//"), 0);
  CHECK(metrics_lines(spelled) == 1);
}

TEST_CASE("run directory: --resume from a run still writing checkpoints is refused with its owner",
          "[cli][reliability][rundir]") {
  // The CLI and each rank read latest.json separately; a live run moving it between those reads
  // made a resumed run load a later step than it planned and run zero steps with exit 0.
  const std::string dir = fresh_dir("live_resume");
  const pid_t live = spawn_odyssey(
      "train " + kShort + "--set training.steps=100000 --set output.checkpoint_every=1 --quiet --out " + dir,
      dir + ".log");
  REQUIRE(wait_for_checkpoint(live, dir, 2));
  const Run r = run_odyssey("train " + kShort + "--set training.steps=100000 --resume " + dir +
                            " --steps 2 --quiet --out " + fresh_dir("live_resume_copy"));
  kill(live, SIGKILL);
  waitpid(live, nullptr, 0);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--resume " + dir + " is in use by a live run (pid " + std::to_string(live)));
}

TEST_CASE("run directory: a trace or summary the disk refuses fails the run (exit 1)", "[cli][reliability][rundir]") {
  // /dev/full answers every write with ENOSPC, as a full disk does.
  for (const char* file : {"trace.json", "summary.json.tmp"}) {
    INFO(file);
    const std::string dir = fresh_dir(std::string("full_") + file);
    REQUIRE(std::system(("mkdir -p " + dir + " && ln -s /dev/full " + dir + "/" + file).c_str()) == 0);
    const Run r = run_odyssey("train " + kShort + "--steps 1 --no-checkpoint --quiet --out " + dir);
    require_exit(r, 1);
    CHECK_THAT(r.err, Catch::Contains(std::string(file) == "trace.json" ? "trace" : "summary"));
    CHECK_THAT(r.err, Catch::Contains("No space left on device"));
    // said once: as the run's error, not also as a log line before it
    CHECK(r.err.find("No space left on device") == r.err.rfind("No space left on device"));
  }
}

TEST_CASE("run directory: a trace linked to /dev/null is discarded, the run whole", "[cli][reliability][rundir]") {
  // The trace is cut at its end when it closes (a resumed trace drops its old closing lines): a
  // character device has no length to cut, and its truncation failing once failed the run.
  const std::string dir = fresh_dir("null_trace");
  REQUIRE(std::system(("mkdir -p " + dir + " && ln -s /dev/null " + dir + "/trace.json").c_str()) == 0);
  const Run r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + dir);
  require_exit(r, 0);
  CHECK(r.err.empty());
  struct stat st {};
  CHECK(::stat((dir + "/summary.json").c_str(), &st) == 0);
  CHECK(::stat((dir + "/checkpoints/latest.json").c_str(), &st) == 0);
  // Resumed, it is discarded still (the resume refused it: "is not a regular file").
  const Run resumed = run_odyssey("train " + kShort + "--steps 1 --quiet --resume " + dir);
  require_exit(resumed, 0);
  REQUIRE(::lstat((dir + "/trace.json").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
}

TEST_CASE("run directory: a resumed trace is written through its link, as the first run wrote it",
          "[cli][reliability][rundir]") {
  // The resume replaced the link by a file of its own: the trace the link led to stayed the first
  // run's, and the next run's went elsewhere than the user had sent it.
  const std::string dir = fresh_dir("linked_trace");
  const std::string target = dir + ".trace.json";
  std::remove(target.c_str());
  REQUIRE(std::system(("mkdir -p " + dir + " && ln -s " + target + " " + dir + "/trace.json").c_str()) == 0);
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --out " + dir), 0);
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --resume " + dir), 0);  // one step more
  struct stat st {};
  REQUIRE(::lstat((dir + "/trace.json").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  const auto trace = parse_json(read_text(target));
  REQUIRE(trace.has_value());
  std::set<int64_t> steps;
  for (const Json& e : trace->at("traceEvents"))
    if (e.at("ph") == "C" && e.at("name") == "step") steps.insert(e.at("args").at("step").get<int64_t>());
  CHECK(steps == std::set<int64_t>{1, 2});
}

TEST_CASE("run directory: metrics.jsonl and summary.json go where their links lead, even links to no file yet",
          "[cli][reliability][rundir]") {
  // A link that led nowhere yet counted as an earlier run's output (the run refused: "holds a run
  // (metrics.jsonl with 0 steps)"); a resume replaced a linked metrics.jsonl by a file of its own;
  // metrics.jsonl linked to /dev/null failed the run at its checkpoint (fsync of a device).
  const std::string dir = fresh_dir("linked_metrics");
  const std::string metrics = dir + ".metrics.jsonl", summary = dir + ".summary.json";
  std::remove(metrics.c_str());
  std::remove(summary.c_str());
  const std::string summary_leaf = summary.substr(summary.find_last_of('/') + 1);
  REQUIRE(std::system(("mkdir -p " + dir + " && ln -s " + metrics + " " + dir + "/metrics.jsonl && ln -s ../" +
                       summary_leaf + " " + dir + "/summary.json")  // relative: from the run directory
                          .c_str()) == 0);
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --out " + dir), 0);
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --resume " + dir), 0);  // one step more
  struct stat st {};
  for (const char* name : {"/metrics.jsonl", "/summary.json"}) {
    INFO(name);
    REQUIRE(::lstat((dir + name).c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
  }
  CHECK(losses(dir).size() == 2);  // both steps, read through the link
  const auto written = parse_json(read_text(summary));
  REQUIRE(written.has_value());
  CHECK(written->at("steps").get<int64_t>() == 2);

  // Linked to /dev/null: discarded, the run and its resume whole.
  const std::string discarded = fresh_dir("null_metrics");
  REQUIRE(std::system(("mkdir -p " + discarded + " && ln -s /dev/null " + discarded + "/metrics.jsonl").c_str()) == 0);
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --out " + discarded), 0);
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --resume " + discarded), 0);
  CHECK(checkpoint_step(discarded) == 2);

  // A link that reaches no file (a loop), or one into a folder that does not exist (found when the
  // summary was written, after the training): refused as bad input before anything is written. A
  // loop at a temporary's name is the writer's own to replace.
  const std::string looped = fresh_dir("looped_metrics");
  REQUIRE(std::system(("mkdir -p " + looped + " && ln -s metrics.jsonl " + looped + "/metrics.jsonl && ln -s " + dir +
                       "/nowhere/s.json " + looped + "/summary.json")
                          .c_str()) == 0);
  Run r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + looped);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out " + looped + ": metrics.jsonl is a link that reaches no file"));
  REQUIRE(std::system(("rm " + looped + "/metrics.jsonl").c_str()) == 0);
  r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + looped);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out " + looped + ": summary.json is a link to " + dir + "/nowhere/s.json, and " +
                                    dir + "/nowhere cannot take a file there"));
  CHECK(::stat((looped + "/trace.json").c_str(), &st) != 0);
  REQUIRE(std::system(
              ("rm " + looped + "/summary.json && ln -s metrics.jsonl.tmp " + looped + "/metrics.jsonl.tmp").c_str()) ==
          0);
  require_exit(run_odyssey("train " + kShort + "--steps 1 --quiet --out " + looped), 0);

  // A trace linked to a file that exists is an earlier run's (a run would write through it): the
  // file it leads to was replaced unasked.
  const std::string kept = fresh_dir("linked_existing_trace");
  REQUIRE(std::system(("mkdir -p " + kept + " && echo kept > " + kept + ".other && ln -s " + kept + ".other " + kept +
                       "/trace.json")
                          .c_str()) == 0);
  r = run_odyssey("train " + kShort + "--steps 1 --quiet --out " + kept);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out " + kept + " holds a run (trace.json)"));
  CHECK(read_text(kept + ".other") == "kept\n");
}

TEST_CASE("run directory: a link or FIFO where the lock belongs is refused, a FIFO where a run writes never hangs it",
          "[cli][reliability][rundir]") {
  // The lock: through a link its owner line would overwrite the target; a FIFO is no lock file.
  // Either is the user's to remove: exit 2, the target untouched.
  const std::string victim = fresh_dir("lock_victim") + ".txt";
  { std::ofstream(victim) << "kept\n"; }
  for (const std::string& plant : {"ln -s '" + victim + "'", std::string("mkfifo")}) {
    INFO(plant);
    const std::string dir = fresh_dir("planted_lock");
    REQUIRE(std::system(("mkdir -p '" + dir + "' && " + plant + " '" + dir + "/.odyssey.lock'").c_str()) == 0);
    const Run r = run_odyssey("train " + kShort + "--steps 1 --no-checkpoint --quiet --out " + dir);
    require_exit(r, 2);
    CHECK_THAT(r.err,
               Catch::Contains(dir + "/.odyssey.lock is ") && Catch::Contains("where a run keeps its lock file"));
  }
  CHECK(read_text(victim) == "kept\n");
  // A FIFO at the trace: refused before the run starts (exit 2), where the open waited for a
  // reader forever, deaf to SIGTERM. A directory at the summary's temporary cannot be replaced:
  // refused too. A FIFO or a link at a temporary (the summary's, a checkpoint's, its folder made
  // by a copy) is the writer's own name: replaced, never written through nor waited on, the link's
  // target kept. `timeout` turns a regression into a failure here instead of a hung suite.
  const struct {
    std::string file, plant, says;
    int code;
  } planted[] = {
      {"trace.json", "mkfifo", "trace.json is not a regular file (a FIFO or socket), where the run writes its", 2},
      {"summary.json.tmp", "mkdir", "summary.json.tmp is a directory, where the run writes its summary.json", 2},
      {"summary.json.tmp", "mkfifo", "", 0},
      {"summary.json.tmp", "ln -s '" + victim + "'", "", 0},
      {"checkpoints/step_00000001/rank0.bin.tmp", "mkfifo", "", 0},
  };
  for (const auto& p : planted) {
    INFO(p.plant << " " << p.file);
    const std::string dir = fresh_dir("planted_" + std::to_string(&p - planted));
    const std::string path = dir + "/" + p.file;
    REQUIRE(std::system(("mkdir -p \"$(dirname '" + path + "')\" && " + p.plant + " '" + path + "'").c_str()) == 0);
    const Run r = run_shell("OMP_NUM_THREADS=1 timeout -s KILL 300 " + std::string(ODYSSEY_BIN_DIR) +
                            "/odyssey train " + kShort + "--steps 1 --quiet --out " + dir + " 2>&1");
    INFO(r.out);
    CHECK(r.code == p.code);
    CHECK_THAT(r.out, Catch::Contains(p.says));
    if (p.code == 0) {
      struct stat st {};
      CHECK((::lstat((dir + "/summary.json").c_str(), &st) == 0 && S_ISREG(st.st_mode)));
      CHECK(checkpoint_step(dir) == 1);
    }
  }
  CHECK(read_text(victim) == "kept\n");
}

TEST_CASE("run directory: a file size limit (ulimit -f) fails the run naming the file, never kills it with SIGXFSZ",
          "[cli][reliability][rundir]") {
  // 16 KiB: the tiny run's metrics fit, its trace and checkpoint do not. Without SIGXFSZ ignored
  // the shell reports 153 (128 + SIGXFSZ) and nothing says which file.
  const std::string dir = fresh_dir("file_size_limit");
  const Run r = run_shell("ulimit -f 16; OMP_NUM_THREADS=1 " + std::string(ODYSSEY_BIN_DIR) + "/odyssey train " +
                          kShort + "--steps 2 --quiet --out " + dir + " 2>&1");
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("rank0.bin.tmp: File too large (the file size limit of this process: ulimit -f)"));
  // A kernel profile (the tiny run's is far above the limit; no trace, no checkpoint): its writer
  // reports no failure, so the run checks the file; nothing cut is left behind
  const std::string profiled = fresh_dir("file_size_limit_profile"), trace = profiled + ".json";
  const Run p = run_shell("ulimit -f 64; OMP_NUM_THREADS=1 " + std::string(ODYSSEY_BIN_DIR) + "/odyssey train " +
                          kShort + "--set output.trace=false --steps 2 --no-checkpoint --quiet --out " + profiled +
                          " --kernel-profile " + trace + " 2>&1");
  INFO(p.out);
  CHECK(p.code == 1);
  CHECK_THAT(p.out, Catch::Contains("--kernel-profile " + trace + ": the trace could not be written") ||
                        Catch::Contains("--kernel-profile " + trace + ": the trace was cut short"));
  struct stat st {};
  for (const std::string& left : {trace, trace + ".partial", trace + ".partial.tmp"}) {
    INFO(left);
    CHECK(::lstat(left.c_str(), &st) != 0);
  }
}

TEST_CASE("fit: a run the planner says does not fit is refused with the numbers and the fixes, --force runs it",
          "[cli][reliability][fit]") {
  // A profile of 1 MiB per device: the tiny model's step needs more. On the CPU a forced run still
  // runs (this machine has the memory); refused, nothing is created.
  const std::string dir = fresh_dir("unfit");
  const std::string unfit = kShort + "--set hardware.device_memory_gib=0.001 --steps 1 --quiet --out " + dir;
  Run r = run_odyssey("train " + unfit);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("the planner predicts this run does not fit: a device peak of ") &&
                        Catch::Contains("per device (hardware.profile = cpu)") && Catch::Contains("Pass --force"));
  struct stat st {};
  CHECK(::stat(dir.c_str(), &st) != 0);  // refused before the directory was made
  r = run_odyssey("train " + unfit + " --force");
  require_exit(r, 0);
  CHECK(metrics_lines(dir) == 1);
  // No host memory for the offloaded inputs: the advisor, which turns techniques on, has nothing;
  // the tuner finds the set that fits with offload off, where "no change makes it fit" was said.
  r = run_odyssey("train " + kShort + "--set hardware.host_memory_gib=0 --steps 1 --quiet --out " +
                  fresh_dir("unfit_host"));
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("of host memory on 0.00 GiB per node") &&
                        Catch::Contains("It fits with the memory techniques odyssey tune picks: ") &&
                        !Catch::Contains("No change of the memory techniques"));
  // bench runs every variant, "plain" (no memory technique) included: refused the same way before
  // any step (batch 65536 ran until the OOM killer ended it)
  r = run_odyssey("bench " + kShort + "--set hardware.device_memory_gib=0.001 --steps 1 --quiet");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("odyssey bench: the variant \"plain\"") &&
                        Catch::Contains("the planner predicts this run does not fit: a device peak of ") &&
                        Catch::Contains("Pass --force") && Catch::Contains("No [memory] setting changes it") &&
                        !Catch::Contains("It fits with"));  // bench sets the techniques itself
  // ... and --force, which the message offers, runs it (bench once refused the flag)
  r = run_odyssey("bench " + kShort + "--set hardware.device_memory_gib=0.001 --steps 1 --quiet --force");
  require_exit(r, 0);
  // A round count past int wrapped to a negative or zero count of rounds: refused by its bound.
  r = run_odyssey("bench " + kShort + "--steps 4G --quiet");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--steps 4294967296: at most 1000000 rounds"));
  // More rank threads than a process runs: said as such, not as memory that more devices would fix.
  r = run_odyssey("bench " + kShort + "--set parallel.world_size=4096 --set parallel.fsdp=false --steps 1 --quiet");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("one process runs at most 64 rank threads") && !Catch::Contains("does not fit"));
  // Beyond this machine: a 70B model's 16M tokens on the CPU, refused at once (it grew the process
  // until the OOM killer ended it), with the advisor's suggestions or the reason there are none.
  const auto t0 = std::chrono::steady_clock::now();
  r = run_odyssey(
      "train presets/tiny-cpu.toml --set model.flavor=llama3-70b --set training.seq_len=16M "
      "--set parallel.world_size=1 --set parallel.ulysses_degree=1 --steps 1 --quiet --out " +
      fresh_dir("unfit70b"));
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("the planner predicts this run does not fit"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
  // training.device = "auto" on a machine without a GPU (CUDA_VISIBLE_DEVICES empty: none on any
  // host) trains on the CPU, and is checked against this machine's RAM as "cpu" is: a GPU preset
  // left at "auto" planned the GPU's capacity, trained on the CPU and was ended by the OOM killer.
  // Profiles of 64 TiB a device and 1 PiB of host pass the profile's checks; 1G tokens plan 3712 GiB
  // on the rank and 1024 GiB of host, beyond the RAM of any machine the tests run on.
  const std::string beyond_ram =
      "--set hardware.device_memory_gib=65536 --set hardware.host_memory_gib=1048576 --set training.seq_len=1G "
      "--steps 1 --quiet --out " +
      fresh_dir("unfit_ram");
  r = run_odyssey("train " + kShort + "--set training.device=cpu " + beyond_ram);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("on the CPU (1 rank x ") && Catch::Contains("and this machine has"));
  // the profile fits: the fix is the profile's shares of this machine, not more devices
  CHECK_THAT(r.err, Catch::Contains("set hardware.device_memory_gib and hardware.host_memory_gib so that ranks x "
                                    "device + host is at most this machine's memory") &&
                        !Catch::Contains("add devices"));
  r = run_shell(std::string("CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 ") + ODYSSEY_BIN_DIR + "/odyssey train " + kShort +
                "--set training.device=auto " + beyond_ram + " 2>&1");
  require_exit(r, 2);
  CHECK_THAT(r.out, Catch::Contains("on the CPU (1 rank x ") && Catch::Contains("and this machine has"));
}

TEST_CASE("signals: SIGTERM while a run is still loading ends it at once (exit 143)", "[cli][reliability][signals]") {
  // Rank 0 of a 2-process torchrun job whose rank 1 never starts waits in the rendezvous: loading
  // that does not end by itself. A stop used to wait for a step boundary that never came.
  const std::string dir = fresh_dir("loading_sigterm");
  const int port = free_port();
  ::unlink((dir + ".log").c_str());  // an earlier run's banner must not be read as this one's
  const pid_t pid = spawn_odyssey(
      "train " + kShort + "--set parallel.world_size=2 --set parallel.timeout_s=600 --steps 1 --out " + dir,
      dir + ".log", "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port));
  // The banner is printed once the stop handlers are in place, before the rendezvous.
  bool banner = false;
  for (int i = 0; i < 3000 && !banner; ++i) {
    banner = read_text(dir + ".log").find("odyssey train ") != std::string::npos;
    if (!banner) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(banner);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(pid, SIGTERM);
  const auto status = wait_exit(pid, 10);
  if (!status) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  INFO(read_text(dir + ".log"));
  REQUIRE(status.has_value());
  REQUIRE(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 143);
  CHECK_THAT(read_text(dir + ".log"), Catch::Contains("stopped while loading, before the first step"));
}

TEST_CASE("run directory: a resumed run reads its earlier files only as regular files, and skips corrupt trace lines",
          "[cli][reliability][rundir]") {
  const std::string dir = fresh_dir("resume_inputs");
  require_exit(run_odyssey("train " + kShort + "--set training.steps=6 --steps 2 --quiet --out " + dir), 0);
  // A trace line whose step is a string once ended the resume with a JSON type error.
  std::string trace = read_text(dir + "/trace.json");
  const size_t at = trace.find("\"step\":1");
  REQUIRE(at != std::string::npos);
  trace.replace(at, 8, "\"step\":\"1\"");
  std::ofstream(dir + "/trace.json", std::ios::trunc) << trace;
  require_exit(run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --steps 1 --quiet"), 0);
  CHECK(metrics_lines(dir) == 3);
  // A FIFO in place of metrics.jsonl: opened for reading it would wait for a writer forever.
  ::unlink((dir + "/metrics.jsonl").c_str());
  REQUIRE(::mkfifo((dir + "/metrics.jsonl").c_str(), 0644) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  const Run r = run_odyssey("train " + kShort + "--set training.steps=6 --resume " + dir + " --steps 1 --quiet");
  require_exit(r, 2);
  // refused among the checks, before any file is opened (the writer's own check stays behind it)
  CHECK_THAT(r.err, Catch::Contains("--out " + dir + ": metrics.jsonl is not a regular file (a FIFO or socket)"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
}
