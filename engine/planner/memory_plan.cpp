// plan_memory: the liveness walk of one step turned into the per-rank plan (terms with formulas at
// the device peak, host terms at the host peak, the per-phase timeline with times, the verdicts),
// and plan_peak, the same walk without strings for the solver.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/config/sizes.h"
#include "engine/planner/plan_shapes.h"
#include "engine/planner/planner.h"
#include "engine/planner/step_time.h"
#include "engine/planner/step_walk.h"

namespace odyssey {

using namespace planner_detail;

const std::array<const char*, kPlanCategoryCount>& plan_category_names() { return kMemCategoryNames; }

namespace {

int64_t gib_bytes(double gib) { return static_cast<int64_t>(std::llround(gib * kGiB)); }

/// Groups a live-set snapshot into terms: one per (name, kind, category, pool), counts summed.
void add_terms(const std::vector<LiveEntry>& live, const PlanShapes& s, bool host_only, std::vector<MemoryTerm>& out) {
  struct Group {
    const LiveEntry* first;
    int64_t bytes = 0;
    int64_t count = 0;
  };
  std::vector<Group> groups;
  for (const auto& e : live) {
    if (e.host != host_only || e.bytes == 0) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.first->kind == e.kind && g.first->category == e.category && std::strcmp(g.first->name, e.name) == 0;
    });
    if (it == groups.end()) {
      groups.push_back({&e, 0, 0});
      it = groups.end() - 1;
    }
    it->bytes = sat_add(it->bytes, e.bytes);  // entries at the ceiling: a sum of two would pass int64
    it->count += e.count;
  }
  for (const auto& g : groups) {
    MemoryTerm term;
    term.category = g.first->category;
    term.name = g.first->name;
    term.bytes = g.bytes;
    term.count = g.count;
    term.host = host_only;
    const std::string one = kind_formula(g.first->kind, s);
    term.formula = g.count > 1 ? std::to_string(g.count) + " x (" + one + ")" : one;
    out.push_back(std::move(term));
  }
}

}  // namespace

PlanPeak plan_peak(const RunConfig& cfg) {
  const PlanShapes s = make_shapes(cfg);
  LiveSet live(/*record_phases=*/false);
  walk_step(s, live, /*collapse=*/true);
  PlanPeak p;
  p.peak_bytes = live.device_peak;
  p.host_bytes = sat_mul(live.host_peak, s.ranks_per_node);
  p.device_capacity = gib_bytes(cfg.hardware.device_memory_gib);
  p.host_capacity = gib_bytes(cfg.hardware.host_memory_gib);
  p.beyond_range = s.beyond_range || p.peak_bytes >= kPlanBytesLimit || p.host_bytes >= kPlanBytesLimit;
  p.fits_device = !p.beyond_range && p.peak_bytes <= p.device_capacity;
  p.fits_host = !p.beyond_range && p.host_bytes <= p.host_capacity;
  return p;
}

StepTimePlan plan_step_time(const RunConfig& cfg) { return model_step_time(make_shapes(cfg), cfg.hardware); }

const char* attention_kernel_name(const StepTimePlan& t) {
  return t.lse_attention ? lse_kernel_name(t.lse_kernel) : "sdpa";
}

std::vector<AttentionKernelUse> attention_kernel_uses(const StepTimePlan& t) {
  // The path of a block that does not keep its attention: its own, whose kernel the Untied stages
  // and packed documents call themselves (the log-sum-exp kernel), else standard attention: SDPA's,
  // or the log-sum-exp kernel where SDPA has only its math backend.
  const bool own_lse = t.untied_attention || t.document_attention || t.standard_on_lse_kernel;
  const AttentionKernelUse own{0,
                               t.untied_attention     ? "Untied stages"
                               : t.document_attention ? "packed documents"
                                                      : "standard attention",
                               own_lse ? lse_kernel_name(t.lse_kernel) : "sdpa"};
  const int64_t kept = t.kept_attention ? t.kept_blocks : 0;
  std::vector<AttentionKernelUse> uses;
  // a keeping block runs its own path forward and keeps the output: named with it where it is not
  // standard attention
  const std::string kept_path = own.path == "standard attention" ? "kept attention" : own.path + ", attention kept";
  if (kept > 0) uses.push_back({kept, kept_path, lse_kernel_name(t.lse_kernel)});
  if (kept < t.attention_blocks) uses.push_back({t.attention_blocks - kept, own.path, own.kernel});
  return uses;
}

std::string attention_kernel_label(const StepTimePlan& t) {
  // every path but SDPA's calls the one log-sum-exp kernel
  auto kernel = [&](const std::string& name) {
    return name == "sdpa" ? std::string("SDPA") : std::string(lse_kernel_label(t.lse_kernel));
  };
  const std::vector<AttentionKernelUse> uses = attention_kernel_uses(t);
  if (uses.size() == 1) return uses[0].kernel == "sdpa" ? "SDPA" : kernel(uses[0].kernel) + ", " + uses[0].path;
  return kernel(uses[0].kernel) + ", " + uses[0].path + " in " + std::to_string(uses[0].blocks) + " of " +
         std::to_string(t.attention_blocks) + " blocks; " + kernel(uses[1].kernel) +
         (uses[1].path == "standard attention" ? "" : ", " + uses[1].path) + " in the other " +
         std::to_string(uses[1].blocks);
}

MemoryPlan plan_memory(const RunConfig& cfg) {
  const PlanShapes s = make_shapes(cfg);
  LiveSet live(/*record_phases=*/true);
  walk_step(s, live);
  // Second pass, copying the live set at the device and host peaks. The collapsed walk reaches
  // the same peaks (the first block to reach the peak is never a collapsed one); the full walk
  // is the fallback should it ever not.
  LiveSet at_peak(/*record_phases=*/false);
  at_peak.snapshot_at(live.device_peak_phase, live.device_peak, live.host_peak);
  walk_step(s, at_peak, /*collapse=*/true);
  if (!at_peak.device_snapshot_taken()) {
    at_peak = LiveSet(/*record_phases=*/false);
    at_peak.snapshot_at(live.device_peak_phase, live.device_peak, live.host_peak);
    walk_step(s, at_peak);
  }

  MemoryPlan plan;
  add_terms(at_peak.device_snapshot, s, /*host_only=*/false, plan.terms);
  add_terms(at_peak.host_snapshot, s, /*host_only=*/true, plan.terms);
  std::stable_sort(plan.terms.begin(), plan.terms.end(), [](const MemoryTerm& x, const MemoryTerm& y) {
    if (x.host != y.host) return !x.host;
    if (x.category != y.category) return x.category < y.category;
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    return x.name < y.name;  // equal sizes by name: the same order whichever walk took the snapshot
  });
  for (const auto& term : plan.terms)
    if (!term.host) {
      int64_t& category = plan.category_bytes[static_cast<int>(term.category)];
      category = sat_add(category, term.bytes);
    }
  int64_t& offloaded = plan.category_bytes[static_cast<int>(PlanCategory::Offloaded)];
  offloaded = sat_add(offloaded, live.host_peak);

  plan.peak_bytes = live.device_peak;
  plan.runtime_overhead_bytes = s.runtime_overhead;
  plan.peak_phase = phase_name(live.device_peak_phase);
  plan.device_capacity = gib_bytes(cfg.hardware.device_memory_gib);
  plan.host_bytes = sat_mul(live.host_peak, s.ranks_per_node);
  plan.host_capacity = gib_bytes(cfg.hardware.host_memory_gib);
  plan.beyond_range = s.beyond_range || plan.peak_bytes >= kPlanBytesLimit || plan.host_bytes >= kPlanBytesLimit;
  plan.fits_device = !plan.beyond_range && plan.peak_bytes <= plan.device_capacity;
  plan.fits_host = !plan.beyond_range && plan.host_bytes <= plan.host_capacity;
  // The dominant term: the largest device category and, inside it, its largest term.
  int top = 0;
  for (int c = 1; c < kPlanCategoryCount; ++c)
    if (c != static_cast<int>(PlanCategory::Offloaded) && plan.category_bytes[c] > plan.category_bytes[top]) top = c;
  const MemoryTerm* largest = nullptr;
  for (const auto& term : plan.terms)
    if (!term.host && static_cast<int>(term.category) == top && (!largest || term.bytes > largest->bytes))
      largest = &term;
  plan.dominant_term = std::string(to_string(static_cast<PlanCategory>(top))) + (largest ? ": " + largest->name : "");

  if (s.untied) {
    plan.heads_per_stage = s.k * s.P;
    plan.untied_stages = s.stages;
  }
  if (s.tiled_mlp) {
    plan.mlp_tile_tokens = s.mlp_tile.positions;
    plan.mlp_tiles = s.mlp_tile.count;
  }
  PhaseTimes times;
  plan.time = model_step_time(s, cfg.hardware, &times);
  plan.phases.reserve(live.phases.size());
  for (const auto& p : live.phases) {
    PhasePlan phase;
    phase.name = phase_name(p.code);
    phase.resident_bytes = p.device_peak;
    phase.host_bytes = p.host_at_peak;
    phase.category_bytes = p.categories;
    phase.time_s = times.of(p.code.kind);
    plan.phases.push_back(std::move(phase));
  }
  return plan;
}

}  // namespace odyssey
