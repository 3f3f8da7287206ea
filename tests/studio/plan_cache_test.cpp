// The plan cache: one planner call per distinct config, a fresh plan after any edit, invalid
// configs explained instead of planned, the ladder's rungs as DESIGN.md names them, and a documents
// file's lengths read through the reader the executable sets.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/studio/plan_cache.h"
#include "engine/config/preset.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::studio;

namespace {
RunConfig tiny() {
  const LoadedPreset p = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml");
  REQUIRE(p.ok());
  return p.config;
}
}  // namespace

TEST_CASE("the plan is recomputed only when the config changes", "[studio][plan]") {
  PlanCache cache;
  RunConfig cfg = tiny();
  const PlanResult& first = cache.get(cfg);
  REQUIRE(first.ok);
  CHECK(cache.computations() == 1);
  const int64_t peak = first.plan.peak_bytes;
  for (int frame = 0; frame < 10; ++frame) cache.get(cfg);
  CHECK(cache.computations() == 1);

  cfg.memory.activation_checkpointing = false;  // an edit: the next frame plans again
  cfg.memory.offload_activations = false;
  const PlanResult& edited = cache.get(cfg);
  CHECK(cache.computations() == 2);
  REQUIRE(edited.ok);
  CHECK(edited.plan.peak_bytes > peak);  // checkpointing off keeps more activations
  cache.get(cfg);
  CHECK(cache.computations() == 2);
  cache.invalidate();
  cache.get(cfg);
  CHECK(cache.computations() == 3);
}

TEST_CASE("a newer edit wins over background work still running for an older one", "[studio][plan]") {
  PlanCache cache;
  RunConfig cfg = tiny();
  for (int64_t len : {512, 1024, 2048, 4096}) {
    cfg.training.seq_len = len;
    cache.get(cfg);
  }
  cache.wait_for_extras();
  const PlanResult& r = cache.get(cfg);
  REQUIRE(r.extras_ready);
  REQUIRE(r.ladder.size() == 8);
  CHECK(r.ladder.back().config.training.seq_len == 4096);
  CHECK(cache.computations() == 4);
  PlanCache plan_only(false);
  plan_only.get(cfg);
  CHECK_FALSE(plan_only.extras_pending());
  CHECK_FALSE(plan_only.get(cfg).extras_ready);
}

TEST_CASE("an invalid config is explained, not planned", "[studio][plan]") {
  PlanCache cache;
  RunConfig cfg = tiny();
  cfg.parallel.world_size = 3;
  const PlanResult& r = cache.get(cfg);
  CHECK_FALSE(r.ok);
  CHECK(r.error == "1 problem in the configuration: fix the highlighted fields to see the plan");
}

TEST_CASE("the cached result carries the ladder, max context and advice", "[studio][plan]") {
  PlanCache cache;
  RunConfig cfg = tiny();
  const PlanResult& r = cache.get(cfg);
  REQUIRE(r.ok);
  cache.wait_for_extras();
  REQUIRE(r.extras_ready);
  std::vector<std::string> names;
  for (const auto& rung : r.ladder) names.push_back(rung.name);
  CHECK(names == std::vector<std::string>{"default", "fsdp", "ulysses", "checkpointing", "offload", "tiling",
                                          "untied_ulysses", "offload_optimizer"});
  CHECK(r.max_seq_len >= cfg.training.seq_len);
  // and what stops it: the first length one step past it, which does not fit
  CHECK(r.max_seq_len_limit.seq_len == r.max_seq_len + seq_len_granularity(cfg, r.max_seq_len));
  CHECK_FALSE(r.max_seq_len_limit.peak.fits());
  CHECK(r.max_seq_len_limit.binds() == "device memory");
  CHECK(r.advice.empty());  // it fits
  CHECK_FALSE(r.plan.phases.empty());

  // A config that does not fit gets the advisor's suggestions.
  LoadedPreset big = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3-8b-3m-8xh100.toml");
  REQUIRE(big.ok());
  big.config.memory = MemoryConfig{};
  const PlanResult& oom = cache.get(big.config);
  REQUIRE(oom.ok);
  CHECK(cache.extras_pending());  // the ladder and advice come from the worker
  cache.wait_for_extras();
  CHECK(oom.extras_ready);
  CHECK_FALSE(oom.plan.fits());
  CHECK_FALSE(oom.advice.empty());
}

TEST_CASE("a documents file's lengths reach the plan through the reader, read again only when it changes",
          "[studio][plan][documents]") {
  // The planner counts each document's attention from the file's lengths, as `odyssey plan` does;
  // the reader here stands in for engine/train's read_document_lengths (studio_core links no
  // engine/train). The expected fraction is the profile's own: one function, no tolerance.
  struct ReaderReset {  // the reader is process-wide: no later test may call into this one's locals
    ~ReaderReset() { set_document_lengths_reader(nullptr); }
  } reset;
  int reads = 0;
  const auto profile = std::make_shared<const DocumentLengthProfile>(std::vector<int64_t>(64, 16));
  set_document_lengths_reader([&](const std::string& path, int64_t vocab_size) {
    ++reads;
    CHECK(path == "corpus.odoc");
    CHECK(vocab_size > 0);
    return profile;
  });
  RunConfig cfg = tiny();
  cfg.training.dataset = DatasetKind::Documents;
  cfg.training.dataset_path = "corpus.odoc";
  cfg.training.document_mask = true;
  {
    PlanCache cache(false);
    const PlanResult& masked = cache.get(cfg);
    INFO(masked.error);
    REQUIRE(masked.ok);
    CHECK(reads == 1);
    CHECK(masked.plan.time.attention_pair_fraction == profile->attention_fraction(cfg.training.seq_len));
    CHECK(masked.plan.time.attention_pair_fraction < 0.5);  // 16-token documents in a longer sequence
    cfg.training.lr *= 2;                                   // an edit replans; the file is not read again
    REQUIRE(cache.get(cfg).ok);
    CHECK(cache.computations() == 2);
    CHECK(reads == 1);
  }
  {
    // The tune planned the config with the lengths attached; the tune button still applies to the
    // edited config, which carries none.
    PlanCache cache;
    REQUIRE(cache.get(cfg).ok);
    cache.wait_for_extras();
    const PlanResult& tuned = cache.get(cfg);
    REQUIRE(tuned.extras_ready);
    RunConfig edited = cfg;
    std::string message;
    apply_tuned_memory(edited, tuned.tune, &message);
    CHECK_THAT(message, !Catch::Contains("still running"));
  }
  set_document_lengths_reader(
      [](const std::string&, int64_t) { return std::shared_ptr<const DocumentLengthProfile>(); });
  {
    PlanCache cache(false);  // a reader that returns nothing: refused, not planned as whole sequences
    const PlanResult& empty = cache.get(cfg);
    CHECK_FALSE(empty.ok);
    CHECK_THAT(empty.error, Catch::Contains("returned no lengths"));
  }
  // A file the reader refuses: no plan, and the error names the key, the path and the reader's reason.
  set_document_lengths_reader([](const std::string&, int64_t) -> std::shared_ptr<const DocumentLengthProfile> {
    throw std::runtime_error("corpus.odoc.index: not a documents index");
  });
  {
    PlanCache cache(false);
    const PlanResult& bad = cache.get(cfg);
    CHECK_FALSE(bad.ok);
    CHECK_THAT(bad.error,
               Catch::Contains("training.dataset_path = \"corpus.odoc\"") && Catch::Contains("not a documents index"));
  }
  // No reader (a program that set none): refused, saying why, never planned as unmasked sequences.
  set_document_lengths_reader(nullptr);
  {
    PlanCache cache(false);
    const PlanResult& none = cache.get(cfg);
    CHECK_FALSE(none.ok);
    CHECK_THAT(none.error, Catch::Contains("training.document_mask"));
  }
}
