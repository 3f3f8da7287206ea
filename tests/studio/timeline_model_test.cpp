// Timeline logic: phase paths to band classes, the step's peak with its deepest phase, and the
// planner's phases laid over the measured ones by name (or by predicted time when none match).
#include <catch2/catch.hpp>

#include <algorithm>

#include "app/studio/synthetic.h"
#include "app/studio/timeline_model.h"

using namespace odyssey;
using namespace odyssey::studio;

TEST_CASE("phase paths map to the timeline's bands", "[studio][timeline]") {
  CHECK(classify_phase("fwd/block.3/attn") == PhaseClass::Attention);
  CHECK(classify_phase("bwd/block.0/attn") == PhaseClass::Attention);
  CHECK(classify_phase("fwd/block.3/mlp") == PhaseClass::Mlp);
  CHECK(classify_phase("fwd/loss") == PhaseClass::Loss);
  CHECK(classify_phase("bwd/loss") == PhaseClass::Loss);
  CHECK(classify_phase("bwd/block.1/recompute") == PhaseClass::Backward);
  CHECK(classify_phase("bwd/block.1/reduce_scatter") == PhaseClass::Backward);
  CHECK(classify_phase("fwd/embed") == PhaseClass::Forward);
  CHECK(classify_phase("optimizer") == PhaseClass::Optimizer);
  CHECK(classify_phase("fwd/loss/head/host_update") == PhaseClass::Optimizer);  // the pipelined AdamW's wait
  CHECK(classify_phase("block.2/host_update") == PhaseClass::Optimizer);
  CHECK(classify_phase("step") == PhaseClass::Other);
  CHECK(classify_phase("fwd/attention_like") == PhaseClass::Forward);  // whole components only
  CHECK(phase_direction("bwd/embed") == -1);
  CHECK(phase_direction("fwd/embed") == 1);
  CHECK(phase_direction("optimizer") == 0);
}

TEST_CASE("the peak names the deepest phase holding it", "[studio][timeline]") {
  const std::vector<std::string> names = {"step", "bwd/block.0", "bwd/block.0/recompute", "optimizer"};
  std::vector<PhaseSpan> spans = {
      {1, 0, 0, 0, 0.0, 1.0, 0, 0, 900, 0},  // step: same peak as its child
      {1, 0, 1, 1, 0.2, 0.6, 0, 0, 900, 0}, {1, 0, 2, 2, 0.3, 0.5, 0, 0, 900, 0},
      {1, 0, 3, 1, 0.7, 0.9, 0, 0, 500, 0}, {1, 1, 2, 2, 0.3, 0.5, 0, 0, 950, 0},  // rank 1 is higher
      {2, 0, 3, 1, 1.7, 1.9, 0, 0, 990, 0},                                        // another step
  };
  PeakMark p = find_peak(spans, names, 1, 0);
  REQUIRE(p.found);
  CHECK(p.bytes == 900);
  CHECK(p.phase == "bwd/block.0/recompute");
  CHECK(p.t_s == Approx(0.4));
  p = find_peak(spans, names, 1, -1);
  CHECK(p.rank == 1);
  CHECK(p.bytes == 950);
  p = find_peak(spans, names, -1, -1);
  CHECK(p.step == 2);
  CHECK_FALSE(find_peak(spans, names, 7, 0).found);
  const auto ext = step_extent(spans, 1, 0);
  CHECK(ext.min == 0.0);
  CHECK(ext.max == 1.0);
}

TEST_CASE("planned phases overlay the measured ones by name", "[studio][timeline]") {
  MemoryPlan plan;
  plan.phases.push_back({"fwd/block.0/attn", 700, 10, {}, 0.1});
  plan.phases.push_back({"optimizer", 400, 0, {}, 0.2});
  const std::vector<std::string> names = {"step", "fwd/block.0/attn", "optimizer"};
  std::vector<PhaseSpan> spans = {{3, 0, 0, 0, 10.0, 11.0, 0, 0, 0, 0},
                                  {3, 0, 1, 2, 10.1, 10.4, 0, 0, 0, 0},
                                  {3, 0, 2, 1, 10.6, 10.9, 0, 0, 0, 0},
                                  {3, 1, 2, 1, 10.6, 10.9, 0, 0, 0, 0}};
  const auto segs = planned_overlay(plan, spans, names, 3, 0);
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].phase == "optimizer");  // depth 1 before depth 2
  CHECK(segs[0].t0 == 10.6);
  CHECK(segs[0].device_bytes == 400);
  CHECK(segs[1].phase == "fwd/block.0/attn");
  CHECK(segs[1].host_bytes == 10);
}

TEST_CASE("planned phases spread over the step when no names match", "[studio][timeline]") {
  MemoryPlan plan;
  plan.phases.push_back({"a", 1, 0, {}, 1.0});
  plan.phases.push_back({"b", 2, 0, {}, 3.0});
  const std::vector<std::string> names = {"step"};
  std::vector<PhaseSpan> spans = {{0, 0, 0, 0, 2.0, 6.0, 0, 0, 0, 0}};
  const auto segs = planned_overlay(plan, spans, names, 0, 0);
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].t0 == Approx(2.0));
  CHECK(segs[0].t1 == Approx(3.0));
  CHECK(segs[1].t1 == Approx(6.0));
  CHECK(planned_overlay(plan, spans, names, 5, 0).empty());  // no such step
}

TEST_CASE("a million synthetic samples file into per-rank series with step lookups", "[studio][timeline]") {
  RunHistory h;
  fill_synthetic_history(h, 1'000'000, 2);
  CHECK(h.sample_count() > 900'000);
  CHECK(h.sample_count() <= 1'000'000);
  REQUIRE(h.ranks().size() == 2);
  const RankSeries& r = h.ranks()[1];
  CHECK(std::is_sorted(r.t_s.begin(), r.t_s.end()));
  const auto [lo, hi] = r.step_range(100);
  REQUIRE(hi > lo);
  for (size_t i = lo; i < hi; ++i) CHECK(r.step[i] == 100);
  const StepSpans* g = h.spans_of(100);
  REQUIRE(g);
  const PeakMark p = find_peak(g->spans, h.phase_names(), 100, 1);
  REQUIRE(p.found);
  CHECK(p.phase != "step");
  // The run's peak from the per-step peaks equals a scan of every span.
  const PeakMark run = find_run_peak(h, -1);
  int64_t scanned = 0;
  for (const auto& group : h.span_steps())
    for (const auto& s : group.spans) scanned = std::max(scanned, s.device_peak);
  REQUIRE(run.found);
  CHECK(run.bytes == scanned);
  CHECK(h.span_count() > 400'000);
}
