// Hugging Face checkpoints built by transformers itself, loaded into Odyssey: logits, loss and
// every parameter's gradient on a fixed batch equal transformers' own (fp32, CPU), for Llama with
// GQA and llama3 rope scaling, tied bf16 sharded Llama with linear scaling, and Qwen3 with YaRN.
#include <catch2/catch.hpp>

#include "../common/engine_test_util.h"
#include "../hf/hf_fixtures.h"
#include "engine/config/preset.h"
#include "engine/model/attention.h"
#include "engine/model/block.h"
#include "engine/ops/layers.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/train/hf_checkpoint.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// reference.safetensors as tensors (read into their own memory).
std::map<std::string, at::Tensor> read_reference(const std::string& dir) {
  std::map<std::string, at::Tensor> out;
  for (HfTensor& t : read_hf_tensors(dir + "/reference.safetensors")) {
    const at::ScalarType type = t.dtype == "I64" ? at::kLong : at::kFloat;
    REQUIRE((t.dtype == "I64" || t.dtype == "F32"));
    out[t.name] = at::from_blob(t.bytes.data(), t.shape, at::TensorOptions().dtype(type)).clone();
  }
  return out;
}

RunConfig hf_config(const std::string& dir, int64_t seq) {
  const std::string text = "[model]\nhf_path = \"" + dir + "\"\n[training]\nseq_len = " + std::to_string(seq) +
                           "\ndevice = \"cpu\"\n[parallel]\nworld_size = 1\n";
  const LoadedPreset loaded = load_preset_text(text, "hf-test.toml");
  INFO((loaded.issues.empty() ? std::string() : loaded.issues.front().format()));
  REQUIRE(loaded.ok());
  return loaded.config;
}

/// Logits [B, S, V] of the loaded parameters through the engine's own layer functions (the
/// same composition as model_test's reference; RoPE from the model's scaled frequencies).
at::Tensor engine_logits(Trainer& t, const at::Tensor& ids) {
  at::NoGradGuard no_grad;
  const ModelConfig& m = t.config().model;
  auto groups = t.model().groups();
  auto param = [&](FlatParamGroup* g, size_t i) {
    const ParamSpec& s = g->specs()[i];
    return g->master.detach().narrow(0, s.offset, s.numel()).view(s.shape);
  };
  const Positions pos = make_positions(0, ids.size(1), m, at::kCPU);
  at::Tensor x = at::embedding(param(groups.front(), 0), ids);  // [B, S, d]
  for (int64_t i = 0; i < m.n_layers; ++i) {
    std::vector<at::Tensor> list;
    for (size_t p = 0; p < groups[1 + i]->specs().size(); ++p) list.push_back(param(groups[1 + i], p));
    const BlockWeights w = BlockWeights::from_list(list, m.qk_norm);
    at::Tensor h = x + attention_local(rms_norm(x, w.attn_norm, m.norm_eps), w.attn, pos, m);
    x = h + swiglu_mlp(rms_norm(h, w.mlp_norm, m.norm_eps), w.w_gate, w.w_up, w.w_down);
  }
  FlatParamGroup* head = groups.back();
  const at::Tensor lm = m.tie_embeddings ? param(groups.front(), 0) : param(head, 0);
  const at::Tensor norm = m.tie_embeddings ? param(head, 0) : param(head, 1);
  return at::linear(rms_norm(x, norm, m.norm_eps), lm);  // [B, S, V]
}

void check_against_transformers(const std::string& name) {
  const std::string dir = hf_fixture(name);
  auto ref = read_reference(dir);
  const at::Tensor ids = ref.at("ids"), labels = ref.at("labels");  // [1, S] int64
  const RunConfig cfg = hf_config(dir, ids.size(1));
  Trainer t(cfg, cpu_rank());
  HfWeights(dir, cfg.model).load(t.model().groups());

  // Logits: |logits| <= ~6 here; fp32 sums of at most d_ffn = 96 products per output in another
  // order differ by a few ulps of the partial sums through 2 blocks: well under the issue's 1e-4.
  const at::Tensor logits = engine_logits(t, ids);
  const double logit_diff = (logits - ref.at("logits")).abs().max().item<double>();
  INFO(name << ": max |logit - transformers'| = " << logit_diff);
  CHECK(logit_diff <= 1e-4);

  // The training forward (flat groups, block Functions, tiled loss) and its backward.
  StepRuntime rt;
  const ModelInputs in{ids, labels, at::Tensor(), 0, ids.numel()};
  at::Tensor loss = t.model().forward(in, t.stack(), OffloadStores{}, nullptr, &rt);
  loss.backward();
  const double mine = loss.item<double>(), theirs = ref.at("loss").item<double>();
  INFO(name << ": loss " << mine << ", transformers " << theirs);
  CHECK(std::abs(mine - theirs) <= 1e-4 * std::abs(theirs));  // the issue's 1e-4, relative: mean CE ~ 5
  CHECK(std::abs(mine - theirs) <= loss_tolerance(cfg, 1) * std::abs(theirs) + 1e-6);

  // Every parameter's gradient, relative to its largest element (gradient_tolerance: the
  // reordering bound of this model's chains, engine_test_util.h).
  int compared = 0;
  for (FlatParamGroup* g : t.model().groups())
    for (const ParamSpec& spec : g->specs()) {
      const std::string hf = hf_tensor_name(g->name(), spec.name);
      INFO(name << ": gradient of " << hf);
      REQUIRE(ref.count("grad." + hf));
      const at::Tensor grad = g->grad().narrow(0, spec.offset, spec.numel());
      CHECK(relative_diff(grad, ref.at("grad." + hf).reshape(-1)) <= gradient_tolerance(cfg, 1));
      ++compared;
    }
  CHECK(compared == static_cast<int>(ref.size()) - 4);  // every parameter transformers has, no more
}

}  // namespace

TEST_CASE("hf: a Llama checkpoint with GQA and llama3 rope scaling gives transformers' logits, loss and gradients",
          "[engine][hf][equivalence]") {
  check_against_transformers("llama-gqa-llama3");
}

TEST_CASE("hf: a tied bf16 Llama in a sharded index with linear scaling gives transformers' logits, loss and gradients",
          "[engine][hf][equivalence]") {
  check_against_transformers("llama-tied-bf16-sharded");
}

TEST_CASE("hf: a Qwen3 checkpoint with QK-norm, head_dim 32 and YaRN gives transformers' logits, loss and gradients",
          "[engine][hf][equivalence]") {
  check_against_transformers("qwen3-yarn");
}

TEST_CASE("hf: the preset takes the shape and rope scaling from config.json", "[engine][hf]") {
  const RunConfig llama = hf_config(hf_fixture("llama-gqa-llama3"), 32);
  CHECK(llama.model.flavor == "hf");
  CHECK(llama.model.n_layers == 2);
  CHECK(llama.model.n_kv_heads == 2);
  CHECK(llama.model.rope_scaling.kind == RopeScalingKind::Llama3);
  CHECK(llama.model.rope_scaling.factor == 4.0);
  CHECK(llama.model.rope_scaling.original_max_position == 16);
  const RunConfig tied = hf_config(hf_fixture("llama-tied-bf16-sharded"), 32);
  CHECK(tied.model.tie_embeddings);
  CHECK(tied.model.rope_theta == 500000.0);  // top-level rope_theta beside rope_scaling (4.x spelling)
  CHECK(tied.model.rope_scaling.kind == RopeScalingKind::Linear);
  const RunConfig qwen = hf_config(hf_fixture("qwen3-yarn"), 32);
  CHECK(qwen.model.qk_norm);
  CHECK(qwen.model.head_dim == 32);
  CHECK(qwen.model.rope_scaling.kind == RopeScalingKind::Yarn);
}

TEST_CASE(
    "hf: loading allocates no tensor memory: file bytes are converted through a bounded host buffer into the "
    "master shards",
    "[engine][hf]") {
  // Memory: an 8B checkpoint must never be materialised whole on a rank. The tracker counts every
  // ATen allocation of rank 0; loading a bf16 checkpoint (the converting path) adds none, so a
  // rank's load costs its own shards (already allocated by the model) and the 16 MiB staging
  // buffer (a std::vector, outside ATen), nothing per file.
  const std::string dir = hf_fixture("llama-tied-bf16-sharded");
  const RunConfig cfg = hf_config(dir, 32);
  Trainer t(cfg, cpu_rank());
  MemoryTracker& tracker = MemoryTracker::instance();
  REQUIRE(tracker.cpu_allocator_installed());
  RankScope rank(0);
  const MemorySnapshot before = tracker.snapshot(0);
  tracker.reset_peak(0);
  const HfWeights weights(dir, cfg.model);
  weights.load(t.model().groups());
  const MemorySnapshot after = tracker.snapshot(0);
  CHECK(after.device_bytes == before.device_bytes);
  CHECK(after.device_peak == before.device_bytes);  // not one byte above what was live before
  CHECK(after.host_bytes == before.host_bytes);
  CHECK(t.model().embed().master.abs().sum().item<double>() > 0);  // and the weights did arrive
}
