// odyssey eval as a user runs it: prepare training and held-out documents with a WordLevel
// tokenizer, train the tiny CPU preset 2 steps with document masking, evaluate the run: the JSON's
// buckets and token counts against what the held-out file's index implies, the needle grid's
// shape, the heatmap PNG's size; the same weights exported to a Hugging Face directory give the
// same losses, and so does the run evaluated on two ranks (Ulysses 2, FSDP); bad input exits 2
// naming the flag or file (a rank layout the validator refuses, a --set that reshapes the model, a
// tokenizer that is not the file's or cannot spell a passkey included) before any weight is read,
// and writes nothing; SIGINT or SIGTERM ends it at once and removes the folders it made; one-token
// documents: train refuses them, eval skips their sequences. The
// studio's Eval panel is tested on fixtures of this output (tests/fixtures/eval/): they keep its shape.
#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "../model_tolerance.h"
#include "cli_test_util.h"
#include "engine/config/preset.h"
#include "tokenizer_test_util.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

const std::vector<std::string> kEvalWords = {"[UNK]", "</s>", "the", "cat", "sat",      "on", "mat",  "a", "dog", "ran",
                                             "The",   "pass", "key", "is",  "Remember", "it", "What", ".", "?",   "0",
                                             "1",     "2",    "3",   "4",   "5",        "6",  "7",    "8", "9"};

/// `count` documents of 1 to 12 words (a pattern shifted by `shift`), every tenth of 60 words, as
/// JSON lines.
void write_jsonl(const std::string& path, int count, int shift) {
  std::ofstream out(path);
  for (int d = 0; d < count; ++d) {
    std::string text;
    const int words = d % 10 == 9 ? 60 : 1 + (d + shift) % 12;
    for (int w = 0; w < words; ++w) text += kEvalWords[2 + (d * 7 + w * 3 + shift) % 8] + " ";
    out << "{\"text\": \"" << text << "\"}\n";
  }
}

/// `count` one-word documents ("cat"), as JSON lines: under document masking no label of theirs is
/// a target.
std::string one_word_lines(int count) {
  std::string out;
  for (int d = 0; d < count; ++d) out += "{\"text\": \"cat\"}\n";
  return out;
}

/// Width and height from a PNG's IHDR (bytes 16..23, big-endian), after its signature.
std::pair<int64_t, int64_t> png_size(const std::string& path) {
  const std::string b = read_text(path);
  REQUIRE(b.size() > 24);
  REQUIRE(b.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    int64_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

/// Per bucket [from, to): the labels the held-out file's packing scores, derived here from its
/// index alone: split packing into sequences of S + 1 tokens, a label at stream position q + 1
/// skipped when q + 1 begins a document, the input's position its offset from the later of the
/// sequence's start and its document's start.
std::vector<int64_t> expected_bucket_tokens(const DocumentsBytes& d, int64_t S,
                                            const std::vector<std::pair<int64_t, int64_t>>& buckets) {
  const int64_t T = static_cast<int64_t>(d.tokens.size()), sequences = (T - 1) / S;
  std::vector<int64_t> counts(buckets.size(), 0);
  auto starts_document = [&](int64_t q) {
    return std::find(d.index.begin(), d.index.end(), static_cast<uint64_t>(q)) != d.index.end();
  };
  for (int64_t k = 0; k < sequences; ++k)
    for (int64_t p = 0; p < S; ++p) {
      const int64_t q = k * S + p;
      if (starts_document(q + 1)) continue;
      int64_t begin = k * S;
      for (uint64_t s : d.index)
        if (static_cast<int64_t>(s) <= q) begin = std::max(begin, static_cast<int64_t>(s));
      const int64_t pos = q - begin;
      for (size_t b = 0; b < buckets.size(); ++b)
        if (pos >= buckets[b].first && pos < buckets[b].second) ++counts[b];
    }
  return counts;
}

/// The shape of a JSON document: every key path (array elements as "[]") with the types found
/// there ("integer", "float", "string", "bool", "null", "object", "array").
void collect_shape(const Json& v, const std::string& path, std::map<std::string, std::set<std::string>>* shape) {
  const char* type = v.is_null()             ? "null"
                     : v.is_boolean()        ? "bool"
                     : v.is_number_integer() ? "integer"
                     : v.is_number()         ? "float"
                     : v.is_string()         ? "string"
                     : v.is_object()         ? "object"
                                             : "array";
  (*shape)[path].insert(type);
  if (v.is_object())
    for (const auto& item : v.items()) collect_shape(item.value(), path + "." + item.key(), shape);
  if (v.is_array())
    for (const Json& e : v) collect_shape(e, path + "[]", shape);
}

std::map<std::string, std::set<std::string>> json_shape(const Json& v) {
  std::map<std::string, std::set<std::string>> shape;
  collect_shape(v, "", &shape);
  return shape;
}

/// The studio's fixture `name` (tests/fixtures/eval/NAME/eval.json), written by this command in
/// this test's scenario: the same keys and types as `live`, and the same counts (what does not
/// depend on the CPU's kernels).
void check_studio_fixture(const std::string& name, const Json& live) {
  INFO("tests/fixtures/eval/" << name << "/eval.json: regenerate it from this test's output when the format changes");
  const auto fixture =
      parse_json(read_text(std::string(ODYSSEY_SOURCE_DIR) + "/tests/fixtures/eval/" + name + "/eval.json"));
  REQUIRE(fixture.has_value());
  CHECK(json_shape(*fixture) == json_shape(live));
  for (const char* key : {"seq_len", "sequences", "tokens", "unused_tokens"}) CHECK(fixture->at(key) == live.at(key));
  REQUIRE(fixture->at("buckets").size() == live.at("buckets").size());
  for (size_t b = 0; b < live.at("buckets").size(); ++b)
    for (const char* key : {"from", "to", "tokens"})
      CHECK(fixture->at("buckets")[b].at(key) == live.at("buckets")[b].at(key));
  if (live.at("needle").is_null()) return;
  for (const char* key : {"trials", "seed", "answer_tokens", "lengths", "depths"})
    CHECK(fixture->at("needle").at(key) == live.at("needle").at(key));
  CHECK(fixture->at("needle").at("cells").size() == live.at("needle").at("cells").size());
}

/// A tokenizer, a documents file of 30 documents and a run of one step at 64 tokens, in a fresh
/// folder: what the refusal cases evaluate.
struct EvalRun {
  std::string dir, tokenizer, docs, run_dir;
};

EvalRun one_step_run(const std::string& name) {
  EvalRun r;
  r.dir = fresh_dir(name);
  REQUIRE(std::system(("mkdir -p '" + r.dir + "'").c_str()) == 0);
  r.tokenizer = make_tokenizer(r.dir, kEvalWords, true);
  write_jsonl(r.dir + "/docs.jsonl", 30, 0);
  r.docs = r.dir + "/docs.odoc";
  require_exit(run_odyssey("prepare " + r.dir + "/docs.jsonl --tokenizer " + r.tokenizer + " --out " + r.docs), 0);
  r.run_dir = r.dir + "/run";
  require_exit(run_odyssey("train " + kShort + "--set training.seq_len=64 --steps 1 --quiet --out " + r.run_dir), 0);
  return r;
}

}  // namespace

TEST_CASE("odyssey eval: a trained run's loss by position bucket, needle grid and heatmap", "[cli][eval]") {
  const std::string dir = fresh_dir("eval");
  REQUIRE(std::system(("mkdir -p '" + dir + "'").c_str()) == 0);
  const std::string tokenizer = make_tokenizer(dir, kEvalWords, /*split_digits=*/true);
  write_jsonl(dir + "/train.jsonl", 40, 0);
  write_jsonl(dir + "/heldout.jsonl", 60, 5);
  const std::string train = dir + "/train.odoc", heldout = dir + "/heldout.odoc";
  require_exit(run_odyssey("prepare " + dir + "/train.jsonl --tokenizer " + tokenizer + " --out " + train), 0);
  require_exit(run_odyssey("prepare " + dir + "/heldout.jsonl --tokenizer " + tokenizer + " --out " + heldout), 0);
  const std::string run_dir = dir + "/run";
  require_exit(run_odyssey("train " + kShort +
                           "--set training.seq_len=64 --set training.dataset=documents "
                           "--set training.dataset_path=" +
                           train +
                           " --set training.document_mask=true --steps 2 "
                           "--quiet --out " +
                           run_dir),
               0);

  // 128 tokens, buckets from 8: [0, 8), [8, 32), [32, 128); needle at 64 and 128 tokens.
  const std::string eval = "eval " + run_dir + " --data " + heldout +
                           " --seq-len 128 --first-bucket 8 --needle-min 64 "
                           "--tokenizer " +
                           tokenizer + " --trials 2 ";
  Run r = run_odyssey(eval + "--json");
  require_exit(r, 0);
  const auto j = parse_json(r.out);
  REQUIRE(j.has_value());
  const DocumentsBytes d = read_documents(heldout);
  const int64_t T = static_cast<int64_t>(d.tokens.size());
  REQUIRE(T >= 3 * 129);  // three sequences at least: the counts below cover several
  CHECK(j->at("sequences").get<int64_t>() == (T - 1) / 128);
  CHECK(j->at("source").at("kind").get<std::string>() == "run");
  CHECK(j->at("source").at("step").get<int64_t>() == 2);
  CHECK(j->at("needle").at("tokenizer").get<std::string>() == tokenizer);  // the one --tokenizer named
  const std::vector<std::pair<int64_t, int64_t>> edges = {{0, 8}, {8, 32}, {32, 128}};
  const std::vector<int64_t> expected = expected_bucket_tokens(d, 128, edges);
  const auto& buckets = j->at("buckets");
  REQUIRE(buckets.size() == 3);
  int64_t total = 0;
  double weighted = 0;
  for (size_t b = 0; b < 3; ++b) {
    INFO("bucket " << b);
    CHECK(buckets[b].at("from").get<int64_t>() == edges[b].first);
    CHECK(buckets[b].at("to").get<int64_t>() == edges[b].second);
    CHECK(buckets[b].at("tokens").get<int64_t>() == expected[b]);
    REQUIRE(expected[b] > 0);
    const double loss = buckets[b].at("loss").get<double>();
    CHECK(std::isfinite(loss));
    CHECK(loss > 0);
    total += buckets[b].at("tokens").get<int64_t>();
    weighted += loss * static_cast<double>(buckets[b].at("tokens").get<int64_t>());
  }
  CHECK(j->at("tokens").get<int64_t>() == total);
  CHECK(std::abs(weighted / static_cast<double>(total) - j->at("loss").get<double>()) <=
        1e-9 * j->at("loss").get<double>());

  const auto& needle = j->at("needle");
  CHECK(needle.at("lengths") == parse_json("[64, 128]").value());
  CHECK(needle.at("depths") == parse_json("[0, 25, 50, 75, 100]").value());
  CHECK(needle.at("answer_tokens").get<int64_t>() == 5);  // " 12345": the digits split, the space no token
  const auto& cells = needle.at("cells");
  REQUIRE(cells.size() == 10);
  for (const auto& c : cells) {
    CHECK(c.at("trials").get<int64_t>() == 2);
    CHECK(c.at("correct").get<int64_t>() >= 0);
    CHECK(c.at("correct").get<int64_t>() <= 2);
  }
  const std::string png = run_dir + "/eval/needle.png";
  CHECK(needle.at("heatmap").get<std::string>() == png);
  CHECK(png_size(png) == std::pair<int64_t, int64_t>{5 * 24, 2 * 24});
  const std::string written = read_text(run_dir + "/eval/eval.json");
  CHECK(parse_json(written).value() == j.value());
  check_studio_fixture("run_step2", *j);

  // A run trained on two ranks with FSDP (each checkpoint file a shard) evaluated on its own
  // layout and on one rank: the shards put together as saved, then cut for the evaluation's
  // ranks; the same losses within the forward's rounding.
  const std::string sharded = dir + "/run_fsdp";
  require_exit(run_odyssey("train " + kShort +
                           "--set training.seq_len=64 --set parallel.world_size=2 "
                           "--set parallel.ulysses_degree=2 --set parallel.fsdp=true --steps 1 --quiet --out " +
                           sharded),
               0);
  const std::string plain =
      "eval " + sharded + " --data " + heldout + " --seq-len 128 --first-bucket 8 --no-needle --json ";
  r = run_odyssey(plain + "--out " + sharded + "/eval_own");
  require_exit(r, 0);
  const auto own = parse_json(r.out);
  r = run_odyssey(plain + "--out " + sharded +
                  "/eval_one --set parallel.world_size=1 --set parallel.ulysses_degree=1 "
                  "--set parallel.fsdp=false");
  require_exit(r, 0);
  const auto single = parse_json(r.out);
  REQUIRE(own.has_value());
  REQUIRE(single.has_value());
  CHECK(single->at("tokens") == own->at("tokens"));
  {
    LoadedPreset tiny = load_preset("presets/tiny-cpu.toml");
    REQUIRE(tiny.ok());
    tiny.config.training.seq_len = 128;
    const double tol = loss_tolerance(tiny.config, 1);
    for (size_t b = 0; b < 3; ++b) {
      INFO("bucket " << b << " of the FSDP run");
      const double want = single->at("buckets")[b].at("loss").get<double>();
      CHECK(std::abs(own->at("buckets")[b].at("loss").get<double>() - want) <= tol * want);
    }
  }

  // Again without --overwrite: refused, exit 2, the files untouched.
  r = run_odyssey(eval);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("eval.json exists") && Catch::Contains("--overwrite"));
  CHECK(read_text(run_dir + "/eval/eval.json") == written);
  // With it, the table on stdout.
  r = run_odyssey(eval + "--overwrite");
  require_exit(r, 0);
  CHECK_THAT(r.out, Catch::Contains("loss by position in document") && Catch::Contains("needle in a haystack") &&
                        Catch::Contains("32-128") && Catch::Contains("(cpu, 1 rank, ") &&
                        !Catch::Contains("memory no memory"));  // the techniques named as the summary names them
  // Replaced by an eval without the grid: the earlier heatmap goes with the eval.json it belonged to.
  struct stat heatmap {};
  REQUIRE(::stat((run_dir + "/eval/needle.png").c_str(), &heatmap) == 0);
  r = run_odyssey("eval " + run_dir + " --data " + heldout + " --seq-len 128 --first-bucket 8 --no-needle --overwrite");
  require_exit(r, 0);
  CHECK(::stat((run_dir + "/eval/needle.png").c_str(), &heatmap) != 0);

  // The run (trained on one rank) evaluated on two that share each sequence (Ulysses 2), its
  // weights sharded (FSDP): the same JSON shape and counts, and the losses within the forward's
  // rounding: each CE is the same arithmetic in other orders (other slices and tiles), within
  // loss_tolerance of one sequence, and the buckets sum the gathered CEs in the one-rank order.
  // (Needle hits are argmaxes, compared across layouts where their margins are known:
  // tests/train/eval_test.cpp.)
  r = run_odyssey(eval + "--json --out " + dir +
                  "/eval_2ranks --set parallel.world_size=2 "
                  "--set parallel.ulysses_degree=2 --set parallel.fsdp=true");
  require_exit(r, 0);
  const auto two = parse_json(r.out);
  REQUIRE(two.has_value());
  CHECK(json_shape(*two) == json_shape(*j));
  for (const char* key : {"seq_len", "sequences", "tokens", "unused_tokens"}) CHECK(two->at(key) == j->at(key));
  LoadedPreset tiny = load_preset("presets/tiny-cpu.toml");
  REQUIRE(tiny.ok());
  tiny.config.training.seq_len = 128;
  const double tol = loss_tolerance(tiny.config, 1);
  CHECK(std::abs(two->at("loss").get<double>() - j->at("loss").get<double>()) <= tol * j->at("loss").get<double>());
  for (size_t b = 0; b < 3; ++b) {
    INFO("bucket " << b << " on two ranks");
    CHECK(two->at("buckets")[b].at("tokens") == buckets[b].at("tokens"));
    const double want = buckets[b].at("loss").get<double>();
    CHECK(std::abs(two->at("buckets")[b].at("loss").get<double>() - want) <= tol * want);
  }
  REQUIRE(two->at("needle").at("cells").size() == cells.size());
  for (size_t c = 0; c < cells.size(); ++c)
    CHECK(two->at("needle").at("cells")[c].at("trials") == cells[c].at("trials"));

  // The same two ranks as torchrun processes, one rank each: rank 0's process writes the same
  // evaluation (the same collectives in the same order, one intra-op thread each: the same
  // numbers), the other process prints and writes nothing.
  const std::string procs = dir + "/eval_torchrun";
  const std::vector<pid_t> pids = spawn_torchrun(eval + "--json --quiet --out " + procs +
                                                     " --set parallel.world_size=2 "
                                                     "--set parallel.ulysses_degree=2 --set parallel.fsdp=true",
                                                 procs);
  for (int rank = 0; rank < 2; ++rank) {
    const auto status = wait_exit(pids[static_cast<size_t>(rank)], 300);
    INFO("rank " << rank << ": " << read_text(procs + ".rank" + std::to_string(rank) + ".log"));
    REQUIRE(status.has_value());
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 0);
  }
  CHECK(read_text(procs + ".rank1.log").empty());
  const auto processes = parse_json(read_text(procs + "/eval.json"));
  REQUIRE(processes.has_value());
  CHECK(json_shape(*processes) == json_shape(*two));
  CHECK(processes->at("buckets") == two->at("buckets"));
  CHECK(processes->at("loss") == two->at("loss"));
  CHECK(processes->at("needle").at("cells") == two->at("needle").at("cells"));
  // Again into the same --out: every process refuses (eval.json exists), and each tells the
  // others (JobStart::refuse); all exit 2 at once with the 300 s timeout.
  const std::vector<pid_t> again = spawn_torchrun(
      eval + "--json --quiet --out " + procs + " --set parallel.world_size=2 --set parallel.timeout_s=300", procs);
  for (const std::string& log : require_ranks_exit(again, procs, 2, 60))
    CHECK_THAT(log, Catch::Contains("eval.json exists"));
  // Inputs only rank 0's process finds (another node without them): the shell gives rank 1 a path
  // that does not exist, for RUN_DIR (refused before the config is known) and for --data (after).
  // Rank 0 exits 2 at once with rank 1's reason, where it used to wait for it until the timeout.
  const std::string missing = "$([ \"$RANK\" = 1 ] && echo " + dir + "/nowhere || echo ";
  for (const std::string& args :
       {"eval " + missing + run_dir + ") --data " + heldout + " --seq-len 128 --no-needle --out " + dir + "/asym_run",
        "eval " + run_dir + " --data " + missing + heldout + ") --seq-len 128 --no-needle --out " + dir +
            "/asym_data"}) {
    INFO(args);
    const std::vector<pid_t> pids =
        spawn_torchrun(args + " --quiet --set parallel.world_size=2 --set parallel.timeout_s=300", procs + "_asym");
    const std::vector<std::string> logs = require_ranks_exit(pids, procs + "_asym", 2, 60);
    CHECK_THAT(logs[0], Catch::Contains("rank 1 refused to start: ") && Catch::Contains(dir + "/nowhere"));
    CHECK_THAT(logs[1], Catch::Contains("odyssey eval: ") && Catch::Contains(dir + "/nowhere"));
  }
  // Inputs each node holds in another copy: rank 1's --data of other held-out text (the same
  // tokens in count, other contents), then its needle grid with another --seed. Each evaluated
  // other sequences under rank 0's report in silence; every process now exits 2 naming it.
  write_jsonl(dir + "/other.jsonl", 60, 6);
  const std::string other = dir + "/other.odoc";
  require_exit(run_odyssey("prepare " + dir + "/other.jsonl --tokenizer " + tokenizer + " --out " + other), 0);
  const std::string rank1 = "$([ \"$RANK\" = 1 ] && echo ";
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {"eval " + run_dir + " --data " + rank1 + other + " || echo " + heldout +
                ") --seq-len 128 --no-needle --out " + dir + "/other_data",
            "--data "},
           {eval + "--seed " + rank1 + "7 || echo 1234) --out " + dir + "/other_seed", "the needle grid "}}) {
    INFO(args);
    const std::vector<pid_t> pids =
        spawn_torchrun(args + " --quiet --set parallel.world_size=2 --set parallel.timeout_s=300", procs + "_other");
    for (const std::string& log : require_ranks_exit(pids, procs + "_other", 2, 60))
      CHECK_THAT(log, Catch::Contains("rank 1 refused to start: its process runs another job than rank 0's (" + named));
  }

  // The same weights as a Hugging Face directory: the same losses (fp32 both ways; the sums'
  // order may differ with the memory techniques, far below 1e-4).
  const std::string hf = dir + "/hf";
  require_exit(run_odyssey("export " + run_dir + " --hf " + hf + " --dtype float32 --tokenizer " + dir), 0);
  r = run_odyssey("eval " + hf + " --data " + heldout + " --seq-len 128 --first-bucket 8 --no-needle --json --out " +
                  dir + "/hf_eval --set training.device=cpu --set training.dtype=float32");
  require_exit(r, 0);
  const auto h = parse_json(r.out);
  REQUIRE(h.has_value());
  CHECK(h->at("source").at("kind").get<std::string>() == "hf");
  CHECK(h->at("tokens").get<int64_t>() == total);
  CHECK(std::abs(h->at("loss").get<double>() - j->at("loss").get<double>()) <= 1e-4 * j->at("loss").get<double>());
  CHECK(h->at("needle").is_null());
  check_studio_fixture("hf_no_needle", *h);
  // in text, the header names the directory once, with what it holds (it read "hf (hf (1 file, ...)")
  r = run_odyssey("eval " + hf + " --data " + heldout + " --seq-len 128 --first-bucket 8 --no-needle --out " + dir +
                  "/hf_eval_text --set training.device=cpu --set training.dtype=float32");
  require_exit(r, 0);
  CHECK_THAT(r.out, Catch::Contains("odyssey eval " + hf + " (1 file, ") && !Catch::Contains("(" + hf + " ("));

  // A run trained from that directory carries its tokenizer files in every checkpoint: eval of the
  // run finds the tokenizer without --tokenizer (the grid --tokenizer gave above), a resume from the
  // checkpoint's own config (no model.hf_path) carries it on, and export copies it.
  const std::string tokenizer_bytes = read_text(tokenizer);
  REQUIRE(read_text(hf + "/tokenizer.json") == tokenizer_bytes);
  {  // the model advertises a longer context than the runs below train (as Llama 3.2's 128K)
    auto config = parse_json(read_text(hf + "/config.json"));
    REQUIRE(config);
    (*config)["max_position_embeddings"] = 4096;
    std::ofstream(hf + "/config.json", std::ios::trunc) << config->dump(2);
  }
  const std::string from_hf = dir + "/run_from_hf";
  require_exit(run_odyssey("train " + kShort + "--set model.flavor=hf --set model.hf_path=" + hf +
                           " --set training.seq_len=64 --steps 1 --quiet --out " + from_hf),
               0);
  const std::string first_checkpoint = from_hf + "/checkpoints/step_00000001";
  CHECK(read_text(first_checkpoint + "/tokenizer.json") == tokenizer_bytes);
  CHECK_THAT(read_text(first_checkpoint + "/config.toml"), !Catch::Contains(hf));  // the shape, not the folder
  r = run_odyssey("eval " + from_hf + " --data " + heldout +
                  " --seq-len 128 --first-bucket 8 --needle-min 64 --trials 2 --out " + dir + "/from_hf_eval");
  require_exit(r, 0);
  const auto f = parse_json(read_text(dir + "/from_hf_eval/eval.json"));
  REQUIRE(f.has_value());
  REQUIRE(f->at("needle").is_object());
  CHECK(f->at("needle").at("cells").size() == cells.size());
  CHECK(f->at("needle").at("tokenizer").get<std::string>() == first_checkpoint + "/tokenizer.json");
  CHECK_THAT(r.out, Catch::Contains("tokenized by " + first_checkpoint + "/tokenizer.json"));
  const std::string resumed = dir + "/run_from_hf_resumed";
  require_exit(run_odyssey("train " + first_checkpoint + "/config.toml --resume " + from_hf +
                           " --set training.steps=2 --quiet --out " + resumed),
               0);
  const auto latest = parse_json(read_text(resumed + "/checkpoints/latest.json"));
  REQUIRE(latest.has_value());
  CHECK(latest->at("step").get<int64_t>() == 2);
  CHECK(read_text(resumed + "/checkpoints/" + latest->at("path").get<std::string>() + "/tokenizer.json") ==
        tokenizer_bytes);
  const std::string exported = dir + "/hf_from_resumed";
  require_exit(run_odyssey("export " + resumed + " --hf " + exported), 0);
  CHECK(read_text(exported + "/tokenizer.json") == tokenizer_bytes);
  // The model's own config.json rides along too (source_config.json, never exported): the export
  // advertises the longer of the model's context and the run's, not the 64 tokens it trained.
  CHECK(read_text(first_checkpoint + "/source_config.json") == read_text(hf + "/config.json"));
  struct stat st {};
  CHECK(::stat((exported + "/source_config.json").c_str(), &st) != 0);
  const auto source_config = parse_json(read_text(hf + "/config.json"));
  const auto exported_config = parse_json(read_text(exported + "/config.json"));
  REQUIRE((source_config && exported_config));
  CHECK(exported_config->at("max_position_embeddings").get<int64_t>() == 4096);
}

TEST_CASE("odyssey eval: a short evaluation's default buckets start at a sixteenth of it", "[cli][eval]") {
  // The default first bucket, 1K, made one bucket of a 64-token evaluation: it is 1K or a
  // sixteenth of --seq-len, the smaller, so three buckets at least.
  const EvalRun fixture = one_step_run("eval_default_buckets");
  const Run r = run_odyssey("eval " + fixture.run_dir + " --data " + fixture.docs + " --seq-len 64 --no-needle --json");
  require_exit(r, 0);
  const auto j = parse_json(r.out);
  REQUIRE(j.has_value());
  const auto& buckets = j->at("buckets");
  const std::vector<std::pair<int64_t, int64_t>> edges = {{0, 4}, {4, 16}, {16, 64}};
  REQUIRE(buckets.size() == edges.size());
  for (size_t b = 0; b < edges.size(); ++b) {
    INFO("bucket " << b);
    CHECK(buckets[b].at("from").get<int64_t>() == edges[b].first);
    CHECK(buckets[b].at("to").get<int64_t>() == edges[b].second);
  }
}

TEST_CASE("odyssey eval: SIGINT and SIGTERM end it at once, removing the folders it made (exit 130, 143)",
          "[cli][eval][signals]") {
  // Rank 0 of a two-process torchrun job whose rank 1 never starts waits in the rendezvous, after
  // it made --out's folders and before any result: a stop used to end eval silently (the signal's
  // default) and leave those folders behind.
  const EvalRun fixture = one_step_run("eval_signal");
  for (const int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    const std::string top = fixture.dir + "/stopped_" + std::to_string(sig), out = top + "/inner";
    const std::string log = fixture.dir + "/stopped_" + std::to_string(sig) + ".log";
    const pid_t pid = spawn_odyssey(
        "eval " + fixture.run_dir + " --data " + fixture.docs + " --seq-len 64 --no-needle --out " + out +
            " --set parallel.world_size=2 --set parallel.fsdp=true "
            "--set parallel.timeout_s=600",
        log, "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()));
    struct stat st {};
    bool made = false;
    for (int i = 0; i < 6000 && !made; ++i) {
      made = ::stat(out.c_str(), &st) == 0;
      if (!made) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(made);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the rendezvous
    CHECK(exit_code_after_signal(pid, sig, log) == 128 + sig);
    CHECK_THAT(read_text(log),
               Catch::Contains(std::string("odyssey eval: stopped by ") + (sig == SIGINT ? "Ctrl-C" : "SIGTERM") +
                               " before its results were written: nothing was written"));
    CHECK(::stat(top.c_str(), &st) != 0);  // both folders it made are gone, the fixture's kept
    CHECK(::stat(fixture.dir.c_str(), &st) == 0);
  }
}

TEST_CASE("odyssey eval: bad input names the flag or file and exits 2", "[cli][eval]") {
  const EvalRun fixture = one_step_run("eval_bad");
  const std::string &dir = fixture.dir, &tokenizer = fixture.tokenizer, &docs = fixture.docs,
                    &run_dir = fixture.run_dir;
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"eval " + run_dir + " --data " + docs, "--seq-len N"},
      {"eval " + run_dir + " --seq-len 64", "--data FILE"},
      {"eval " + run_dir + " --data " + dir + "/missing.odoc --seq-len 64 --no-needle", dir + "/missing.odoc"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 4096 --no-needle", "fewer than --seq-len 4096 + 1"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --trials 0",
       "--trials 0: must be a whole number from 1 to 9223372036854775807"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --seed 18446744073709551615",
       "--seed 18446744073709551615: must be a whole number from 0 to 9223372036854775807"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64", "holds no tokenizer.json (a run trained from"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --tokenizer " + tokenizer + " --needle-min 16",
       "--needle-min 16: the needle, question and answer take 38 tokens (passkey 54699), which leave no filler: "
       "give --needle-min 38 or more"},
      {"eval " + dir + " --data " + docs + " --seq-len 64", "neither a run directory"},
      {"eval " + dir + "/nothing --data " + docs + " --seq-len 64", "not a directory"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --preset presets/tiny-cpu.toml",
       "carries its own config"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --bogus", "unknown option --bogus"},
      // an empty value is none: it took the default folder, tokenizer or config
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --no-needle --out \"\"", "--out needs a value"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --tokenizer \"\"", "--tokenizer needs a value"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --seq-len=128 --no-needle",
       "--seq-len given twice (64, then 128): give it once"},
      // a needle option beside --no-needle would be ignored: refused, naming the first
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --no-needle --tokenizer " + dir +
           "/nonexistent --trials 3",
       "--tokenizer sets up the needle grid, and --no-needle runs none: drop one of them"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --seed 5 --no-needle",
       "--seed sets up the needle grid, and --no-needle runs none"},
      // Rank layouts the ranks cannot run: the validator's rules, by key.
      {"eval " + run_dir + " --data " + docs +
           " --seq-len 64 --no-needle --set parallel.world_size=3 "
           "--set parallel.ulysses_degree=3",
       "parallel.ulysses_degree = 3"},
      {"eval " + run_dir + " --data " + docs +
           " --seq-len 65 --no-needle --set parallel.world_size=2 "
           "--set parallel.ulysses_degree=2",
       "--seq-len: training.seq_len = 65"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --tokenizer " + tokenizer +
           " --needle-min 41 "
           "--set parallel.world_size=2 --set parallel.ulysses_degree=2",
       "--needle-min 41: the needle grid's context of 41 tokens (--needle-min doubled up to --seq-len) runs as "
       "training.seq_len = 41:\n  training.seq_len = 41: "},  // no line of a document the flags made
      // Keys eval sets itself, or never reads, are refused rather than ignored.
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --no-needle --set training.seq_len=32",
       "--set training.seq_len=32: odyssey eval takes the longest context from --seq-len"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --no-needle --set training.document_mask=false",
       "--set training.document_mask=false: odyssey eval packs the documents split, with document masking"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --no-needle --set training.lr=0.5",
       "--set training.lr=0.5: odyssey eval runs no optimizer"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --no-needle --set memory.offload_optimizer=true",
       "--set memory.offload_optimizer=true: odyssey eval runs no optimizer"},
      {"eval " + run_dir + " --data " + docs + " --seq-len 64 --no-needle --set description=hello",
       "--set description=hello: odyssey eval writes no preset"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const Run r = run_odyssey(c.args);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(c.message));
  }
  struct stat st {};
  CHECK(::stat((run_dir + "/eval/eval.json").c_str(), &st) != 0);  // nothing written by a refusal
  // A tokenizer.json in the checkpoint that cannot be used is named as it is, not as missing.
  {
    std::string checkpoint;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(run_dir + "/checkpoints"))
      if (entry.path().filename() == "rank0.bin") checkpoint = entry.path().parent_path().string();
    REQUIRE(!checkpoint.empty());
    REQUIRE(::stat((checkpoint + "/tokenizer.json").c_str(), &st) != 0);  // a run trained on no model dir
    REQUIRE(::mkdir((checkpoint + "/tokenizer.json").c_str(), 0755) == 0);
    const Run r = run_odyssey("eval " + run_dir + " --data " + docs + " --seq-len 64");
    ::rmdir((checkpoint + "/tokenizer.json").c_str());
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("the checkpoint " + checkpoint + ": " + checkpoint +
                                      "/tokenizer.json is not a regular file") &&
                          !Catch::Contains("holds no tokenizer.json"));
  }
  // --data where eval writes eval.json: --overwrite replaced the held-out text with the results.
  {
    const std::string out = dir + "/data_as_out";
    REQUIRE(std::system(("mkdir -p " + out + " && cp " + docs + " " + out + "/eval.json").c_str()) == 0);
    const std::string before = read_text(out + "/eval.json");
    const Run r = run_odyssey("eval " + run_dir + " --data " + out + "/eval.json --seq-len 64 --no-needle --out " +
                              out + " --overwrite");
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("--data " + out + "/eval.json is the file eval writes as "));
    CHECK(read_text(out + "/eval.json") == before);
  }
  // A checkpoint found damaged after --out was made (its folders new): they are removed again,
  // where an empty folder was left behind.
  std::string rank_file;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(run_dir + "/checkpoints"))
    if (entry.path().filename() == "rank0.bin") rank_file = entry.path().string();
  REQUIRE(!rank_file.empty());
  {
    std::fstream f(rank_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-8, std::ios::end);
    char byte = 0;
    f.read(&byte, 1);
    f.seekp(-8, std::ios::end);
    byte = static_cast<char>(byte ^ 0x5a);
    f.write(&byte, 1);
  }
  const Run r =
      run_odyssey("eval " + run_dir + " --data " + docs + " --seq-len 64 --no-needle --out " + dir + "/new/eval_out");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(rank_file));
  CHECK(::stat((dir + "/new").c_str(), &st) != 0);
}

TEST_CASE("odyssey eval: a passkey's tokens are those it has after the question, a text it cannot encode is named",
          "[cli][eval]") {
  // A tokenizer shaped as Llama 2's and Mistral's (BPE with byte fallback, a normalizer that prepends
  // "▁" to every text and writes spaces as "▁", no pre-tokenizer): the answer " 12345" encoded
  // alone began with a "▁" of its own, which greedy decoding after "...key is" never produces, so
  // no trial could be correct. A second one, without "W", an unk token or byte fallback, drops the
  // question's "W": the refusal named the deleted temporary file the texts were written to. The
  // token counts are the tokenizers library's integers: no CPU kernel is involved.
  const std::string dir = fresh_dir("eval_prepend");
  REQUIRE(std::system(("mkdir -p '" + dir + "/prepend' '" + dir + "/no_w'").c_str()) == 0);
  std::ofstream(dir + "/make.py")
      << "import sys\n"
      << "from tokenizers import Tokenizer, models, normalizers\n"
      << "dir = sys.argv[1]\n"
      << "chars = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.?'\n"
      << "def make(name, byte_fallback, drop):\n"
      << "    vocab = {'<unk>': 0, '</s>': 1}\n"
      << "    if byte_fallback:\n"
      << "        for b in range(256): vocab['<0x%02X>' % b] = len(vocab)\n"
      << "    for c in '\\u2581' + chars:\n"
      << "        if c != drop: vocab[c] = len(vocab)\n"
      << "    tok = Tokenizer(models.BPE(vocab, [], byte_fallback=byte_fallback, "
         "unk_token='<unk>' if byte_fallback else None))\n"
      << "    tok.normalizer = normalizers.Sequence([normalizers.Prepend('\\u2581'), "
         "normalizers.Replace(' ', '\\u2581')])\n"
      << "    tok.save(dir + '/' + name + '/tokenizer.json')\n"
      << "    return tok\n"
      << "tok = make('prepend', True, '')\n"
      << "make('no_w', False, 'W')\n"
      << "q = 'What is the pass key? The pass key is'\n"
      << "ids = lambda t: tok.encode(t, add_special_tokens=False).ids\n"
      << "after = len(ids(q + ' 12345')) - len(ids(q))\n"
      << "assert ids(q + ' 12345')[:len(ids(q))] == ids(q)\n"
      << "assert len(ids(' 12345')) == after + 1, 'the premise: alone, the answer has a mark of its own'\n"
      << "open(dir + '/after.txt', 'w').write(str(after))\n";
  REQUIRE(std::system(("'" + tokenizers_python() + "' '" + dir + "/make.py' '" + dir + "'").c_str()) == 0);
  const int64_t after = std::stoll(read_text(dir + "/after.txt"));
  REQUIRE(after == 6);  // "▁" and the five digits
  write_jsonl(dir + "/docs.jsonl", 30, 0);
  const std::string run_dir = dir + "/run";
  require_exit(run_odyssey("train " + kShort + "--set model.vocab_size=512 --set training.seq_len=64 --steps 1 " +
                           "--quiet --out " + run_dir),
               0);
  for (const char* name : {"prepend", "no_w"})
    require_exit(run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + dir + "/" + name + " --out " + dir + "/" +
                             name + ".odoc"),
                 0);
  Run r =
      run_odyssey("eval " + run_dir + " --data " + dir + "/prepend.odoc --seq-len 256 --needle-min 256 --trials 2 " +
                  "--tokenizer " + dir + "/prepend --json --out " + dir + "/eval_prepend");
  require_exit(r, 0);
  const auto j = parse_json(r.out);
  REQUIRE(j.has_value());
  CHECK(j->at("needle").at("answer_tokens").get<int64_t>() == after);
  CHECK(j->at("needle").at("answer_tokens_each") == parse_json("[6, 6]").value());

  r = run_odyssey("eval " + run_dir + " --data " + dir + "/no_w.odoc --seq-len 256 --needle-min 256 --trials 2 " +
                  "--tokenizer " + dir + "/no_w --out " + dir + "/eval_no_w");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(
                        "--tokenizer " + dir +
                        "/no_w/tokenizer.json: the needle grid's text \"What is the pass key? The pass key is\"") &&
                        Catch::Contains("drops \"W\"") && Catch::Contains("another --tokenizer, or --no-needle") &&
                        !Catch::Contains("odyssey-eval-"));
}

TEST_CASE("odyssey eval: a reshaping --set, a tokenizer not the data's, an unwritable output exit 2 first",
          "[cli][eval]") {
  const EvalRun fixture = one_step_run("eval_refused");
  const std::string &dir = fixture.dir, &tokenizer = fixture.tokenizer, &docs = fixture.docs,
                    &run_dir = fixture.run_dir;
  const std::string eval = "eval " + run_dir + " --data " + docs + " --seq-len 64 ";
  auto refused = [](const std::string& args) {
    INFO(args);
    const Run r = run_odyssey(args);
    require_exit(r, 2);
    return r.err;
  };

  // The model is the run's own: a --set of a shape key is refused before a weight is read or a
  // model built (llama3-8b's would not fit this machine's memory), naming the --set, the run's
  // config, its value and the asked one.
  std::string err = refused(eval + "--no-needle --set model.flavor=llama3-8b");
  CHECK_THAT(err, Catch::Contains("--set model.flavor=llama3-8b: " + run_dir + "/checkpoints/") &&
                      Catch::Contains("config.toml gives the model flavor \"tiny\" (n_layers 4, d_model 128, ") &&
                      Catch::Contains("model.n_layers = 4 -> 32") && Catch::Contains("model.d_model = 128 -> 4096") &&
                      Catch::Contains("eval runs the model whose weights it reads"));
  err = refused(eval + "--no-needle --set memory.tiled_mlp=false --set model.vocab_size=512");
  CHECK_THAT(err, Catch::Contains("--set model.vocab_size=512: ") && Catch::Contains("model.vocab_size = 256 -> 512") &&
                      !Catch::Contains("tiled_mlp"));
  // What shapes no weight may change: RoPE and the norm's epsilon (a context extension evaluated).
  Run r = run_odyssey(eval + "--no-needle --json --out " + dir +
                      "/rope --set model.rope_theta=500000 --set model.norm_eps=1e-6 --set memory.tiled_mlp=false");
  require_exit(r, 0);
  const auto rope = parse_json(r.out);
  REQUIRE(rope.has_value());
  CHECK(rope->at("tokens").get<int64_t>() > 0);
  CHECK(std::isfinite(rope->at("loss").get<double>()));

  // --trials has a bound, said before a prompt is built.
  CHECK_THAT(refused(eval + "--tokenizer " + tokenizer + " --trials 99999999999"),
             Catch::Contains("--trials 99999999999: at most 1000 a cell"));
  CHECK_THAT(refused(eval + "--tokenizer " + tokenizer + " --trials 1001"),
             Catch::Contains("--trials 1001: at most 1000"));

  // Tokenizers the needle cannot use: a 3-word vocabulary (the file's has 29), the file's size
  // without the digits (a passkey is unknown tokens), the file's size with every digit one token
  // (every passkey the same tokens).
  auto tokenizer_in = [&](const std::string& name, const std::vector<std::string>& words) {
    REQUIRE(std::system(("mkdir -p '" + dir + "/" + name + "'").c_str()) == 0);
    return make_tokenizer(dir + "/" + name, words, true);
  };
  const std::string small = tokenizer_in("tok_small", {"[UNK]", "</s>", "cat"});
  std::vector<std::string> no_digits = kEvalWords;
  for (size_t i = 19; i < no_digits.size(); ++i)
    no_digits[i] = "word" + std::string(1, static_cast<char>('a' + i - 19));
  const std::string unknown = tokenizer_in("tok_no_digits", no_digits);
  const std::string same = tokenizer_in("tok_same_digits", kEvalWords);
  std::string text = read_text(same);
  for (int d = 1; d < 10; ++d) {  // "1": 20 ... "9": 28 all become id 19, the vocabulary still 29 words
    const std::string from = "\"" + std::to_string(d) + "\": " + std::to_string(19 + d);
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), "\"" + std::to_string(d) + "\": 19");
  }
  std::ofstream(same, std::ios::trunc) << text;
  CHECK_THAT(refused(eval + "--tokenizer " + small),
             Catch::Contains("--tokenizer " + small + ": its vocabulary holds 3 tokens, and --data " + docs +
                             " was prepared with a vocabulary of 29"));
  CHECK_THAT(refused(eval + "--tokenizer " + unknown), Catch::Contains("--tokenizer " + unknown + ": the passkey ") &&
                                                           Catch::Contains("which holds the unknown token (id 0)"));
  CHECK_THAT(
      refused(eval + "--tokenizer " + same + " --trials 2"),
      Catch::Contains("--tokenizer " + same + ": the passkeys ") && Catch::Contains("both encode to [19 19 19 19 19]"));

  // Messages that name what the user gave: --data a directory; an HF_DIR whose config.json does
  // not parse, or without a tokenizer.json (no --tokenizer given).
  CHECK_THAT(refused("eval " + run_dir + " --data " + dir + " --seq-len 64 --no-needle"),
             Catch::Contains("--data " + dir + ": a directory, not a documents file"));
  const std::string broken = dir + "/hf_broken";
  REQUIRE(std::system(("mkdir -p '" + broken + "'").c_str()) == 0);
  std::ofstream(broken + "/config.json") << "{broken";
  err = refused("eval " + broken + " --data " + docs + " --seq-len 64 --no-needle");
  CHECK_THAT(err, Catch::Contains("HF_DIR " + broken + ": " + broken + "/config.json: parse error") &&
                      !Catch::Contains("--set"));
  const std::string hf = dir + "/hf_no_tokenizer";
  require_exit(run_odyssey("export " + run_dir + " --hf " + hf + " --dtype float32"), 0);
  err = refused("eval " + hf + " --data " + docs + " --seq-len 64");
  CHECK_THAT(err, Catch::Contains("none was given (--tokenizer), and it was looked for in HF_DIR " + hf) &&
                      Catch::Contains("pass --tokenizer PATH") && Catch::Contains("--no-needle") &&
                      !Catch::Contains("--tokenizer " + hf));
  // Positions that continue across documents are validated against eval's documents file, not
  // the defaults' built-in dataset (which has no documents): the HF_DIR evaluates with them.
  r = run_odyssey("eval " + hf + " --data " + docs + " --seq-len 64 --no-needle --json --out " + dir +
                  "/continue --set training.document_positions=continue");
  require_exit(r, 0);
  const auto continued = parse_json(r.out);
  REQUIRE(continued.has_value());
  CHECK(continued->at("tokens").get<int64_t>() > 0);

  // An output that cannot be written is refused before the evaluation, not after it: eval.json a
  // directory, even with --overwrite.
  const std::string out = dir + "/out";
  REQUIRE(std::system(("mkdir -p '" + out + "/eval.json'").c_str()) == 0);
  CHECK_THAT(refused(eval + "--no-needle --overwrite --out " + out),
             Catch::Contains("--out " + out + ": " + out + "/eval.json is a directory"));
  struct stat st {};
  CHECK(::stat((out + "/needle.png").c_str(), &st) != 0);
}

TEST_CASE("one-token documents: train, check and the planner refuse a sequence without a target, eval skips it",
          "[cli][eval]") {
  const std::string dir = fresh_dir("eval_one_token");
  REQUIRE(std::system(("mkdir -p '" + dir + "'").c_str()) == 0);
  const std::string tokenizer = make_tokenizer(dir, kEvalWords, true);
  // 200 documents of one token; and 65 of them before 40 ordinary ones: at --seq-len 64 the first
  // sequence, tokens [0, 65), holds no target (each label begins a document), the others do.
  std::ofstream(dir + "/ones.jsonl") << one_word_lines(200);
  write_jsonl(dir + "/text.jsonl", 40, 0);
  std::ofstream(dir + "/mixed.jsonl") << one_word_lines(65) << read_text(dir + "/text.jsonl");
  const std::string ones = dir + "/ones.odoc", mixed = dir + "/mixed.odoc";
  require_exit(run_odyssey("prepare " + dir + "/ones.jsonl --tokenizer " + tokenizer + " --out " + ones), 0);
  require_exit(run_odyssey("prepare " + dir + "/mixed.jsonl --tokenizer " + tokenizer + " --out " + mixed), 0);

  // Training with document masking: refused as the file opens, before anything is written (exit
  // 2, not "loss is NaN at step 1").
  const std::string refused_run = dir + "/run_ones";
  Run r = run_odyssey("train " + kShort + "--set training.seq_len=64 --set training.dataset=documents " +
                      "--set training.dataset_path=" + ones + " --set training.document_mask=true --steps 1 --out " +
                      refused_run);
  require_exit(r, 2);
  CHECK_THAT(r.err,
             Catch::Contains("documents file '" + ones + "'") &&
                 Catch::Contains("sequence 0 (tokens [0, 65) of the stream) holds no target inside a document") &&
                 Catch::Contains("a document of 2 tokens or more") && Catch::Contains("3 of the 3 sequences"));
  CHECK_THAT(r.out + r.err, !Catch::Contains("NaN"));
  struct stat st {};
  CHECK(::stat(refused_run.c_str(), &st) != 0);  // refused before the run directory is made: nothing written
  // check refuses it, and so do the planner's commands, which read the file's lengths: they
  // planned it (exit 0) where check and train refuse it.
  const std::string masked_ones = kShort + "--set training.seq_len=64 --set training.dataset=documents " +
                                  "--set training.dataset_path=" + ones + " --set training.document_mask=true";
  for (const char* command : {"check", "plan", "tune", "maxlen", "ladder"}) {
    INFO(command);
    r = run_odyssey(std::string(command) + " " + masked_ones);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("training.dataset_path") && Catch::Contains("holds no target inside a document"));
  }

  // Eval skips the sequence, says so, and scores the others (no NaN); a file of nothing else is
  // bad input.
  const std::string run_dir = dir + "/run";
  require_exit(run_odyssey("train " + kShort + "--set training.seq_len=64 --steps 1 --quiet --out " + run_dir), 0);
  r = run_odyssey("eval " + run_dir + " --data " + mixed + " --seq-len 64 --first-bucket 8 --no-needle --json");
  require_exit(r, 0);
  const DocumentsBytes d = read_documents(mixed);
  const int64_t sequences = (static_cast<int64_t>(d.tokens.size()) - 1) / 64;
  REQUIRE(sequences >= 3);
  CHECK_THAT(r.err,
             Catch::Contains("note: 1 of the " + std::to_string(sequences) + " sequences of 65 tokens of --data " +
                             mixed + " hold no target inside a document"));
  const auto j = parse_json(r.out);
  REQUIRE(j.has_value());
  CHECK(j->at("sequences").get<int64_t>() == sequences - 1);
  CHECK(std::isfinite(j->at("loss").get<double>()));
  // The scored labels are those of the kept sequences: every label of sequences 1.. whose next
  // token begins no document.
  int64_t scored = 0;
  for (int64_t q = 64; q < sequences * 64; ++q)
    if (std::find(d.index.begin(), d.index.end(), static_cast<uint64_t>(q + 1)) == d.index.end()) ++scored;
  CHECK(j->at("tokens").get<int64_t>() == scored);
  r = run_odyssey("eval " + run_dir + " --data " + ones + " --seq-len 64 --no-needle");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--data: documents file '" + ones + "': none of its 3 sequences of 65 tokens"));
}
