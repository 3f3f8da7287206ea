// The per-phase comparison harness: one training step measured by the memory tracker on every rank
// (rank threads, one intra-op thread) laid beside plan_memory phase by phase and category by
// category. defines: RankSteps, measure_ranks, PhaseRow, PhaseComparison, measured_peak_row, compare_phases,
//          print_phase_table, model_state_bytes, the phase tolerances, allowed_phase_difference
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "../common/engine_test_util.h"
#include "measure_util.h"
#include "engine/parallel/rank_launch.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"

namespace odyssey::test {

/// What one rank's tracker saw during its measured steps (the smallest of them; see measure_ranks).
using RankStep = Measured;

/// Every rank of `cfg` (rank threads over Gloo; world_size 1 runs one thread) stepped with one
/// intra-op thread (the CPU flash kernels size their scratch by the thread count, and the planner's
/// CPU model counts one thread's): one warm-up step, then `steps` measured ones, keeping each
/// phase's smallest peak. Reason: Gloo's worker thread drops its reference to a finished
/// collective's tensors only after it has woken the waiting rank; BackendComm waits for it (at most
/// 200 ms, process_group_comm.cpp), and the smallest of three steps covers a wait that ran out on
/// an overloaded host (seen before that wait: +2 [s, d] in reduce-scatter and embedding phases in
/// one run of five, and the all-reduced embedding gradient in an optimizer phase).
inline std::vector<RankStep> measure_ranks(const RunConfig& cfg, int steps = 3) {
  std::vector<RankStep> out(static_cast<size_t>(cfg.parallel.world_size));
  const int threads_before = at::get_num_threads();
  at::set_num_threads(1);
  run_rank_threads(cfg.parallel, at::kCPU, [&](RankContext& ctx) {
    Trainer t(cfg, ctx);
    t.step();
    t.recorder().take_records();
    RankStep& m = out[static_cast<size_t>(ctx.rank)];
    for (int k = 0; k < steps; ++k) {
      const StepResult r = t.step();
      if (k == 0 || r.device_peak < m.device_peak) {
        m.device_peak = r.device_peak;
        m.host_peak = r.host_peak;
        m.category_at_peak = MemoryTracker::instance().snapshot(ctx.rank).category_at_peak;
      }
      for (auto& rec : t.recorder().take_records()) {
        auto it = m.phases.find(rec.path);
        if (it == m.phases.end() || rec.device_peak < it->second.device_peak) m.phases[rec.path] = rec;
      }
    }
  });
  at::set_num_threads(threads_before);
  return out;
}

/// params + grads + optimizer: exact in both (tested elsewhere), so the comparison subtracts them.
template <typename Array>
int64_t model_state_bytes(const Array& categories) {
  return categories[0] + categories[1] + categories[2];
}

/// One phase: the device peak inside it minus the model states ("activation peak"), measured and
/// planned, and the category breakdown at each peak.
struct PhaseRow {
  std::string name;
  int64_t measured = 0, planned = 0;  ///< activation peak bytes
  std::array<int64_t, kMemCategoryCount> measured_categories{}, planned_categories{};
  double ratio() const { return measured > 0 ? static_cast<double>(planned) / measured : 0.0; }
};

struct PhaseComparison {
  std::string label;
  std::vector<PhaseRow> rows;           ///< the plan's phases in step order
  std::vector<std::string> unplanned;   ///< measured phases the plan does not have (besides "step")
  std::vector<std::string> unmeasured;  ///< planned phases the engine did not record
  PhaseRow step;                        ///< the step peak with its categories
  int64_t host_planned = 0;             ///< the plan's host bytes per rank (offloaded inputs)
};

/// The phase in which the measured step peak lies: the row with the largest measured activation
/// peak (the first of equals). Where two phases nearly tie (the loss's backward and the top
/// block's), the plan's step peak may lie in the other one, so categories are compared there,
/// phase against phase.
inline const PhaseRow& measured_peak_row(const PhaseComparison& c) {
  const PhaseRow* best = &c.step;
  int64_t most = -1;
  for (const PhaseRow& r : c.rows)
    if (r.measured > most) {
      most = r.measured;
      best = &r;
    }
  return *best;
}

inline PhaseComparison compare_phases(const std::string& label, const RankStep& m, const MemoryPlan& plan) {
  PhaseComparison c;
  c.label = label;
  // The tracker's categories count both pools; the plan's are the device's. Optimizer offload puts
  // the model states (params, grads, optimizer: fixed for the whole step) in the host pool, where
  // the host peak below compares them; they are taken out of every measured breakdown here.
  std::array<int64_t, kMemCategoryCount> host_states{};
  for (const auto& t : plan.terms)
    if (t.host && static_cast<int>(t.category) < 3) host_states[static_cast<int>(t.category)] += t.bytes;
  auto device_only = [&](std::array<int64_t, kMemCategoryCount> categories) {
    for (int k = 0; k < 3; ++k) categories[k] -= host_states[k];
    return categories;
  };
  for (const auto& p : plan.phases) {
    auto it = m.phases.find(p.name);
    if (it == m.phases.end()) {
      c.unmeasured.push_back(p.name);
      continue;
    }
    PhaseRow row;
    row.name = p.name;
    for (int k = 0; k < kMemCategoryCount; ++k) {
      row.measured_categories[k] = device_only(it->second.category_at_peak)[k];
      row.planned_categories[k] = device_only(p.category_bytes)[k];  // a phase's plan counts both pools too
    }
    row.measured = it->second.device_peak - model_state_bytes(row.measured_categories);
    row.planned = p.resident_bytes - model_state_bytes(row.planned_categories);
    c.rows.push_back(row);
  }
  for (const auto& [path, rec] : m.phases) {
    if (path == "step" || path == "fwd" || path == "bwd" || path.find('/') == std::string::npos) continue;
    // per-block parents ("fwd/block.3") hold their children; the plan lists the children only
    if (path.rfind("fwd/block.", 0) == 0 && std::count(path.begin(), path.end(), '/') == 1) continue;
    if (path.rfind("bwd/block.", 0) == 0 && std::count(path.begin(), path.end(), '/') == 1) continue;
    // the optimizer's parts (offloaded: host AdamW, upload) sit inside its phase, which the plan lists
    if (path.rfind("optimizer/", 0) == 0) continue;
    bool planned = false;
    for (const auto& p : plan.phases) planned = planned || p.name == path;
    if (!planned) c.unplanned.push_back(path);
  }
  c.step.name = "step peak (" + plan.peak_phase + ")";
  c.step.measured_categories = device_only(m.category_at_peak);
  for (int k = 0; k < kMemCategoryCount; ++k) c.step.planned_categories[k] = plan.category_bytes[k];
  c.step.measured = m.device_peak - model_state_bytes(c.step.measured_categories);
  c.step.planned = plan.peak_bytes - model_state_bytes(c.step.planned_categories);
  for (const auto& t : plan.terms)
    if (t.host) c.host_planned += t.bytes;
  return c;
}

/// Tolerances of the per-phase comparison, stated against what was measured when the phase test
/// (tests/parallel/measure_phases_test.cpp) landed (CPU, fp32, one intra-op thread). The planner
/// walks the engine's CUDA step; for CPU it changes only the SDPA output layout (a copy where CUDA
/// has a view). What is left is the CPU attention kernels' own working set: FA-2's buffers (the
/// fp32 dq accumulator, dK/dV at query-head count) are planned, and the CPU kernel's scratch and
/// copies are not. Measured worst cases: step peak 9.9% (tiled MLP, the loss backward); phases
/// 17.2% (forward attention without a graph, plan low) and, with Untied Ulysses, 26.0% (the stage
/// loop's forward and backward, plan low); small phases 1.5% of the step peak.
constexpr double kStepTolerance = 0.12;
constexpr double kPhaseTolerance = 0.20, kUntiedPhaseTolerance = 0.28;
/// Phases whose activation peak is under 10% of the step's (embedding, optimizer) are held to 2%
/// of the step's activation peak instead.
constexpr double kSmallPhase = 0.10, kSmallPhaseTolerance = 0.02;

/// The difference between a phase's planned and measured activation peaks the comparison allows:
/// kPhaseTolerance of the measured peak (kUntiedPhaseTolerance with Untied Ulysses), or for a
/// small phase kSmallPhaseTolerance of the step's.
inline double allowed_phase_difference(const PhaseRow& row, const PhaseRow& step, bool untied) {
  const double step_peak = static_cast<double>(step.measured);
  if (row.measured < kSmallPhase * step_peak) return kSmallPhaseTolerance * step_peak;
  return (untied ? kUntiedPhaseTolerance : kPhaseTolerance) * static_cast<double>(row.measured);
}

/// The largest activation peak of the phases whose name contains `part` (e.g. "/attn"), as
/// {measured, planned}.
inline std::pair<int64_t, int64_t> max_phase(const PhaseComparison& c, const std::string& part) {
  std::pair<int64_t, int64_t> best{0, 0};
  for (const auto& r : c.rows)
    if (r.name.find(part) != std::string::npos) {
      best.first = std::max(best.first, r.measured);
      best.second = std::max(best.second, r.planned);
    }
  return best;
}

inline void print_categories(const char* what, const std::array<int64_t, kMemCategoryCount>& m,
                             const std::array<int64_t, kMemCategoryCount>& p) {
  std::printf("     %-10s", what);
  for (int k = 3; k < kMemCategoryCount; ++k)
    if (m[k] != 0 || p[k] != 0)
      std::printf(" %s %lld/%lld", std::string(to_string(static_cast<MemCategory>(k))).c_str(),
                  static_cast<long long>(m[k]), static_cast<long long>(p[k]));
  std::printf("\n");
}

/// The table: every phase's activation peak measured / planned and the ratio; with `categories`,
/// the breakdown of the phases whose ratio is off by more than `flag`.
inline void print_phase_table(const PhaseComparison& c, bool categories = false, double flag = 0.10) {
  std::printf("== %s\n   %-30s %12s %12s %7s\n", c.label.c_str(), "phase (activation peak, B)", "measured", "planned",
              "p/m");
  auto line = [&](const PhaseRow& r) {
    const bool off = std::abs(r.ratio() - 1.0) > flag;
    std::printf("   %-30s %12lld %12lld %7.3f%s\n", r.name.c_str(), static_cast<long long>(r.measured),
                static_cast<long long>(r.planned), r.ratio(), off ? "  <-" : "");
    if (categories && off) print_categories("m/p:", r.measured_categories, r.planned_categories);
  };
  for (const auto& r : c.rows) line(r);
  line(c.step);
  print_categories("step m/p:", c.step.measured_categories, c.step.planned_categories);
  std::printf("     host peak planned %lld B\n", static_cast<long long>(c.host_planned));
  for (const auto& u : c.unplanned) std::printf("   (unplanned phase) %s\n", u.c_str());
  for (const auto& u : c.unmeasured) std::printf("   (planned, not measured) %s\n", u.c_str());
}

}  // namespace odyssey::test
