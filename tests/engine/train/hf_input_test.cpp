// Hugging Face input that is old, broken or hostile: rotary buffers of older Llama checkpoints
// ignored, NaN/inf weights refused with their place, a file shrinking under the load.
// defines: test cases [engine][hf][input]
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "../engine_test_util.h"
#include "../../hf/hf_fixtures.h"
#include "engine/config/preset.h"
#include "engine/train/hf_checkpoint.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::string scratch(const std::string& name) {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/hf_input_test/" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

RunConfig config_of(const std::string& dir) {
  const LoadedPreset loaded = load_preset_text("[model]\nhf_path = \"" + dir +
                                                   "\"\n[training]\nseq_len = 32\ndevice = \"cpu\"\n[parallel]\nworld_size = 1\n",
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

}  // namespace

TEST_CASE("hf input: an older Llama checkpoint's rotary_emb.inv_freq buffers are ignored, the weights load",
          "[engine][hf][input]") {
  // The suffix was compared over 21 characters against a 20-character literal: never equal, so
  // these checkpoints were refused as "no parameter of this model".
  const std::string fixture = hf_fixture("llama-gqa-llama3");
  std::vector<HfTensor> tensors = read_hf_tensors(fixture + "/model.safetensors");
  for (int layer = 0; layer < 2; ++layer)
    tensors.push_back({"model.layers." + std::to_string(layer) + ".self_attn.rotary_emb.inv_freq", "F32", {4},
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
  const std::string dir = write_hf_variant(scratch("shrink") + "/model", fixture, read_hf_tensors(fixture + "/model.safetensors"));
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

