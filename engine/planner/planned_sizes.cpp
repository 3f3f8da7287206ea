// The memory sizes a preset may leave to the planner ("auto"): the Untied stage size (standard
// attention where no stage size lowers the peak) and the tiled MLP's tile at a run's length.
#include <algorithm>
#include <limits>

#include "engine/config/validate.h"
#include "engine/planner/planner.h"

namespace odyssey {

namespace {

/// The largest of `values` (increasing) whose peak under `with(value)` is the lowest of all, and
/// that peak: one verdict walk each. Equal peaks mean the coarser value costs no memory at this
/// length.
struct CoarsestPick {
  int64_t value = 0;
  int64_t peak_bytes = 0;
};
template <class With>
CoarsestPick coarsest_at_lowest_peak(const std::vector<int64_t>& values, With with) {
  std::vector<int64_t> peaks;
  peaks.reserve(values.size());
  for (int64_t v : values) peaks.push_back(plan_peak(with(v)).peak_bytes);
  const int64_t lowest = *std::min_element(peaks.begin(), peaks.end());
  for (size_t i = values.size(); i-- > 0;)
    if (peaks[i] == lowest) return {values[i], lowest};
  return {values.front(), lowest};  // unreachable: some value holds the lowest peak
}

/// How the attention runs: Untied Ulysses and its stage size (0 when it does not run).
struct PlannedAttention {
  bool untied = false;
  int64_t heads_per_stage = 0;
};

/// heads_per_stage = "auto" resolved (planned_heads_per_stage, planned_untied_ulysses: one rule).
/// Standard attention is the coarsest choice of all (no stages, and no re-projection of q, k and v
/// in backward: the Untied Function keeps none of them), so it runs wherever its planned peak is no
/// higher than the lowest a stage size reaches.
PlannedAttention planned_attention(const RunConfig& cfg) {
  const MemoryConfig& m = cfg.memory;
  if (m.heads_per_stage != kHeadsPerStageAuto) return {m.untied_ulysses, m.heads_per_stage};  // as given
  if (!cfg.memory.untied_ulysses) return {};
  const std::vector<int64_t> sizes = valid_heads_per_stage(cfg);  // increasing: most stages first
  if (sizes.empty()) return {true, 0};  // the validator reports why
  RunConfig candidate = cfg;
  candidate.memory.mlp_tile_tokens = planned_mlp_tile_tokens(cfg);  // the tile with which it runs
  const CoarsestPick chunked = coarsest_at_lowest_peak(sizes, [&](int64_t heads) -> const RunConfig& {
    candidate.memory.heads_per_stage = heads;
    return candidate;
  });
  candidate.memory.untied_ulysses = false;
  candidate.memory.heads_per_stage = 0;
  if (plan_peak(candidate).peak_bytes <= chunked.peak_bytes) return {};
  return {true, chunked.value};
}

}  // namespace

int64_t planned_mlp_tile_tokens(const RunConfig& cfg) {
  if (cfg.memory.mlp_tile_tokens != kMlpTileTokensAuto) return cfg.memory.mlp_tile_tokens;
  if (!cfg.memory.tiled_mlp) return 0;
  // resolved first: "auto" stages plan at their finest here (the lowest stage memory)
  RunConfig candidate = cfg;
  if (candidate.memory.heads_per_stage == kHeadsPerStageAuto) {
    const std::vector<int64_t> sizes = valid_heads_per_stage(cfg);
    candidate.memory.heads_per_stage = sizes.empty() || !cfg.memory.untied_ulysses ? 0 : sizes.front();
  }
  const int64_t local = cfg.training.seq_len / std::max<int64_t>(1, cfg.parallel.ulysses_degree);
  return coarsest_at_lowest_peak(mlp_tile_candidates(cfg.model.d_model, local), [&](int64_t tokens) -> const RunConfig& {
           candidate.memory.mlp_tile_tokens = tokens;
           return candidate;
         })
      .value;
}

int64_t planned_heads_per_stage(const RunConfig& cfg) { return planned_attention(cfg).heads_per_stage; }

bool planned_untied_ulysses(const RunConfig& cfg) { return planned_attention(cfg).untied; }

RunConfig with_planned_sizes(const RunConfig& cfg) {
  RunConfig out = cfg;
  out.memory.mlp_tile_tokens = planned_mlp_tile_tokens(cfg);
  const PlannedAttention attention = planned_attention(out);
  out.memory.untied_ulysses = attention.untied;
  out.memory.heads_per_stage = attention.heads_per_stage;
  return out;
}

}  // namespace odyssey
