// Hugging Face input that is old, broken or hostile, and exports that race: rotary buffers of older
// Llama checkpoints ignored, NaN/inf weights refused with their place, a file shrinking under the
// load, malformed and 300k-entry indexes, and export_hf's private staging and single-rename publish.
// defines: test cases [engine][hf][input]
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "../common/engine_test_util.h"
#include "../hf/hf_fixtures.h"
#include "engine/config/preset.h"
#include "engine/train/checkpoint_io.h"
#include "engine/train/hf_checkpoint.h"
#include "engine/util/files.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::string scratch(const std::string& name) {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/hf_input_test/" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

RunConfig config_of(const std::string& dir) {
  const LoadedPreset loaded = load_preset_text(
      "[model]\nhf_path = \"" + dir + "\"\n[training]\nseq_len = 32\ndevice = \"cpu\"\n[parallel]\nworld_size = 1\n",
      "hf-input-test.toml");
  INFO((loaded.issues.empty() ? std::string() : loaded.issues.front().format()));
  REQUIRE(loaded.ok());
  return loaded.config;
}

HfTensor& tensor_named(std::vector<HfTensor>& all, const std::string& name) {
  for (HfTensor& t : all)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return all.front();  // not reached
}

/// `t` stored as `dtype` ("BF16", "F16") instead of F32, its values rounded.
void store_as(HfTensor& t, const std::string& dtype) {
  REQUIRE(t.dtype == "F32");
  const at::Tensor f32 = at::from_blob(t.bytes.data(), {static_cast<int64_t>(t.bytes.size() / 4)}, at::kFloat);
  const at::Tensor low = f32.to(dtype == "BF16" ? at::kBFloat16 : at::kHalf).contiguous();
  t.bytes.assign(static_cast<const char*>(low.data_ptr()), low.nbytes());
  t.dtype = dtype;
}

template <typename T>
void set_element(HfTensor& t, int64_t i, T bits) {
  std::memcpy(t.bytes.data() + i * static_cast<int64_t>(sizeof(T)), &bits, sizeof(T));
}

std::string load_error(const std::string& dir) {
  const RunConfig cfg = config_of(dir);
  Trainer trainer(cfg, cpu_rank());
  try {
    HfWeights(dir, cfg.model).load(trainer.model().groups());
  } catch (const HfCheckpointError& e) {
    return e.what();
  }
  return "";
}

/// A run directory with a checkpoint of the tiny model (step 0), for export_hf.
std::string checkpointed_run(const std::string& name) {
  const std::string run = scratch(name);
  Trainer trainer(tiny_config(), cpu_rank());
  save_checkpoint(trainer, run);
  return run;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("hf input: an older Llama checkpoint's rotary_emb.inv_freq buffers are ignored, the weights load",
          "[engine][hf][input]") {
  // The suffix was compared over 21 characters against a 20-character literal: never equal, so
  // these checkpoints were refused as "no parameter of this model".
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  std::vector<HfTensor> tensors = read_hf_tensors(fixture + "/model.safetensors");
  for (int layer = 0; layer < 2; ++layer)
    tensors.push_back({"model.layers." + std::to_string(layer) + ".self_attn.rotary_emb.inv_freq",
                       "F32",
                       {4},
                       std::string(16, '\0')});
  const std::string dir = write_hf_variant(scratch("inv_freq") + "/model", fixture, tensors);
  const RunConfig cfg = config_of(dir);
  Trainer loaded(cfg, cpu_rank()), reference(config_of(fixture), cpu_rank());
  REQUIRE_NOTHROW(HfWeights(dir, cfg.model).load(loaded.model().groups()));
  HfWeights(fixture, cfg.model).load(reference.model().groups());
  for (size_t g = 0; g < loaded.model().groups().size(); ++g)
    CHECK(at::equal(loaded.model().groups()[g]->master.detach(), reference.model().groups()[g]->master.detach()));
  // A name that merely contains the suffix's words is still no parameter.
  tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq.extra", "F32", {1}, std::string(4, '\0')});
  const std::string other = write_hf_variant(scratch("inv_freq_extra") + "/model", fixture, tensors);
  CHECK_THROWS_WITH(HfWeights(other, cfg.model), Catch::Contains("inv_freq.extra' is no parameter of this model"));
}

TEST_CASE("hf input: a NaN or infinite weight is refused while loading, naming the file, the tensor and the element",
          "[engine][hf][input]") {
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  struct Case {
    const char* tensor;
    const char* dtype;  // stored as
    int64_t row, col;
    const char* says;
  };
  for (const Case& c : {Case{"model.layers.1.mlp.up_proj.weight", "F32", 3, 5, "is NaN"},
                        Case{"model.layers.0.self_attn.k_proj.weight", "BF16", 0, 7, "is inf"},
                        Case{"model.layers.1.self_attn.o_proj.weight", "F16", 9, 0, "is -inf"}}) {
    INFO(c.tensor << " as " << c.dtype);
    std::vector<HfTensor> tensors = read_hf_tensors(fixture + "/model.safetensors");
    HfTensor& t = tensor_named(tensors, c.tensor);
    if (std::string(c.dtype) != "F32") store_as(t, c.dtype);
    const int64_t element = c.row * t.shape[1] + c.col;
    if (std::string(c.dtype) == "F32") set_element<uint32_t>(t, element, 0x7FC00000u);  // NaN
    if (std::string(c.dtype) == "BF16") set_element<uint16_t>(t, element, 0x7F80);      // +inf
    if (std::string(c.dtype) == "F16") set_element<uint16_t>(t, element, 0xFC00);       // -inf
    const std::string dir = write_hf_variant(scratch(std::string("nonfinite_") + c.dtype) + "/model", fixture, tensors);
    const std::string why = load_error(dir);
    CHECK_THAT(why, Catch::Contains(dir + "/model.safetensors") && Catch::Contains(std::string("'") + c.tensor + "'") &&
                        Catch::Contains("element " + std::to_string(element) + " (at [" + std::to_string(c.row) + ", " +
                                        std::to_string(c.col) + "] of [" + std::to_string(t.shape[0]) + ", " +
                                        std::to_string(t.shape[1]) + "])") &&
                        Catch::Contains(c.says));
  }
}

TEST_CASE("hf input: a checkpoint file that shrinks after it was checked fails the load naming it, never SIGBUS",
          "[engine][hf][input]") {
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  const std::string dir =
      write_hf_variant(scratch("shrink") + "/model", fixture, read_hf_tensors(fixture + "/model.safetensors"));
  const RunConfig cfg = config_of(dir);
  Trainer trainer(cfg, cpu_rank());
  const HfWeights weights(dir, cfg.model);  // checked in full
  struct stat st {};
  REQUIRE(::stat((dir + "/model.safetensors").c_str(), &st) == 0);
  REQUIRE(::truncate((dir + "/model.safetensors").c_str(), st.st_size / 2) == 0);
  std::string why;
  try {
    weights.load(trainer.model().groups());
  } catch (const SafetensorsReadError& e) {  // a runtime failure (exit 1): the file was valid when checked
    why = e.what();
  }
  CHECK_THAT(why, Catch::Contains(dir + "/model.safetensors") && Catch::Contains("changed while it was read"));
}

TEST_CASE("hf input: a malformed safetensors index is refused naming the file, the key and the value",
          "[engine][hf][input]") {
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  const std::string dir =
      write_hf_variant(scratch("index") + "/model", fixture, read_hf_tensors(fixture + "/model.safetensors"));
  // a shard, not model.safetensors: beside a single file the index is not read (as transformers)
  REQUIRE(std::rename((dir + "/model.safetensors").c_str(), (dir + "/model-00001-of-00001.safetensors").c_str()) == 0);
  const std::string index = dir + "/model.safetensors.index.json";
  const RunConfig cfg = config_of(dir);
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"metadata\":{}}", "needs a \"weight_map\" object"},
      {"{\"weight_map\":[]}", "\"weight_map\" = [...]: must be an object"},
      {"{\"weight_map\":{\"a\":\"model.safetensors\",\"a\":\"model.safetensors\"}}", "names tensor 'a' twice"},
      {"{\"weight_map\":{},\"weight_map\":{}}", "\"weight_map\" appears twice"},
      {"{\"weight_map\":{\"a\":5}}", "\"weight_map\".\"a\" = 5 must be a file name"},
      {"{\"weight_map\":{\"a\":\"../model.safetensors\"}}",
       "\"weight_map\".\"a\" = \"../model.safetensors\" must be a file name"},
      {"{\"metadata\":" + deep + ",\"weight_map\":{}}", "nests more than 64 levels deep"},
      {"{\"weight_map\":{\"a\":\"model.safetensors\"", "not valid JSON at byte"},
      {"[]", "not an array"},
  };
  for (const auto& [text, says] : cases) {
    INFO(text.substr(0, 100));
    std::ofstream(index, std::ios::trunc) << text;
    CHECK_THROWS_WITH(HfWeights(dir, cfg.model),
                      Catch::StartsWith("safetensors index " + index + ": ") && Catch::Contains(says));
  }
  std::remove(index.c_str());
  REQUIRE(::mkdir(index.c_str(), 0755) == 0);  // a directory where the index belongs
  CHECK_THROWS_WITH(HfWeights(dir, cfg.model), Catch::Contains(index) && Catch::Contains("is a directory"));
}

TEST_CASE(
    "hf input: the weights transformers would load, never others: single file first, every shard tensor, a "
    "tied head",
    "[engine][hf][input]") {
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  const std::vector<HfTensor> model = read_hf_tensors(fixture + "/model.safetensors");
  const RunConfig cfg = config_of(fixture);
  auto masters_of = [&](const std::string& dir) {
    Trainer t(cfg, cpu_rank());
    HfWeights(dir, cfg.model).load(t.model().groups());
    std::vector<at::Tensor> out;
    for (auto* g : t.model().groups()) out.push_back(g->master.detach().clone());
    return out;
  };
  auto same = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!at::equal(a[i], b[i])) return false;
    return true;
  };
  const auto reference = masters_of(fixture);
  // 1. model.safetensors beside an index whose shard differs: transformers reads the single file,
  //    and so does this (the shards were read, a different model).
  {
    std::vector<HfTensor> other = model;
    set_element<float>(tensor_named(other, "model.norm.weight"), 0, 0.25f);
    const std::string dir = write_hf_variant(scratch("single_and_index") + "/model", fixture, other);
    REQUIRE(std::rename((dir + "/model.safetensors").c_str(), (dir + "/shard.safetensors").c_str()) == 0);
    std::string index = "{\"weight_map\":{";
    for (size_t i = 0; i < other.size(); ++i) index += (i ? ",\"" : "\"") + other[i].name + "\":\"shard.safetensors\"";
    std::ofstream(dir + "/model.safetensors.index.json") << index << "}}";
    REQUIRE(std::system(("cp '" + fixture + "/model.safetensors' '" + dir + "/'").c_str()) == 0);
    CHECK(same(masters_of(dir), reference));
  }
  // 2. a shard tensor the index does not list is checked as a single file's is: refused as no
  //    parameter (it was skipped unseen).
  {
    std::vector<HfTensor> tensors = model;
    tensors.push_back({"foo.bar", "F32", {1}, std::string(4, '\0')});
    const std::string dir = write_hf_variant(scratch("unlisted") + "/model", fixture, tensors);
    REQUIRE(std::rename((dir + "/model.safetensors").c_str(), (dir + "/shard.safetensors").c_str()) == 0);
    std::string index = "{\"weight_map\":{";
    for (size_t i = 0; i < model.size(); ++i) index += (i ? ",\"" : "\"") + model[i].name + "\":\"shard.safetensors\"";
    std::ofstream(dir + "/model.safetensors.index.json") << index << "}}";
    CHECK_THROWS_WITH(HfWeights(dir, cfg.model), Catch::Contains(dir + "/shard.safetensors") &&
                                                     Catch::Contains("'foo.bar' is no parameter of this model"));
  }
  // 3. a tied model (the fixture's config with tie_word_embeddings true, no lm_head) whose file
  //    also holds lm_head.weight: its very bytes load, another head is refused (transformers would
  //    load it untied, a different model), as is one of another shape.
  {
    std::vector<HfTensor> tied;
    for (const HfTensor& t : model)
      if (t.name != "lm_head.weight") tied.push_back(t);
    HfTensor head = tensor_named(tied, "model.embed_tokens.weight");
    head.name = "lm_head.weight";
    auto tied_dir = [&](const std::string& name, const std::vector<HfTensor>& tensors) {
      const std::string dir = write_hf_variant(scratch(name) + "/model", fixture, tensors);
      std::ifstream in(dir + "/config.json");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t at = text.find("\"tie_word_embeddings\": false");
      REQUIRE(at != std::string::npos);
      text.replace(at, 28, "\"tie_word_embeddings\": true");
      std::ofstream(dir + "/config.json", std::ios::trunc) << text;
      return dir;
    };
    std::vector<HfTensor> same_head = tied;
    same_head.push_back(head);
    const std::string ok = tied_dir("tied_same_head", same_head);
    const RunConfig tied_cfg = config_of(ok);
    REQUIRE(tied_cfg.model.tie_embeddings);
    CHECK_NOTHROW(HfWeights(ok, tied_cfg.model));
    std::vector<HfTensor> other_head = same_head;
    set_element<float>(other_head.back(), 7, 0.5f);
    CHECK_THROWS_WITH(
        HfWeights(tied_dir("tied_other_head", other_head), tied_cfg.model),
        Catch::Contains("'lm_head.weight' differs from 'model.embed_tokens.weight' (from element 0 on)") &&
            Catch::Contains("set tie_word_embeddings to false"));
    std::vector<HfTensor> short_head = tied;
    short_head.push_back({"lm_head.weight", "F32", {3}, std::string(12, '\0')});
    CHECK_THROWS_WITH(HfWeights(tied_dir("tied_short_head", short_head), tied_cfg.model),
                      Catch::Contains("'lm_head.weight' is F32 [3], 'model.embed_tokens.weight' F32 ["));
  }
}

TEST_CASE("hf input: a 300k-entry index and its safetensors are read in time linear in their size",
          "[engine][hf][input]") {
  // Both were ordered_json documents, each key inserted with a linear scan: 300k entries took
  // minutes. Each extra tensor is an older checkpoint's rotary buffer (ignored), so the directory
  // loads. Pass: 300k within 30x of 30k (linear is ~10x, quadratic 100x) or under 20 s outright
  // (a linear read takes a few seconds on a slow shared machine, a quadratic one minutes).
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  const std::vector<HfTensor> model = read_hf_tensors(fixture + "/model.safetensors");
  auto load_seconds = [&](int extra) {
    std::vector<HfTensor> tensors = model;
    for (int i = 0; i < extra; ++i)
      tensors.push_back({"model.layers." + std::to_string(100 + i) + ".self_attn.rotary_emb.inv_freq",
                         "F32",
                         {1},
                         std::string(4, '\0')});
    const std::string dir = write_hf_variant(scratch("linear_" + std::to_string(extra)) + "/model", fixture, tensors);
    REQUIRE(std::rename((dir + "/model.safetensors").c_str(), (dir + "/model-00001-of-00001.safetensors").c_str()) ==
            0);
    std::string index = "{\"metadata\":{\"total_size\":1},\"weight_map\":{";
    for (size_t i = 0; i < tensors.size(); ++i)
      index += (i ? ",\"" : "\"") + tensors[i].name + "\":\"model-00001-of-00001.safetensors\"";
    std::ofstream(dir + "/model.safetensors.index.json") << index << "}}";
    const RunConfig cfg = config_of(dir);
    const auto t0 = std::chrono::steady_clock::now();
    const HfWeights weights(dir, cfg.model);
    const double s = seconds_since(t0);
    CHECK_THAT(weights.describe(), Catch::Contains("1 file, "));
    return s;
  };
  const double small = load_seconds(30'000), large = load_seconds(300'000);
  std::printf("hf index: 30k entries %.3f s, 300k entries %.3f s (x%.1f)\n", small, large, large / small);
  CHECK((large < 20.0 || large < 30 * small));
}

TEST_CASE("hf input: export stages beside OUT (trailing slash or not) and removes nothing it did not create",
          "[engine][hf][input]") {
  const std::string run = checkpointed_run("export_run");
  const std::string root = scratch("export_beside");
  // Someone else's folder where the old export staged (and removed whatever it found there).
  REQUIRE(make_dirs(root + "/out.partial"));
  std::ofstream(root + "/out.partial/keep") << "not the export's";
  const HfExport done = export_hf(run, root + "/out//");
  CHECK(done.files.size() == 2);
  CHECK(path_exists(root + "/out/model.safetensors"));
  CHECK(path_exists(root + "/out/config.json"));
  CHECK(read_file_bounded(root + "/out.partial/keep", 100, "kept file") == "not the export's");
  auto names = list_dir(root);
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"out", "out.partial"});  // no staging folder left behind
  // mkdtemp's private 0700 widened to what mkdir gives a directory under this umask.
  REQUIRE(::mkdir((root + "/reference").c_str(), 0777) == 0);
  struct stat st {
  }, made{};
  REQUIRE(::stat((root + "/out").c_str(), &st) == 0);
  REQUIRE(::stat((root + "/reference").c_str(), &made) == 0);
  CHECK((st.st_mode & 0777) == (made.st_mode & 0777));
  REQUIRE(::rmdir((root + "/reference").c_str()) == 0);
  // An existing empty directory is filled; a non-empty one, a file or a link is refused.
  REQUIRE(make_dirs(root + "/empty"));
  CHECK_NOTHROW(export_hf(run, root + "/empty"));
  CHECK_THROWS_WITH(export_hf(run, root + "/out"), Catch::Contains("exists and is not empty"));
  std::ofstream(root + "/file") << "x";
  CHECK_THROWS_WITH(export_hf(run, root + "/file"),
                    Catch::Contains(root + "/file exists and is a file, not a directory"));
  REQUIRE(::symlink((root + "/none").c_str(), (root + "/link").c_str()) == 0);
  CHECK_THROWS_WITH(export_hf(run, root + "/link"), Catch::Contains("is a symbolic link"));
}

TEST_CASE(
    "hf input: of two exports into one folder only the first to publish succeeds, the other removes only its "
    "own staging",
    "[engine][hf][input]") {
  const std::string run = checkpointed_run("export_race_run");
  const std::string root = scratch("export_race");
  HfExportOptions options;
  // Another export publishes into OUT after this one checked it (absent) and before it renames.
  options.before_publish = [&] {
    REQUIRE(make_dirs(root + "/out"));
    std::ofstream(root + "/out/config.json") << "the other export's";
  };
  std::string why;
  try {
    export_hf(run, root + "/out", options);
  } catch (const CheckpointError& e) {
    why = e.what();
  }
  CHECK_THAT(why, Catch::Contains(root + "/out was written by another export meanwhile"));
  CHECK(read_file_bounded(root + "/out/config.json", 100, "config") == "the other export's");
  CHECK(list_dir(root + "/out").size() == 1);
  CHECK(list_dir(root) == std::vector<std::string>{"out"});  // this export's staging removed, nothing else
  // A later export sees the winner's folder and touches nothing.
  options.before_publish = nullptr;
  CHECK_THROWS_WITH(export_hf(run, root + "/out", options), Catch::Contains("exists and is not empty"));
  CHECK(list_dir(root + "/out").size() == 1);
}

TEST_CASE("hf input: a tokenizer file that is a directory or a FIFO is refused naming it, before anything is written",
          "[engine][hf][input]") {
  const std::string run = checkpointed_run("export_tokenizer_run");
  const std::string root = scratch("export_tokenizer");
  HfExportOptions options;
  options.tokenizer_dir = root + "/tok";
  REQUIRE(make_dirs(root + "/tok/tokenizer.json"));  // a directory where the file belongs
  CHECK_THROWS_WITH(export_hf(run, root + "/out", options),
                    Catch::Contains(root + "/tok/tokenizer.json") && Catch::Contains("is a directory"));
  REQUIRE(::rmdir((root + "/tok/tokenizer.json").c_str()) == 0);
  REQUIRE(::mkfifo((root + "/tok/tokenizer_config.json").c_str(), 0644) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(export_hf(run, root + "/out", options),
                    Catch::Contains(root + "/tok/tokenizer_config.json") && Catch::Contains("is not a regular file"));
  CHECK(seconds_since(t0) < 10);  // a FIFO with no writer is never opened for a blocking read
  CHECK(list_dir(root) == std::vector<std::string>{"tok"});  // no OUT, no staging
  REQUIRE(std::remove((root + "/tok/tokenizer_config.json").c_str()) == 0);
  // A tokenizer.json cut short, or JSON that is no object: it was carried into every checkpoint
  // and export, and failed only when transformers read it.
  for (const char* damaged : {"{\"version\": \"1.0\", \"model\": {\"vocab\": {\"a\": 0", "[1, 2]"}) {
    INFO(damaged);
    std::ofstream(root + "/tok/tokenizer.json", std::ios::trunc) << damaged;
    CHECK_THROWS_WITH(
        export_hf(run, root + "/out", options),
        Catch::StartsWith("tokenizer " + root + "/tok/tokenizer.json: ") && Catch::Contains("the file is damaged"));
    CHECK_THROWS_AS(read_carried_files(root + "/tok"), HfCheckpointError);  // train's carry: exit 2
    CHECK_THROWS_AS(export_hf(run, root + "/new/deep/out", options), HfCheckpointError);
  }
  CHECK(list_dir(root) == std::vector<std::string>{"tok"});  // no OUT, and no folder made for one
  // An OUT whose folder cannot be made is the user's to change (exit 2), found before the weights.
  std::ofstream(root + "/file") << "x";
  CHECK_THROWS_AS(export_hf(run, root + "/file/out", options), CheckpointError);
  // A tokenizer of more tokens than the model's 64 rows: its ids 64 and up would index past the
  // exported embedding (transformers: IndexError), as eval refuses it. Refused, nothing written.
  {
    std::string vocab;
    for (int i = 0; i <= 64; ++i) vocab += (i ? ", \"t" : "\"t") + std::to_string(i) + "\": " + std::to_string(i);
    std::ofstream(root + "/tok/tokenizer.json", std::ios::trunc)
        << "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {" << vocab << "}}, \"added_tokens\": []}";
    CHECK_THROWS_WITH(export_hf(run, root + "/out", options),
                      Catch::Contains(root + "/tok/tokenizer.json: its vocabulary holds 65 tokens, more than the "
                                             "model's model.vocab_size = 64"));
    std::vector<std::string> left = list_dir(root);  // readdir's order
    std::sort(left.begin(), left.end());
    CHECK(left == std::vector<std::string>{"file", "tok"});
  }
  std::ofstream(root + "/tok/tokenizer.json", std::ios::trunc) << "{\"version\": \"1.0\"}";
  const HfExport done = export_hf(run, root + "/out", options);
  CHECK(read_file_bounded(root + "/out/tokenizer.json", 100, "tokenizer") == "{\"version\": \"1.0\"}");
  CHECK(std::find(done.files.begin(), done.files.end(), "tokenizer.json") != done.files.end());
}
