// Measuring one training step with the memory tracker and laying it beside the planner's
// prediction for the same config. defines: Measured, measure_step, measurement_config,
// long_measurement_config, parallel_measurement_config, planned_phase, print_comparison
#pragma once

#include <array>
#include <iostream>
#include <map>
#include <string>

#include "../common/engine_test_util.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"

namespace odyssey::test {

/// What one rank's tracker saw during one step (rank 0 of a single-rank run here; every rank in
/// phase_compare.h).
struct Measured {
  int64_t device_peak = 0;
  int64_t host_peak = 0;
  std::array<int64_t, kMemCategoryCount> category_at_peak{};
  std::map<std::string, PhaseRecord> phases;  ///< by path (the step measured)
  int64_t model_state_bytes() const { return category_at_peak[0] + category_at_peak[1] + category_at_peak[2]; }
};

/// An 8-layer model whose activations dominate: d=64, 4/2 heads of 16, d_ffn 256, vocab 512,
/// 256 tokens, tiles of 32 (8 tiles), fp32, one CPU rank.
inline RunConfig measurement_config() {
  RunConfig c = tiny_config(8, 256);
  c.model.d_model = 64;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 16;
  c.model.d_ffn = 256;
  c.model.vocab_size = 512;
  c.memory.mlp_tile_tokens = 32;   // 8 tiles
  c.memory.loss_tile_tokens = 32;  // 8 tiles
  c.hardware = *find_hardware_profile("cpu");
  c.hardware.profile = "cpu";
  return c;
}

/// The same model over a longer sequence and vocabulary, where the tokens dominate what a tile
/// cannot divide (weight gradients, [s, d] inputs): 1024 tokens, d_ffn 512, vocab 2048, tiles of
/// 128 (8).
inline RunConfig long_measurement_config() {
  RunConfig c = measurement_config();
  c.training.seq_len = 1024;
  c.model.d_ffn = 512;
  c.model.vocab_size = 2048;
  c.memory.mlp_tile_tokens = 128;
  c.memory.loss_tile_tokens = 128;
  return c;
}

/// The rank-thread model of the per-phase and max-context comparisons: 4 layers, d 128, 8 query
/// heads / 2 KV heads of 16, d_ffn 384, vocab 512, `seq_len` tokens, tiles of 128 (attention and
/// MLP of similar size; Hkv = P at P = 2, GQA with 4 query heads per KV head), fp32, cpu profile.
inline RunConfig parallel_measurement_config(int64_t seq_len = 1024) {
  RunConfig c = tiny_config(/*layers=*/4, seq_len);
  c.model.d_model = 128;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 16;
  c.model.d_ffn = 384;
  c.model.vocab_size = 512;
  c.memory.mlp_tile_tokens = c.memory.loss_tile_tokens = 128;
  c.hardware = *find_hardware_profile("cpu");
  c.hardware.profile = "cpu";
  c.parallel.timeout_s = 120;
  return c;
}

/// Runs two steps and measures the second (the first warms lazily created state).
inline Measured measure_step(const RunConfig& cfg) {
  Trainer t(cfg, cpu_rank());
  t.step();
  t.recorder().take_records();
  const StepResult r = t.step();
  Measured m;
  m.device_peak = r.device_peak;
  m.host_peak = r.host_peak;
  m.category_at_peak = MemoryTracker::instance().snapshot(0).category_at_peak;
  for (auto& rec : t.recorder().take_records()) m.phases[rec.path] = rec;
  return m;
}

inline const PhasePlan* planned_phase(const MemoryPlan& plan, const std::string& name) {
  for (const auto& p : plan.phases)
    if (p.name == name) return &p;
  return nullptr;
}

inline void print_comparison(const std::string& title, const RunConfig& cfg, const Measured& m,
                             const MemoryPlan& plan) {
  std::cout << "== " << title << ": measured peak " << m.device_peak << " B (host " << m.host_peak << "), planned "
            << plan.peak_bytes << " B (host " << plan.host_bytes << ") at " << plan.peak_phase
            << "\n   category at peak  measured / planned:";
  for (int c = 0; c < kMemCategoryCount; ++c)
    std::cout << " " << to_string(static_cast<MemCategory>(c)) << "=" << m.category_at_peak[c] << "/"
              << plan.category_bytes[c];
  std::cout << "\n";
  (void)cfg;
}

}  // namespace odyssey::test
