// Synthetic steps for the timeline benchmark: leaf phases in engine order (see docs/architecture.md
// "Phases"), a sample at each phase edge per rank, a span per phase and per step.
// defines: fill_synthetic_history
#include "app/studio/synthetic.h"

#include <cmath>
#include <string>
#include <vector>

namespace odyssey::studio {

void fill_synthetic_history(RunHistory& history, int64_t samples, int ranks) {
  constexpr int kLayers = 4;
  std::vector<std::string> names = {"step"};
  struct Leaf {
    int id;
    double bytes_delta;  // resident change across the phase
    double spike;        // transient inside it
  };
  std::vector<Leaf> leaves;
  auto add = [&](const std::string& name, double delta, double spike) {
    names.push_back(name);
    leaves.push_back({static_cast<int>(names.size()) - 1, delta, spike});
  };
  constexpr double MiB = 1024.0 * 1024.0;
  add("fwd/embed", 0.5 * MiB, 1 * MiB);
  for (int i = 0; i < kLayers; ++i) {
    add("fwd/block." + std::to_string(i) + "/attn", 0.25 * MiB, 3 * MiB);
    add("fwd/block." + std::to_string(i) + "/mlp", 0.25 * MiB, 2 * MiB);
  }
  add("fwd/loss", 0.5 * MiB, 4 * MiB);
  for (int i = kLayers - 1; i >= 0; --i) {
    add("bwd/block." + std::to_string(i) + "/recompute", 0.5 * MiB, 2 * MiB);
    add("bwd/block." + std::to_string(i) + "/mlp", -0.5 * MiB, 2.5 * MiB);
    add("bwd/block." + std::to_string(i) + "/attn", -0.5 * MiB, 3.5 * MiB);
    add("bwd/block." + std::to_string(i) + "/reduce_scatter", -0.125 * MiB, 1 * MiB);
  }
  add("bwd/embed", -1.0 * MiB, 0.5 * MiB);
  add("optimizer", 0, 1.5 * MiB);
  history.set_phase_names(names);

  const int64_t per_step = static_cast<int64_t>(leaves.size()) * 2 * ranks;
  const int64_t steps = std::max<int64_t>(1, samples / per_step);
  const double phase_s = 0.002;
  std::vector<MemorySample> out_samples;
  std::vector<PhaseSpan> out_spans;
  std::vector<StepMetrics> out_metrics;
  out_samples.reserve(static_cast<size_t>(steps * per_step));
  double t = 0;
  const double base = 6 * MiB;
  for (int64_t step = 0; step < steps; ++step) {
    const double t_step = t;
    StepMetrics m;
    m.step = step;
    for (int r = 0; r < ranks; ++r) {
      double bytes = base + r * 0.25 * MiB;
      double tr = t_step;
      int64_t peak = 0;
      for (const Leaf& leaf : leaves) {
        const double wobble = 1.0 + 0.05 * std::sin(0.37 * step + leaf.id);
        const double begin = bytes, end = bytes + leaf.bytes_delta;
        const double spike = std::max(begin, end) + leaf.spike * wobble;
        out_samples.push_back(
            {tr, step, r, leaf.id, static_cast<int64_t>(begin), static_cast<int64_t>(0.5 * MiB * (leaf.id % 3))});
        out_samples.push_back({tr + phase_s, step, r, leaf.id, static_cast<int64_t>(end),
                               static_cast<int64_t>(0.5 * MiB * (leaf.id % 3))});
        const int depth = names[leaf.id].find("block") != std::string::npos ? 2 : 1;
        out_spans.push_back({step, r, leaf.id, depth, tr, tr + phase_s, static_cast<int64_t>(begin),
                             static_cast<int64_t>(end), static_cast<int64_t>(spike), 0});
        peak = std::max<int64_t>(peak, static_cast<int64_t>(spike));
        bytes = end;
        tr += phase_s;
      }
      out_spans.push_back(
          {step, r, 0, 0, t_step, tr, static_cast<int64_t>(base), static_cast<int64_t>(bytes), peak, 0});
      m.rank_peak_bytes.push_back(peak);
      m.rank_host_peak_bytes.push_back(static_cast<int64_t>(MiB));
      m.peak_bytes = std::max(m.peak_bytes, peak);
    }
    t += phase_s * static_cast<double>(leaves.size()) + 0.001;
    m.step_time_s = t - t_step;
    m.tokens_per_s = 512.0 / m.step_time_s;
    m.loss = 5.0 * std::exp(-0.01 * static_cast<double>(step));
    m.mfu = 0.01;
    out_metrics.push_back(m);
  }
  history.ingest_samples(out_samples);
  history.ingest_spans(out_spans);
  history.ingest_metrics(out_metrics);
}

}  // namespace odyssey::studio
