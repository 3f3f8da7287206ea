// A Hugging Face directory through the CLI as a user runs it: planned and checked from its
// config.json, trained (one rank, and four with Ulysses + FSDP + every memory technique, which must
// give the same loss), exported, and loaded back into transformers with the same logits; broken
// directories (a NaN weight among them) refused with exit 2 by train, and by check where train
// refuses them before it builds the model, naming the file and the tensor; the export keeps the
// source's special token ids.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../hf/hf_fixtures.h"
#include "cli_test_util.h"
#include "tokenizer_test_util.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

// A preset over fixture `name`. lr = 1e-30 and no weight decay: AdamW moves no fp32 weight of
// this size (an update of ~1e-30 against an ulp of ~1e-9), so every step sees the loaded weights
// and what is exported is what was loaded.
std::string hf_preset(const std::string& name, const std::string& fixture) {
  const std::string path = fresh_dir("hf_" + name) + ".toml";
  std::ofstream(path) << "description = \"hf test\"\n[model]\nhf_path = \"" << fixture << "\"\n"
                      << "[training]\nseq_len = 64\nsteps = 2\nlr = 1e-30\nweight_decay = 0.0\nwarmup_steps = 0\n"
                      << "device = \"cpu\"\n[parallel]\nworld_size = 1\nulysses_degree = 1\nfsdp = false\n"
                      << "[output]\ntrace = false\n";
  return path;
}

// The issue's bound on logits against transformers: fp32 on the CPU, the same weights.
constexpr double kLogitTolerance = 1e-4;

void check_exported(const std::string& out, const std::string& fixture, const std::string& architecture) {
  std::string why;
  const auto verdict = hf_check_export(out, fixture, &why);
  INFO(why);
  REQUIRE(verdict.has_value());
  INFO(verdict->dump());
  CHECK(verdict->at("architecture").get<std::string>() == architecture);
  CHECK(verdict->at("max_abs_logit").get<double>() > 1.0);  // a model whose logits say something
  CHECK(verdict->at("max_abs_logit_diff").get<double>() <= kLogitTolerance);
}

}  // namespace

TEST_CASE("hf cli: check and plan read the shape from config.json, train loads it and exports at the end",
          "[cli][hf]") {
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  const std::string preset = hf_preset("plain", fixture);
  const Run check = run_odyssey("check " + preset);
  INFO(check.out << check.err);
  CHECK(check.code == 0);
  CHECK_THAT(check.out, Catch::Contains("ok (hf,"));
  const Run plan = run_odyssey("plan " + preset + " --json");
  INFO(plan.err);
  REQUIRE(plan.code == 0);
  CHECK(parse_json(plan.out).has_value());

  const std::string dir = fresh_dir("hf_plain_run"), exported = fresh_dir("hf_plain_export");
  const Run train = run_odyssey("train " + preset + " --out " + dir + " --set output.export_hf=" + exported);
  INFO(train.out << train.err);
  REQUIRE(train.code == 0);
  CHECK_THAT(train.out + train.err, Catch::Contains("weights: " + fixture));
  CHECK_THAT(train.out + train.err, Catch::Contains("exported step 2"));
  check_exported(exported, fixture, "LlamaForCausalLM");
  // Resuming needs no Hugging Face directory: the checkpoint's config names the shape.
  const std::string saved = read_text(dir + "/checkpoints/step_00000002/config.toml");
  CHECK_THAT(saved, Catch::Contains("hf_path = \"\""));
  CHECK_THAT(saved, !Catch::Contains(fixture));
  CHECK_THAT(saved, Catch::Contains("rope_scaling = \"llama3\""));
}

TEST_CASE(
    "hf cli: four ranks with Ulysses, FSDP and every memory technique give the plain run's losses, and "
    "their sharded checkpoint exports whole",
    "[cli][hf]") {
  const std::string fixture = hf_fixture("qwen3-yarn");
  const std::string preset = hf_preset("ranks", fixture);
  const std::string plain = fresh_dir("hf_ranks_plain");
  const Run one = run_odyssey("train " + preset + " --quiet --out " + plain);
  INFO(one.out << one.err);
  REQUIRE(one.code == 0);
  const std::string stacked = fresh_dir("hf_ranks_stacked");
  const Run four = run_odyssey(
      "train " + preset + " --quiet --out " + stacked +
      " --set parallel.world_size=4 --set parallel.ulysses_degree=4 --set parallel.fsdp=true"
      " --set memory.activation_checkpointing=true --set memory.offload_activations=true --set memory.tiled_mlp=true"
      " --set memory.mlp_tile_tokens=4 --set memory.tiled_loss=true --set memory.loss_tile_tokens=4"
      " --set memory.untied_ulysses=true --set memory.heads_per_stage=4");
  INFO(four.out << four.err);
  REQUIRE(four.code == 0);
  const auto reference = losses(plain), got = losses(stacked);
  REQUIRE(reference.size() == 2);
  REQUIRE(got.size() == 2);
  for (const auto& [step, loss] : reference) {
    INFO("step " << step << ": plain " << loss << ", four ranks " << got.at(step));
    // fp32 sums in another order (sharded sequence, tiles, stages): ~300 rounding steps of 6e-8
    // between the weights and the mean loss, times kappa 2: 4e-5 relative at most.
    CHECK(std::abs(got.at(step) - loss) <= 1e-4 * std::abs(loss));
  }
  // Four FSDP rank files assembled into one model, written in shards with an index.
  const std::string exported = fresh_dir("hf_ranks_export");
  const Run exp = run_odyssey("export " + stacked + " --hf " + exported + " --max-shard-size 50KB --json");
  INFO(exp.out << exp.err);
  REQUIRE(exp.code == 0);
  const auto summary = parse_json(exp.out);
  REQUIRE(summary.has_value());
  CHECK(summary->at("files").size() > 2);  // several safetensors and the index
  CHECK(std::ifstream(exported + "/model.safetensors.index.json").good());
  check_exported(exported, fixture, "Qwen3ForCausalLM");
  // An existing directory is never overwritten.
  const Run again = run_odyssey("export " + stacked + " --hf " + exported);
  CHECK(again.code == 2);
  CHECK_THAT(again.err, Catch::Contains("exists and is not empty"));
}

TEST_CASE("hf cli: an export of a YaRN model advertises the context its factor reaches", "[cli][hf]") {
  // The fixture's YaRN stretches 16 pretraining positions 4 times, to its max_position_embeddings
  // (64). A factor of 16 set over it reaches 256: the export said 64 (the longer of the run's 64 and
  // the source's), and transformers warns when max_position_embeddings / original differs from
  // the factor.
  const std::string preset = hf_preset("yarn_context", hf_fixture("qwen3-yarn"));
  const std::string dir = fresh_dir("hf_yarn_context_run"), exported = fresh_dir("hf_yarn_context_export");
  const Run train =
      run_odyssey("train " + preset + " --quiet --set training.steps=1 --set model.rope_factor=16 --out " + dir +
                  " --set output.export_hf=" + exported);
  INFO(train.out << train.err);
  REQUIRE(train.code == 0);
  const auto config = parse_json(read_text(exported + "/config.json"));
  REQUIRE(config.has_value());
  CHECK(config->at("max_position_embeddings").get<int64_t>() == 16 * 16);
  const auto& rope = config->at("rope_scaling");
  CHECK(rope.at("factor").get<double>() == 16.0);
  CHECK(rope.at("original_max_position_embeddings").get<int64_t>() == 16);
}

TEST_CASE("hf cli: an export keeps the source's bos, eos and pad token ids and its chat template", "[cli][hf]") {
  // The fixture copied with ids no config class defaults to; without them in the export,
  // transformers took LlamaConfig's bos 1 and eos 2 and generation had no end of sequence (where
  // no generation_config.json travels with it: this copy has none).
  const std::string source = fresh_dir("hf_token_ids_source");
  std::filesystem::create_directories(source);
  for (const char* file : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(hf_fixture("llama-gqa-llama3") + "/" + file, source + "/" + file);
  auto config = parse_json(read_text(source + "/config.json"));
  REQUIRE(config.has_value());
  (*config)["bos_token_id"] = 5;
  (*config)["eos_token_id"] = Json::array({7, 9});  // Llama 3.1's config gives a list
  (*config)["pad_token_id"] = 3;
  std::ofstream(source + "/config.json") << config->dump(2) << "\n";
  // transformers 5 saves a chat template beside the tokenizer: carried by the run, exported
  const std::string chat_template = "{% for m in messages %}{{ m['content'] }}</s>{% endfor %}\n";
  std::ofstream(source + "/chat_template.jinja") << chat_template;
  const std::string preset = hf_preset("token_ids", source);
  const std::string dir = fresh_dir("hf_token_ids_run"), exported = fresh_dir("hf_token_ids_export");
  const Run train = run_odyssey("train " + preset + " --quiet --set training.steps=1 --out " + dir +
                                " --set output.export_hf=" + exported);
  INFO(train.out << train.err);
  REQUIRE(train.code == 0);
  const auto written = parse_json(read_text(exported + "/config.json"));
  REQUIRE(written.has_value());
  CHECK(written->at("bos_token_id") == Json(5));
  CHECK(written->at("eos_token_id") == Json::array({7, 9}));
  CHECK(written->at("pad_token_id") == Json(3));
  CHECK(written->at("architectures") == Json::array({"LlamaForCausalLM"}));  // the rest is the export's own
  CHECK(read_text(exported + "/chat_template.jinja") == chat_template);
  // exported again with a tokenizer-only directory (no config.json beside it): the model's own ids
  const std::string tokenizer_dir = fresh_dir("hf_token_ids_tokenizer");
  std::filesystem::create_directories(tokenizer_dir);
  make_tokenizer(tokenizer_dir, {"[UNK]", "</s>", "the", "cat"});
  const std::string again = fresh_dir("hf_token_ids_export_again");
  require_exit(run_odyssey("export " + dir + " --hf " + again + " --tokenizer " + tokenizer_dir), 0);
  const auto rewritten = parse_json(read_text(again + "/config.json"));
  REQUIRE(rewritten.has_value());
  CHECK(rewritten->at("bos_token_id") == Json(5));
  CHECK(rewritten->at("eos_token_id") == Json::array({7, 9}));
  CHECK(rewritten->at("pad_token_id") == Json(3));
  // a tokenizer with its tokenizer_config.json: its bos and eos as its tokenizer.json numbers them
  // ("the" 2, "</s>" 1); it names no pad token, which the model's config gives
  std::ofstream(tokenizer_dir + "/tokenizer_config.json")
      << R"({"bos_token": "the", "eos_token": {"content": "</s>", "special": true}, "pad_token": null})";
  const std::string third = fresh_dir("hf_token_ids_export_third");
  // (the tokenizer.json named itself: its folder, as eval --tokenizer takes it)
  const Run with_tokenizer =
      run_odyssey("export " + dir + " --hf " + third + " --tokenizer " + tokenizer_dir + "/tokenizer.json");
  require_exit(with_tokenizer, 0);
  CHECK(with_tokenizer.err.find("no tokenizer exported") == std::string::npos);
  const auto from_tokenizer = parse_json(read_text(third + "/config.json"));
  REQUIRE(from_tokenizer.has_value());
  CHECK(from_tokenizer->at("bos_token_id") == Json(2));
  CHECK(from_tokenizer->at("eos_token_id") == Json(1));
  CHECK(from_tokenizer->at("pad_token_id") == Json(3));
}

TEST_CASE("hf cli: a tied bf16 checkpoint exports in bfloat16 and loads back into transformers", "[cli][hf]") {
  const std::string fixture = hf_fixture("llama-tied-bf16-sharded");
  const std::string dir = fresh_dir("hf_tied_run");
  const Run train = run_odyssey("train " + hf_preset("tied", fixture) + " --quiet --out " + dir);
  INFO(train.out << train.err);
  REQUIRE(train.code == 0);
  const std::string exported = fresh_dir("hf_tied_export");
  const Run exp = run_odyssey("export " + dir + " --hf " + exported + " --dtype bfloat16");
  INFO(exp.out << exp.err);
  REQUIRE(exp.code == 0);
  // The weights were bf16 to begin with, so the bf16 export holds them exactly.
  check_exported(exported, fixture, "LlamaForCausalLM");
  CHECK_THAT(read_text(exported + "/config.json"), Catch::Contains("\"tie_word_embeddings\": true"));
}

TEST_CASE("hf cli: broken directories are refused with exit 2 naming the file, key or tensor", "[cli][hf]") {
  struct Case {
    const char* fixture;
    const char* command;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"bad-model-type", "check", {"config.json", "\"model_type\" = \"mixtral\"", "llama, qwen3"}},
      {"bad-rope-type", "check", {"config.json", "rope_parameters.rope_type", "longrope"}},
      {"bad-missing-tensor", "train", {"model.layers.1.mlp.down_proj.weight", "needs"}},
      {"bad-shape", "train", {"model.safetensors", "model.layers.0.self_attn.k_proj.weight", "[64, 64]", "[32, 64]"}},
      {"bad-dtype", "train", {"model.norm.weight", "I64"}},
      {"bad-extra-tensor", "train", {"model.layers.0.self_attn.q_proj.bias", "no parameter of this model"}},
      {"bad-truncated", "train", {"model.safetensors", "truncated"}},
  };
  for (const Case& c : cases) {
    const std::string dir = fresh_dir(std::string("hf_bad_") + c.fixture);
    const Run r = run_odyssey(std::string(c.command) + " " + hf_preset(c.fixture, hf_fixture(c.fixture)) +
                              (std::string(c.command) == "train" ? " --quiet --out " + dir : ""));
    INFO(c.fixture << ": " << r.out << r.err);
    CHECK(r.code == 2);
    for (const auto& text : c.says) CHECK_THAT(r.err, Catch::Contains(text));
    // Refused before the run started: no metrics, no checkpoint.
    CHECK(!std::ifstream(dir + "/metrics.jsonl").good());
    if (std::string(c.command) != "train") continue;
    // What train refuses before it builds the model, check refuses too, at model.hf_path's line
    // (it read config.json alone and passed these).
    const Run checked = run_odyssey("check " + hf_preset(std::string(c.fixture) + "_check", hf_fixture(c.fixture)));
    INFO("check: " << checked.out << checked.err);
    CHECK(checked.code == 2);
    CHECK_THAT(checked.err, Catch::Contains(".toml:3:1: model.hf_path = \"" + hf_fixture(c.fixture) + "\": "));
    for (const auto& text : c.says) CHECK_THAT(checked.err, Catch::Contains(text));
  }
  const Run missing = run_odyssey("check " + hf_preset("nowhere", "/nonexistent/model"));
  CHECK(missing.code == 2);
  CHECK_THAT(missing.err, Catch::Contains("model.hf_path"));
}

TEST_CASE("hf cli: a NaN weight is refused with exit 2 naming the file, the tensor and the element, not a NaN loss",
          "[cli][hf]") {
  // It surfaced as "loss is NaN at step 1" (a runtime failure, exit 1) with no word of its origin.
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  std::vector<HfTensor> tensors = read_hf_tensors(fixture + "/model.safetensors");
  for (HfTensor& t : tensors)
    if (t.name == "model.layers.0.mlp.down_proj.weight") {
      REQUIRE(t.dtype == "F32");
      const uint32_t nan = 0x7FC00000u;
      std::memcpy(t.bytes.data() + 4 * 100, &nan, 4);  // element 100
    }
  const std::string model = write_hf_variant(fresh_dir("hf_nan_model"), fixture, tensors);
  const std::string dir = fresh_dir("hf_nan_run");
  const Run r = run_odyssey("train " + hf_preset("nan", model) + " --quiet --out " + dir);
  INFO(r.out << r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains(model + "/model.safetensors") &&
                        Catch::Contains("'model.layers.0.mlp.down_proj.weight'") &&
                        Catch::Contains("element 100 (at [") && Catch::Contains("is NaN"));
  CHECK_THAT(r.err, !Catch::Contains("loss is NaN"));
}

TEST_CASE("hf cli: a tokenizer file of the model directory that is not a regular file is refused before the run",
          "[cli][hf]") {
  // The run copies the directory's tokenizer files into its checkpoints, read before any output:
  // a directory where tokenizer.json belongs is named with exit 2, not found at the first checkpoint.
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  const std::string model =
      write_hf_variant(fresh_dir("hf_tokenizer_dir_model"), fixture, read_hf_tensors(fixture + "/model.safetensors"));
  REQUIRE(std::system(("mkdir -p '" + model + "/tokenizer.json'").c_str()) == 0);
  const std::string dir = fresh_dir("hf_tokenizer_dir_run");
  const Run r = run_odyssey("train " + hf_preset("tokenizer_dir", model) + " --quiet --out " + dir);
  INFO(r.out << r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains(model + "/tokenizer.json") && Catch::Contains("is a directory"));
  CHECK(!std::ifstream(dir + "/metrics.jsonl").good());
  CHECK(!std::ifstream(dir + "/checkpoints/latest.json").good());
  // Under torchrun every process reads the files and refuses on its own: none is left waiting for
  // a rank 0 that has exited (the collectives' timeout would be its only way out).
  const std::string procs = fresh_dir("hf_tokenizer_dir_torchrun");
  const std::vector<pid_t> pids =
      spawn_torchrun("train " + hf_preset("tokenizer_dir_torchrun", model) +
                         " --quiet --set parallel.world_size=2 --set parallel.ulysses_degree=2 --out " + procs,
                     procs);
  require_ranks_exit(pids, procs, 2, 60);
}

TEST_CASE("hf cli: under torchrun each process loads its own FSDP shard and the losses equal the in-process run's",
          "[cli][hf][torchrun]") {
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  const std::string args =
      "train " + hf_preset("torchrun", fixture) +
      " --quiet --set parallel.world_size=2 --set parallel.ulysses_degree=2 --set parallel.fsdp=true ";
  const std::string threads = fresh_dir("hf_torchrun_threads");
  const Run reference = run_odyssey(args + "--out " + threads);
  INFO(reference.out << reference.err);
  REQUIRE(reference.code == 0);
  const std::string dir = fresh_dir("hf_torchrun");
  require_ranks_exit_zero(spawn_torchrun(args + "--out " + dir, dir), dir);
  CHECK_THAT(read_text(dir + ".rank0.log"), Catch::Contains("weights: " + fixture));
  const auto want = losses(threads), got = losses(dir);
  REQUIRE(want.size() == 2);
  REQUIRE(got.size() == 2);
  for (const auto& [step, loss] : want) CHECK(got.at(step) == loss);  // bit for bit, as the other torchrun test
  // Each process reads its own node's copy of model.hf_path (here each in its own directory, one
  // relative path): copies whose weights differ (one byte of one tensor) trained their ranks from
  // other models in silence. Every process exits 2 naming the weights, before any is loaded.
  const std::string nodes = fresh_dir("hf_torchrun_nodes");
  REQUIRE(std::system(("mkdir -p " + nodes + "/a " + nodes + "/b && cp -r " + fixture + " " + nodes +
                       "/a/model && cp -r " + fixture + " " + nodes + "/b/model")
                          .c_str()) == 0);
  {
    std::fstream weights(nodes + "/b/model/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(weights.good());
    weights.seekg(-2, std::ios::end);  // the low byte of the last element (fp32 or bf16): still finite
    const char low = static_cast<char>(weights.get());
    weights.seekp(-2, std::ios::end);
    weights.put(static_cast<char>(low ^ 1));
  }
  const std::string other = fresh_dir("hf_torchrun_other_weights");
  const std::vector<std::string> logs =
      require_ranks_exit(spawn_torchrun(args + "--set model.hf_path=model --out " + other, other, 2,
                                        "; cd " + nodes + "/$([ \"$RANK\" = 1 ] && echo b || echo a)"),
                         other, 2, 60);
  for (const std::string& log : logs)
    CHECK_THAT(log, Catch::Contains("rank 1 refused to start: its process runs another job than rank 0's (the "
                                    "weights at model.hf_path config.json: ") &&
                        Catch::Contains("model.safetensors: "));
}
