// The liveness walk's fast path: collapsing each run of alike blocks gives exactly the full walk's
// device and host peaks and the same live set (names, categories, bytes) at both peaks, for every
// rung and every table the tuner tries of several models and depths; and the ledger refuses
// impossible frees.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "engine/config/preset.h"
#include "engine/config/techniques.h"
#include "engine/config/validate.h"
#include "engine/planner/plan_shapes.h"
#include "engine/planner/planner.h"
#include "engine/planner/step_walk.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::planner_detail;

namespace {

using Grouped = std::map<std::tuple<std::string, int, bool>, std::pair<int64_t, int64_t>>;

Grouped group(const std::vector<LiveEntry>& live) {
  Grouped g;
  for (const auto& e : live) {
    auto& slot = g[{e.name, static_cast<int>(e.category), e.host}];
    slot.first += e.bytes;
    slot.second += e.count;
  }
  return g;
}

/// Walks once to find the peaks, then again (full or collapsed) to snapshot them.
void walk_twice(const PlanShapes& s, bool collapse, LiveSet& first, LiveSet& snap) {
  walk_step(s, first, collapse);
  snap.snapshot_at(first.device_peak_phase, first.device_peak, first.host_peak);
  walk_step(s, snap, collapse);
}

/// The collapsed walk against the full one: the same device and host peaks, the same peak phase
/// and the same live set at both peaks. Returns how many allocations and frees each took (full,
/// collapsed).
std::pair<int64_t, int64_t> require_collapse_exact(const PlanShapes& s) {
  LiveSet full_first(false), full_snap(false), fast_first(false), fast_snap(false);
  walk_twice(s, false, full_first, full_snap);
  walk_twice(s, true, fast_first, fast_snap);
  REQUIRE(fast_first.device_peak == full_first.device_peak);
  REQUIRE(fast_first.host_peak == full_first.host_peak);
  REQUIRE(phase_name(fast_first.device_peak_phase) == phase_name(full_first.device_peak_phase));
  REQUIRE(fast_snap.device_snapshot_taken());
  REQUIRE(group(fast_snap.device_snapshot) == group(full_snap.device_snapshot));
  if (full_first.host_peak > 0) REQUIRE(group(fast_snap.host_snapshot) == group(full_snap.host_snapshot));
  return {full_first.events(), fast_first.events()};
}

}  // namespace

TEST_CASE("collapsed walk: same peaks and the same live set at both peaks as the full walk", "[planner][walk]") {
  std::vector<RunConfig> bases;
  for (const char* name : {"llama3-8b-3m-8xh100", "qwen3-32b-16xh100", "llama3.2-1b-1xh100", "tiny-cpu"}) {
    const LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/" + name + ".toml");
    REQUIRE(loaded.ok());
    bases.push_back(loaded.config);
  }
  bases[0].training.seq_len = 512 * 1024;
  for (RunConfig base : bases) {
    for (int64_t layers : {base.model.n_layers, int64_t{5}, int64_t{6}}) {
      base.model.n_layers = layers;
      for (int rung = 0; rung < kLadderRungCount; ++rung) {
        INFO(base.model.flavor << " with " << layers << " layers, rung " << kLadderRungNames[rung]);
        require_collapse_exact(make_shapes(ladder_rung_config(base, rung)));
      }
    }
  }
}

TEST_CASE("the ledger refuses a free of a tensor that is not live", "[planner][walk]") {
  LiveSet live(false);
  const int h = live.alloc("x", TensorKind::Hidden, PlanCategory::Other, 100);
  live.free(h);
  CHECK_THROWS_AS(live.free(h), std::logic_error);
  CHECK(live.device() == 0);
  CHECK(live.device_peak == 100);
}

TEST_CASE("collapsed walk: every table tune tries, kept attention in any number of top blocks", "[planner][walk]") {
  // Kept attention in the top blocks only splits blocks 1..L-2 into two runs that walk unlike
  // (recompute below, kept above, on the host but for the last): each run collapses on its own.
  // Every table the tuner plans, on a GPU target (pinned slabs) and the CPU one (a host clone a
  // block), at depths where runs have no, one and many blocks between their ends.
  struct Base {
    const char* preset;
    int64_t seq_len;
  };
  int64_t walked = 0, collapsed = 0;
  for (const Base& b : {Base{"llama3-8b-3m-8xh100", 512 * 1024}, Base{"llama3.2-1b-1xh100", 0}, Base{"tiny-cpu", 0}}) {
    const LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/" + b.preset + ".toml");
    REQUIRE(loaded.ok());
    RunConfig base = loaded.config;
    if (b.seq_len > 0) base.training.seq_len = b.seq_len;
    for (int64_t layers : {int64_t{6}, int64_t{9}, int64_t{16}}) {
      base.model.n_layers = layers;
      for (const MemoryConfig& table : tune_memory_tables(base)) {
        RunConfig cfg = base;
        cfg.memory = table;
        if (!validate(cfg).empty()) continue;
        cfg = with_planned_sizes(cfg);
        std::vector<int64_t> kept_counts = {0};
        if (table.keep_attention)
          for (int64_t top = 1; top < layers; ++top) kept_counts.push_back(top);
        for (int64_t top : kept_counts) {
          cfg.memory.keep_attention_blocks = top;
          INFO(b.preset << " with " << layers << " layers, " << describe_techniques(cfg, true) << ", kept in "
                        << (top == 0 ? layers : top) << " top blocks");
          const PlanShapes s = make_shapes(cfg);
          const auto [full_events, fast_events] = require_collapse_exact(s);
          ++walked;
          if (fast_events < full_events) ++collapsed;
          // a GPU target's offloaded payloads sit in pinned slabs: every run's residue is a plain
          // addition, so every walk with a run of 3 blocks or more collapses
          if (s.cuda_target && layers >= 9) REQUIRE(fast_events < full_events);
        }
      }
    }
  }
  CHECK(walked > 1000);
  CHECK(collapsed > walked / 2);
}
