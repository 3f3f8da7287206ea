// The tuner (tune(), engine/planner/tune.cpp) against what it promises: the choice fits and no
// fitting memory table this test enumerates on its own is faster, with the headroom left free; ties
// go to fewer techniques; only [memory] changes; checkpointing goes where it is not needed and comes
// where it is.
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config_diff.h"
#include "engine/config/preset.h"
#include "engine/config/sizes.h"
#include "engine/config/techniques.h"
#include "engine/config/validate.h"
#include "engine/planner/planner.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

RunConfig preset(const std::string& name, const std::vector<std::string>& sets = {}) {
  std::vector<Override> overrides;
  for (const std::string& text : sets) {
    Override o;
    ConfigIssue issue;
    REQUIRE(parse_override(text, static_cast<int>(overrides.size()) + 1, &o, &issue));
    overrides.push_back(o);
  }
  const LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/" + name + ".toml", overrides);
  INFO(name);
  REQUIRE(loaded.ok());
  return loaded.config;
}

/// A small model over 4 Ulysses ranks: two valid stage sizes, every technique plannable in
/// microseconds.
RunConfig small_model() {
  RunConfig c;
  c.model.flavor = "custom";
  c.model.n_layers = 3;
  c.model.d_model = 64;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 8;
  c.model.d_ffn = 176;
  c.model.vocab_size = 128;
  c.training.seq_len = 16384;
  c.parallel.world_size = 4;
  c.parallel.ulysses_degree = 4;
  c.hardware = *find_hardware_profile("cpu");
  return c;
}

/// This test's own enumeration of the search space: every combination of the eight memory
/// switches, kept attention in every block or in each count of top blocks, Untied Ulysses at "auto" and at every valid stage size, the tiles at "auto";
/// the validator decides what is a config.
std::vector<RunConfig> brute_force_space(const RunConfig& base) {
  std::vector<int64_t> stages = {kHeadsPerStageAuto};
  for (int64_t h : valid_heads_per_stage(base)) stages.push_back(h);
  std::vector<RunConfig> out;
  for (unsigned bits = 0; bits < 256; ++bits)
    for (int64_t heads : stages) {
      RunConfig c = base;
      MemoryConfig& m = c.memory;
      m.activation_checkpointing = bits & 1;
      m.keep_attention = bits & 2;
      m.offload_activations = bits & 4;
      m.tiled_mlp = bits & 8;
      m.mlp_tile_tokens = kMlpTileTokensAuto;
      m.tiled_loss = bits & 16;
      m.loss_tile_tokens = 0;
      m.untied_ulysses = bits & 32;
      m.heads_per_stage = heads;
      m.offload_optimizer = bits & 64;
      m.offload_kept_attention = bits & 128;
      if (!m.untied_ulysses && heads != kHeadsPerStageAuto) continue;  // the stage size of no stages
      // kept attention in every block, or in the top 1..L-1
      for (int64_t kept = 0; kept < (m.keep_attention ? c.model.n_layers : 1); ++kept) {
        m.keep_attention_blocks = kept;
        if (validate(c).empty()) out.push_back(c);
      }
    }
  return out;
}

bool is_memory_key(const std::string& key) { return key.rfind("memory.", 0) == 0; }

}  // namespace

TEST_CASE("tune: the choice fits and no fitting memory table of a brute force is faster", "[planner][tune]") {
  RunConfig cfg = small_model();
  const std::vector<RunConfig> space = brute_force_space(cfg);
  // The device between the space's lowest and highest peaks: some tables fit, some do not.
  std::vector<int64_t> peaks;
  for (const RunConfig& c : space) peaks.push_back(plan_peak(c).peak_bytes);
  std::sort(peaks.begin(), peaks.end());
  REQUIRE(peaks.front() < peaks.back());
  cfg.hardware.device_memory_gib = static_cast<double>(peaks[peaks.size() / 2]) / (1 << 30);
  // with no headroom "fits" is the plan's own verdict; with the default one it leaves 3% free
  const double share = GENERATE(0.0, kTuneHeadroomShare);
  INFO("headroom " << share);
  TuneOptions options;
  options.headroom_share = share;

  const TuneResult tuned = tune(cfg, options);
  const TuneCandidate* choice = tuned.chosen();
  REQUIRE(choice != nullptr);
  CHECK(plan_memory(choice->config).fits());  // the full plan agrees with the tuner's verdict
  CHECK(validate(choice->config).empty());
  const int64_t headroom = tuned.headroom_bytes;
  CHECK(headroom == std::llround(share * static_cast<double>(choice->peak.device_capacity)));
  CHECK(choice->peak.peak_bytes + headroom <= choice->peak.device_capacity);
  double fastest = 1e300;
  int fitting = 0, not_fitting = 0;
  for (RunConfig c : space) {
    c.hardware = cfg.hardware;
    const PlanPeak peak = plan_peak(c);
    if (!(peak.fits() && peak.peak_bytes + headroom <= peak.device_capacity)) {
      ++not_fitting;
      continue;
    }
    ++fitting;
    const double step = plan_step_time(c).step_s;
    fastest = std::min(fastest, step);
    INFO(describe_techniques(c, true) << ": step " << step << " s");
    CHECK(choice->step_s <= step * (1 + 1e-12));
  }
  REQUIRE(fitting >= 2);
  REQUIRE(not_fitting >= 1);
  CHECK(choice->step_s == Approx(fastest).epsilon(1e-12));  // the brute force's space is the tuner's
  // what the tuner dropped is every set ranked before the choice, and none of them fits
  for (const TuneCandidate* d : tuned.dropped()) {
    CHECK_FALSE(d->fits());
    CHECK(d->step_s <= choice->step_s * (1 + 1e-12));
    CHECK(d->verdict().rfind("device peak", 0) == 0);
    // a table the plan fits is dropped only for the headroom, and says so
    CHECK((d->peak.fits() ? d->verdict().find("headroom") != std::string::npos : true));
  }
  const TuneCandidate* second = tuned.second();
  REQUIRE(second != nullptr);
  CHECK(second->fits());
  CHECK(second->step_s >= choice->step_s);
  CHECK(second->summary() != choice->summary());
}

TEST_CASE("tune: the headroom keeps the device's last bytes free, as a share or in bytes", "[planner][tune]") {
  // The 1B at 32K on the H200 with no headroom, then on a device just large enough that its choice
  // leaves 1.5% free: the choice stays the fastest there (whatever fits the smaller device fits the
  // larger one), and the default 3% headroom drops it for a table with more memory free.
  RunConfig cfg = preset("llama3.2-1b-1xh100", {"hardware.profile=h200", "training.seq_len=32K"});
  TuneOptions none;
  none.headroom_share = 0;
  const TuneResult roomy = tune(cfg, none);
  REQUIRE(roomy.chosen() != nullptr);
  CHECK(roomy.headroom_bytes == 0);
  const int64_t choice_peak = roomy.chosen()->peak.peak_bytes;
  cfg.hardware.device_memory_gib = static_cast<double>(choice_peak) / 0.985 / (1 << 30);

  const TuneResult edge = tune(cfg, none);
  REQUIRE(edge.chosen() != nullptr);
  CHECK(edge.chosen()->config.memory == roomy.chosen()->config.memory);
  const int64_t capacity = edge.chosen()->peak.device_capacity;
  CHECK(static_cast<double>(capacity - choice_peak) / static_cast<double>(capacity) == Approx(0.015).epsilon(1e-6));

  const TuneResult kept = tune(cfg);  // the default: 3% of the device free
  CHECK(kept.headroom_bytes == std::llround(kTuneHeadroomShare * static_cast<double>(capacity)));
  REQUIRE(kept.chosen() != nullptr);
  CHECK_FALSE(kept.chosen()->config.memory == edge.chosen()->config.memory);
  CHECK(kept.chosen()->peak.peak_bytes + kept.headroom_bytes <= capacity);
  CHECK(kept.chosen()->step_s >= edge.chosen()->step_s);
  // the edge's choice is among the sets dropped, the plan fitting it, the verdict naming the headroom
  bool dropped_for_headroom = false;
  for (const TuneCandidate* d : kept.dropped())
    if (d->summary() == edge.chosen()->summary()) {
      dropped_for_headroom = true;
      CHECK(d->peak.fits());
      CHECK_FALSE(d->fits());
      CHECK(d->verdict().find(" free, under the ") != std::string::npos);
      CHECK(d->verdict().find(format_gib(static_cast<double>(kept.headroom_bytes)) + " headroom") != std::string::npos);
    }
  CHECK(dropped_for_headroom);

  // in bytes: a headroom of the choice's whole margin and one byte more drops it too; its margin exactly keeps it
  TuneOptions bytes;
  bytes.headroom_bytes = capacity - choice_peak;
  const TuneResult exact = tune(cfg, bytes);
  REQUIRE(exact.chosen() != nullptr);
  CHECK(exact.chosen()->config.memory == edge.chosen()->config.memory);
  bytes.headroom_bytes += 1;
  const TuneResult over = tune(cfg, bytes);
  REQUIRE(over.chosen() != nullptr);
  CHECK_FALSE(over.chosen()->config.memory == edge.chosen()->config.memory);
  // a headroom of the whole device leaves nothing that fits; what the plan fits is still named
  bytes.headroom_bytes = capacity;
  const TuneResult none_left = tune(cfg, bytes);
  CHECK(none_left.chosen() == nullptr);
  const TuneCandidate* into = none_left.lowest_plan_fit();
  REQUIRE(into != nullptr);
  CHECK(into->peak.fits());
  for (const TuneCandidate& c : none_left.candidates)
    if (c.peak.fits()) CHECK(into->peak.peak_bytes <= c.peak.peak_bytes);
}

TEST_CASE("train's refusal offers what fits only into the tuner's headroom, with --headroom 0%", "[planner][tune]") {
  // tiny-cpu without host memory (offload cannot run) on a device 1% above the lowest peak any
  // table reaches: the tuner's 3% headroom drops every table, and the refusal still names the one
  // the plan fits, where it said "no change of the memory techniques makes it fit" before
  RunConfig cfg = preset("tiny-cpu", {"hardware.host_memory_gib=0.0001"});
  TuneOptions none;
  none.headroom_share = 0;
  cfg.hardware.device_memory_gib = 1.0 / 1024;  // nothing fits: each set stands for its lowest peak
  const TuneResult tiny_device = tune(cfg, none);
  REQUIRE(tiny_device.chosen() == nullptr);
  int64_t lowest = INT64_MAX;  // of the sets the host takes (not offload's)
  for (const TuneCandidate& c : tiny_device.candidates)
    if (c.peak.fits_host) lowest = std::min(lowest, c.peak.peak_bytes);
  REQUIRE(lowest < INT64_MAX);
  cfg.hardware.device_memory_gib = static_cast<double>(lowest) / 0.99 / (1 << 30);
  REQUIRE(tune(cfg).chosen() == nullptr);
  REQUIRE(tune(cfg, none).chosen() != nullptr);
  REQUIRE_FALSE(plan_memory(cfg).fits());  // the preset's own table offloads: no host memory for it
  const std::string refusal = planned_out_of_memory(cfg, /*ranks_in_process=*/1);
  INFO(refusal);
  CHECK(refusal.find("It fits with the memory techniques odyssey tune picks: ") != std::string::npos);
  CHECK(refusal.find("less than the tuner's headroom left free: `odyssey tune PRESET --headroom 0% -o OUT.toml` "
                     "writes them") != std::string::npos);
  CHECK(refusal.find("No change of the memory techniques") == std::string::npos);
}

TEST_CASE("tune: ties go to fewer techniques, then less memory, and only [memory] changes", "[planner][tune]") {
  // the shipped presets, and the 1B at 32K on the H200, where the tiled loss runs the unfused
  // head's three GEMMs and fewer bytes a logit: faster than no technique at all (they tied before
  // the planner counted the loss's passes over the logits, and the tie went to no technique)
  const std::vector<std::pair<std::string, std::vector<std::string>>> configs = {
      {"tiny-cpu", {}},
      {"llama3.2-1b-1xh100", {}},
      {"llama3.2-1b-1xh100", {"hardware.profile=h200", "training.seq_len=32K"}},
      {"llama3-8b-3m-8xh100", {}},
      {"llama3-8b-5m-8xh100-untied", {}},
      {"qwen3-32b-16xh100", {}},
      {"llama3-8b-1xh100", {}}};
  for (const auto& [name, sets] : configs) {
    INFO(name << " with " << sets.size() << " --set");
    const RunConfig cfg = preset(name, sets);
    const TuneResult tuned = tune(cfg);
    const TuneCandidate* choice = tuned.chosen();
    REQUIRE(choice != nullptr);
    CHECK(validate(choice->config).empty());
    for (const KeyChange& change : config_changes(cfg, choice->config)) CHECK(is_memory_key(change.key));
    if (tuned.configured.fits()) CHECK(choice->step_s <= tuned.configured.step_s);
    for (const TuneCandidate& c : tuned.candidates) {
      if (!c.fits() || &c == choice) continue;
      INFO(c.summary());
      CHECK(c.step_s >= choice->step_s * (1 - 1e-12));
      if (c.step_s <= choice->step_s * (1 + 1e-13)) {  // a tie: more techniques, or as many and more memory
        CHECK(c.techniques >= choice->techniques);
        if (c.techniques == choice->techniques) CHECK(c.peak.peak_bytes >= choice->peak.peak_bytes);
      }
    }
  }
}

TEST_CASE("tune: a technique the choice turns off keeps no size, so its preset has nothing to note",
          "[planner][tune]") {
  // The 8B Untied preset at 128K: it sets memory.heads_per_stage (8) for its Untied stages, and the
  // fastest table that fits there runs standard attention (tune_memory_tables turns Untied off).
  RunConfig cfg = preset("llama3-8b-5m-8xh100-untied", {"training.seq_len=128K"});
  REQUIRE(cfg.memory.untied_ulysses);
  REQUIRE(cfg.memory.heads_per_stage != MemoryConfig{}.heads_per_stage);
  const TuneResult tuned = tune(cfg);
  const TuneCandidate* choice = tuned.chosen();
  REQUIRE(choice != nullptr);
  REQUIRE_FALSE(choice->config.memory.untied_ulysses);
  CHECK(choice->config.memory.heads_per_stage == MemoryConfig{}.heads_per_stage);
  CHECK(idle_size_keys(choice->config.memory).empty());
  CHECK(config_notes(choice->config).empty());
  // every table but the config's own (kept as written: "changes: none" when it is the choice)
  // sizes only the techniques it runs; the config's own with Untied off is noted
  const std::vector<MemoryConfig> tables = tune_memory_tables(cfg);
  for (size_t i = 1; i < tables.size(); ++i) CHECK(idle_size_keys(tables[i]).empty());
  cfg.memory.untied_ulysses = false;
  cfg.memory.mlp_tile_tokens = 4096;  // tiled MLP on: its size is not idle
  const std::vector<IdleSizeKey> idle = idle_size_keys(cfg.memory);
  REQUIRE(idle.size() == 1);
  CHECK(std::string(idle[0].size_key) == "heads_per_stage");
  CHECK(without_idle_sizes(cfg.memory).heads_per_stage == MemoryConfig{}.heads_per_stage);
  CHECK(without_idle_sizes(cfg.memory).mlp_tile_tokens == 4096);
}

TEST_CASE("tune: a 1B at 32K on the H200, which fits without recompute, runs without checkpointing",
          "[planner][tune]") {
  const RunConfig cfg = preset("llama3.2-1b-1xh100", {"hardware.profile=h200", "training.seq_len=32K"});
  REQUIRE(cfg.memory.activation_checkpointing);
  // It fits without: the preset's own stack with checkpointing (and what needs it) off.
  RunConfig without = cfg;
  without.memory.activation_checkpointing = without.memory.offload_activations = without.memory.keep_attention = false;
  REQUIRE(plan_peak(without).fits());
  const TuneResult tuned = tune(cfg);
  REQUIRE(tuned.chosen() != nullptr);
  const MemoryConfig& m = tuned.chosen()->config.memory;
  CHECK_FALSE(m.activation_checkpointing);
  CHECK_FALSE(m.offload_activations);
  CHECK(tuned.chosen()->step_s < tuned.configured.step_s);  // the recompute it no longer runs
}

TEST_CASE("tune: a longer context turns on what it needs, and each technique it keeps pays its way",
          "[planner][tune]") {
  const RunConfig short_cfg = preset("llama3.2-1b-1xh100", {"training.seq_len=16K"});
  const TuneResult short_tune = tune(short_cfg);
  REQUIRE(short_tune.chosen() != nullptr);
  CHECK_FALSE(short_tune.chosen()->config.memory.activation_checkpointing);

  const RunConfig long_cfg = preset("llama3.2-1b-1xh100", {"training.seq_len=1M"});
  const TuneResult long_tune = tune(long_cfg);
  const TuneCandidate* choice = long_tune.chosen();
  REQUIRE(choice != nullptr);
  CHECK(choice->config.memory.activation_checkpointing);
  CHECK(choice->techniques > short_tune.chosen()->techniques);
  // Checkpointing is needed: no table without it fits at this length.
  for (const TuneCandidate& c : long_tune.candidates)
    if (!c.planned.activation_checkpointing) CHECK_FALSE(c.fits());
  // Each switch of the choice flipped on its own either breaks a rule, does not fit, or is no faster.
  for (bool MemoryConfig::*flag :
       {&MemoryConfig::activation_checkpointing, &MemoryConfig::keep_attention, &MemoryConfig::offload_activations,
        &MemoryConfig::tiled_mlp, &MemoryConfig::tiled_loss, &MemoryConfig::untied_ulysses,
        &MemoryConfig::offload_optimizer, &MemoryConfig::offload_kept_attention}) {
    RunConfig flipped = choice->config;
    flipped.memory.*flag = !(flipped.memory.*flag);
    if (!validate(flipped).empty() || !plan_peak(flipped).fits_leaving(long_tune.headroom_bytes)) continue;
    INFO(describe_techniques(flipped, true));
    CHECK(plan_step_time(flipped).step_s >= choice->step_s * (1 - 1e-12));
  }
}

TEST_CASE("tune: where nothing fits there is no choice, and every technique set is dropped with its verdict",
          "[planner][tune]") {
  const RunConfig cfg = preset("llama3-8b-5m-8xh100-untied", {"training.seq_len=64M"});
  const TuneResult tuned = tune(cfg);
  CHECK(tuned.chosen() == nullptr);
  CHECK(tuned.second() == nullptr);
  REQUIRE_FALSE(tuned.candidates.empty());
  CHECK(tuned.dropped().size() == tuned.candidates.size());
  for (const TuneCandidate& c : tuned.candidates) CHECK(c.verdict() != "fits");
  const TuneCandidate* closest = tuned.lowest_peak();
  REQUIRE(closest != nullptr);
  for (const TuneCandidate& c : tuned.candidates) CHECK(closest->peak.peak_bytes <= c.peak.peak_bytes);
}

TEST_CASE("tune: the log-sum-exp paths' kernel is a candidate, chosen by its efficiency", "[planner][tune]") {
  // The 1B at 256K keeps attention under checkpointing; kept attention and the Untied stages call the kernel of
  // memory.lse_attention_kernel: "auto" gives cuDNN's in bf16 at hd 64 (attention_efficiency),
  // "flash2" FlashAttention-2 (untied_attention_efficiency). The preset's measured figures
  // (cuDNN 0.485 over FlashAttention-2 0.309) keep "auto"; FlashAttention-2 made the faster one
  // (0.9) is chosen instead. Each technique set that runs those paths is represented by its faster
  // kernel, and says so when it is FlashAttention-2.
  for (const double flash2 : {0.309, 0.9}) {
    INFO("untied_attention_efficiency " << flash2);
    const RunConfig cfg =
        preset("llama3.2-1b-1xh100",
               {"training.seq_len=256K", "hardware.untied_attention_efficiency=" + std::to_string(flash2)});
    const TuneResult tuned = tune(cfg);
    const TuneCandidate* choice = tuned.chosen();
    REQUIRE(choice != nullptr);
    const MemoryConfig& m = choice->config.memory;
    REQUIRE((m.untied_ulysses || m.keep_attention));
    const LseKernelChoice faster = flash2 > 0.485 ? LseKernelChoice::Flash2 : LseKernelChoice::Auto;
    CHECK(m.lse_attention_kernel == faster);
    int lse_sets = 0;
    for (const TuneCandidate& c : tuned.candidates) {
      if (!(c.planned.untied_ulysses || c.planned.keep_attention) || !c.fits()) continue;
      ++lse_sets;
      INFO(c.summary());
      CHECK(c.config.memory.lse_attention_kernel == faster);
      CHECK((c.summary().find("attention on FlashAttention-2") != std::string::npos) ==
            (faster == LseKernelChoice::Flash2));
    }
    CHECK(lse_sets > 1);
  }
}

TEST_CASE(
    "tune: where the device cannot hold every block's kept attention, the host holds it, or the most top "
    "blocks that fit there",
    "[planner][tune]") {
  // The 8B on 8 H100s (the h100-sxm profile): at 2M every block's kept attention (1 GiB a rank)
  // does not fit beside the rest on the device but does on the host beside the offloaded inputs;
  // at 5M the host holds it for some blocks only, and the top ones that fit keep it. Each choice
  // is faster than every fitting table that recomputes every block's attention: what the kept
  // attention spends on the host buys time.
  MemoryConfig five_m_choice;
  double two_m_step = 0;
  for (const char* length : {"2M", "5M"}) {
    INFO(length);
    const RunConfig cfg = preset("llama3-8b-5m-8xh100-untied", {std::string("training.seq_len=") + length});
    const TuneResult tuned = tune(cfg);
    const TuneCandidate* choice = tuned.chosen();
    REQUIRE(choice != nullptr);
    const MemoryConfig& m = choice->config.memory;
    INFO(choice->summary());
    CHECK(m.keep_attention);
    CHECK(m.offload_kept_attention);
    CHECK(plan_memory(choice->config).fits());
    if (std::string(length) == "2M") {
      CHECK(m.keep_attention_blocks == 0);  // every block
      two_m_step = choice->step_s;
    } else {
      five_m_choice = m;
      CHECK(m.keep_attention_blocks > 0);
      CHECK(m.keep_attention_blocks < cfg.model.n_layers);
      RunConfig one_more = choice->config;  // one block more does not fit on the host
      one_more.memory.keep_attention_blocks += 1;
      const MemoryPlan over = plan_memory(one_more);
      CHECK_FALSE(over.fits());
      CHECK(over.fits_device);
    }
    // every block kept on the device does not fit
    RunConfig on_device = choice->config;
    on_device.memory.offload_kept_attention = false;
    on_device.memory.keep_attention_blocks = 0;
    CHECK_FALSE(plan_peak(on_device).fits());
    for (const TuneCandidate& c : tuned.candidates) {
      if (!c.fits() || c.planned.keep_attention) continue;
      INFO(c.summary());
      CHECK(choice->step_s < c.step_s);
    }
  }
  // The tables tried do not inherit the config's keep_attention_blocks: the 2M config with the 5M
  // choice applied (21 blocks) tunes to the fresh 2M choice's step
  RunConfig applied = preset("llama3-8b-5m-8xh100-untied", {"training.seq_len=2M"});
  applied.memory = five_m_choice;
  const TuneResult again = tune(applied);
  REQUIRE(again.chosen() != nullptr);
  CHECK(again.chosen()->step_s == Approx(two_m_step).epsilon(1e-12));
}

TEST_CASE("tune's memo: each table's peak as plan_peak gives it, each walked once, one config only",
          "[planner][tune]") {
  const RunConfig cfg = preset("llama3-8b-5m-8xh100-untied");
  PeakMemo memo(cfg);
  std::vector<int64_t> walks_after;
  for (int pass = 0; pass < 2; ++pass) {
    for (const MemoryConfig& table : tune_memory_tables(cfg)) {
      RunConfig c = cfg;
      c.memory = table;
      if (!validate(c).empty()) continue;
      INFO(describe_techniques(c, true));
      // "auto" resolved through the memo and without it: the same sizes, so the same table
      const RunConfig planned = with_planned_sizes(c, memo);
      CHECK(planned.memory == with_planned_sizes(c).memory);
      const PlanPeak remembered = memo.peak(planned), walked = plan_peak(planned);
      CHECK(remembered.peak_bytes == walked.peak_bytes);
      CHECK(remembered.host_bytes == walked.host_bytes);
      CHECK(remembered.fits() == walked.fits());
    }
    walks_after.push_back(memo.walks());
  }
  // the first pass walked each table it met once; the second met only those
  CHECK(walks_after[0] > 0);
  CHECK(walks_after[1] == walks_after[0]);
  // a config that differs outside [memory] is another config's memo: refused, not answered wrong
  RunConfig longer = cfg;
  longer.training.seq_len *= 2;
  CHECK_THROWS_AS(memo.peak(longer), std::logic_error);
}
