// Rank emulation end to end: rank 0 of a W-rank job run alone with EmulatedComm holds exactly
// what rank 0 of the real multi-rank run holds: step peak within 2%, same persistent categories,
// also under document masking. defines: test cases [emulation]
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "../common/engine_test_util.h"
#include "engine/parallel/job.h"
#include "engine/train/documents_file.h"
#include "engine/train/run.h"
#include "engine/util/files.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

RunConfig emulation_config() {
  RunConfig c = tiny_config(/*layers=*/2, /*seq=*/512);
  c.model.d_model = 128;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 16;
  c.model.d_ffn = 256;
  c.model.vocab_size = 128;
  c.parallel.timeout_s = 60;
  return c;
}

struct Rank0 {
  int64_t step_peak = 0;
  std::array<int64_t, kMemCategoryCount> categories{};
  double loss = 0;
};

// Rank 0's second step, launched as run_training launches it: rank threads, or (parallel.emulate)
// rank 0 alone with the intra-op threads a real rank gets (CPU kernels size scratch per thread).
Rank0 rank0(const RunConfig& cfg) {
  Rank0 out;
  run_on_ranks(cfg, "odyssey train PRESET", [&](RankContext& ctx) {
    Trainer t(cfg, ctx);
    t.step();
    const StepResult r = t.step();
    if (ctx.rank != 0) return;
    out.step_peak = r.device_peak;
    out.categories = MemoryTracker::instance().snapshot(0).category_bytes;
    out.loss = r.loss;
  });
  return out;
}

Rank0 real_rank0(const RunConfig& cfg) { return rank0(cfg); }

Rank0 emulated_rank0(const RunConfig& cfg) {
  RunConfig emulated = cfg;
  emulated.parallel.emulate = true;
  return rank0(emulated);
}

void check(RunConfig cfg, const std::string& label) {
  const Rank0 real = real_rank0(cfg);
  const Rank0 emu = emulated_rank0(cfg);
  const double ratio = static_cast<double>(emu.step_peak) / static_cast<double>(real.step_peak);
  INFO(label << ": real rank-0 step peak " << real.step_peak << " B, emulated " << emu.step_peak << " B (ratio "
             << ratio << ")");
  CHECK(std::abs(ratio - 1.0) <= 0.02);
  for (MemCategory c : {MemCategory::Params, MemCategory::Grads, MemCategory::Optimizer})
    CHECK(emu.categories[static_cast<int>(c)] == real.categories[static_cast<int>(c)]);
  CHECK(std::isfinite(emu.loss));  // meaningless but computed
}

}  // namespace

TEST_CASE("rank emulation: FSDP over 4 ranks, rank-0 peak equals the real run's", "[emulation]") {
  RunConfig cfg = emulation_config();
  cfg.parallel.world_size = 4;
  cfg.parallel.fsdp = true;
  check(cfg, "W=4 FSDP");
}

TEST_CASE("rank emulation: Ulysses 2 x data parallel 2 with FSDP and checkpointing", "[emulation]") {
  RunConfig cfg = emulation_config();
  cfg.parallel.world_size = 4;
  cfg.parallel.ulysses_degree = 2;
  cfg.parallel.fsdp = true;
  cfg.memory.activation_checkpointing = true;
  check(cfg, "W=4 P=2 FSDP ckpt");
}

TEST_CASE("rank emulation: Untied Ulysses over 4 ranks (Hkv < P), offload and tiling", "[emulation]") {
  RunConfig cfg = emulation_config();
  cfg.parallel.world_size = 4;
  cfg.parallel.ulysses_degree = 4;
  cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = 4;
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = true;
  cfg.memory.tiled_mlp = cfg.memory.tiled_loss = true;
  check(cfg, "W=4 P=4 untied offload tiling");
}

TEST_CASE("rank emulation: document masking on packed documents under Untied Ulysses over 4 ranks",
          "[emulation][documents]") {
  // Documents of mixed lengths (3 to 300 tokens) packed into the sequences: each attention call
  // runs per document segment, whose scratch the emulated rank must hold as the real one does.
  const std::string path = "/tmp/odyssey_emulation_documents_" + std::to_string(::getpid()) + ".odoc";
  remove_tree(path);
  {
    DocumentsFileWriter w(path);
    std::vector<uint32_t> ids(300);
    int64_t written = 0;
    for (int64_t d = 0; written < 6 * 513; ++d) {
      const int64_t length = 3 + (d * 97) % 298;
      for (int64_t i = 0; i < length; ++i) ids[static_cast<size_t>(i)] = static_cast<uint32_t>((d + 5 * i) % 128);
      w.add_document(ids.data(), length);
      written += length;
    }
    w.commit(/*vocab_size=*/128, /*replace=*/false);
  }
  RunConfig cfg = emulation_config();
  cfg.parallel.world_size = 4;
  cfg.parallel.ulysses_degree = 4;
  cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = 4;
  cfg.memory.activation_checkpointing = true;
  cfg.training.dataset = DatasetKind::Documents;
  cfg.training.dataset_path = path;
  cfg.training.document_mask = true;
  check(cfg, "W=4 P=4 untied, packed documents masked");
  // the masked path ran: its per-segment attention calls hold another peak than one call a sequence
  RunConfig unmasked = cfg;
  unmasked.training.document_mask = false;
  CHECK(real_rank0(cfg).step_peak != real_rank0(unmasked).step_peak);
  remove_tree(path);
}

TEST_CASE("rank emulation through run_training reports rank 0's peak only and marks the loss meaningless",
          "[emulation]") {
  RunConfig cfg = emulation_config();
  cfg.parallel.world_size = 4;
  cfg.parallel.fsdp = true;
  cfg.parallel.emulate = true;
  RunOptions opt;
  opt.steps = 2;
  opt.checkpoints = false;
  const RunOutcome o = run_training(cfg, opt);
  INFO(o.error);
  REQUIRE(o.status == RunOutcome::Status::Finished);
  REQUIRE(o.metrics.size() == 2);
  CHECK(o.metrics[1].step == 2);
  CHECK_FALSE(o.metrics[1].loss_meaningful);
  REQUIRE(o.metrics[1].rank_peak_bytes.size() == 1);  // the other ranks do not exist
  const Rank0 emu = emulated_rank0(cfg);
  CHECK(std::abs(static_cast<double>(o.metrics[1].peak_bytes) / emu.step_peak - 1.0) <= 0.02);
}
