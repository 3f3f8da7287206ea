// The max-context solver against the engine: what `odyssey maxlen` rests on is the step peak's
// growth per token, so for the ALST stack and the full stack (plus Untied Ulysses) on two ranks the
// engine's measured bytes per token (two sequence lengths) are laid beside the planner's, and the
// context each fits into one capacity is compared. defines: [measure][maxlen]
// Print the figures: parallel_tests "[.maxlen-table]" -s
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../memory/phase_compare.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// The two stacks of the published max-context table on the [phases] model
/// (parallel_measurement_config): world 2 = Ulysses 2, FSDP, checkpointing, offload, tiled MLP
/// and loss; `untied`: plus Untied Ulysses with one query head per rank per stage.
RunConfig stack_config(bool untied, int64_t seq_len) {
  RunConfig c = parallel_measurement_config(seq_len);
  c.parallel.world_size = c.parallel.ulysses_degree = 2;
  c.parallel.fsdp = true;
  c.memory.activation_checkpointing = c.memory.offload_activations = true;
  c.memory.tiled_mlp = c.memory.tiled_loss = true;
  c.memory.untied_ulysses = untied;
  c.memory.heads_per_stage = untied ? 2 : 0;
  return c;
}

constexpr int64_t kShort = 2048, kLong = 8192;

struct Slope {
  std::string label;
  int64_t measured_short = 0, measured_long = 0;  ///< rank 0's step device peak, B
  int64_t planned_short = 0, planned_long = 0;
  double measured_per_token() const { return double(measured_long - measured_short) / double(kLong - kShort); }
  double planned_per_token() const { return double(planned_long - planned_short) / double(kLong - kShort); }
};

Slope measure_slope(bool untied) {
  Slope s;
  s.label = untied ? "full stack (Untied, 1 head/rank/stage)" : "ALST (no head chunking)";
  s.measured_short = measure_ranks(stack_config(untied, kShort))[0].device_peak;
  s.measured_long = measure_ranks(stack_config(untied, kLong))[0].device_peak;
  s.planned_short = plan_peak(stack_config(untied, kShort)).peak_bytes;
  s.planned_long = plan_peak(stack_config(untied, kLong)).peak_bytes;
  return s;
}

void print(const Slope& s) {
  std::printf("%-40s measured %lld -> %lld B (%.1f B/token), planned %lld -> %lld B (%.1f B/token), p/m %.3f\n",
              s.label.c_str(), static_cast<long long>(s.measured_short), static_cast<long long>(s.measured_long),
              s.measured_per_token(), static_cast<long long>(s.planned_short), static_cast<long long>(s.planned_long),
              s.planned_per_token(), s.planned_per_token() / s.measured_per_token());
}

/// Measured (cpu-2c, one intra-op thread): bytes per token +1.1% (ALST) and -1.4% (full stack),
/// planned against measured; the context one capacity fits -0.6% and +1.8%.
constexpr double kPerTokenTolerance = 0.05, kContextTolerance = 0.05;

/// The longest sequence whose measured peak stays within `capacity`, by linear interpolation
/// between the two measured lengths (the peak is affine in the length once tiles are full).
double measured_max_context(const Slope& s, int64_t capacity) {
  return double(kShort) + double(capacity - s.measured_short) / s.measured_per_token();
}

}  // namespace

TEST_CASE("maxlen: the planner's bytes per token and longest context match the engine's (ALST, full stack)",
          "[measure][maxlen]") {
  const Slope alst = measure_slope(false), full = measure_slope(true);
  for (const Slope* s : {&alst, &full}) {
    INFO(s->label << ": measured " << s->measured_per_token() << " B/token, planned " << s->planned_per_token()
                  << " B/token");
    CHECK(std::abs(s->planned_per_token() / s->measured_per_token() - 1.0) <= kPerTokenTolerance);
  }
  // What head chunking saves per token, measured and planned.
  CHECK(full.measured_per_token() < alst.measured_per_token());
  CHECK(full.planned_per_token() < alst.planned_per_token());

  // One device capacity for both stacks, between the two lengths (the ALST stack's planned peak at
  // 6K tokens): the context the planned peaks fit against the context the measured peaks fit, and
  // the solver's answer (steps of P x 1K = 2K tokens here) against the measured context: the
  // engine fits the answer and not one step more.
  const int64_t capacity = plan_peak(stack_config(false, 6144)).peak_bytes;
  for (bool untied : {false, true}) {
    const Slope& s = untied ? full : alst;
    RunConfig cfg = stack_config(untied, kShort);
    cfg.hardware.device_memory_gib = double(capacity) / double(int64_t{1} << 30);
    const int64_t solved = solve_max_seq_len(cfg), step = seq_len_granularity(cfg, solved);
    const double measured = measured_max_context(s, capacity);
    const double planned = double(kShort) + double(capacity - s.planned_short) / s.planned_per_token();
    INFO(s.label << ": capacity " << capacity << " B; context fitting it: planned " << planned << ", measured "
                 << measured << " tokens; solver " << solved << " (step " << step << ")");
    CHECK(std::abs(planned / measured - 1.0) <= kContextTolerance);
    CHECK(double(solved) <= measured * (1.0 + kContextTolerance));
    CHECK(double(solved + step) > measured * (1.0 - kContextTolerance));
  }
}

TEST_CASE("maxlen: the engine's bytes per token (ALST and full stack) against the planner's (printed)",
          "[.maxlen-table]") {
  for (bool untied : {false, true}) print(measure_slope(untied));
}

TEST_CASE("maxlen: phase tables at the long length (printed)", "[.maxlen-phases]") {
  for (bool untied : {false, true}) {
    const RunConfig cfg = stack_config(untied, kLong);
    print_phase_table(compare_phases(untied ? "full stack 8K" : "ALST 8K", measure_ranks(cfg)[0], plan_memory(cfg)),
                      /*categories=*/true, 0.05);
  }
}
