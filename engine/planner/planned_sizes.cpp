// The memory sizes a preset may leave to the planner ("auto"): the Untied stage size and the tiled
// MLP's tile at a run's length, the fewest stages and tiles at the lowest planned peak.
#include <algorithm>
#include <limits>

#include "engine/config/validate.h"
#include "engine/planner/planner.h"

namespace odyssey {

namespace {

/// The largest of `values` (increasing) whose peak under `with(value)` is the lowest of all: one
/// verdict walk each. Equal peaks mean the coarser value costs no memory at this length.
template <class With>
int64_t coarsest_at_lowest_peak(const std::vector<int64_t>& values, With with) {
  std::vector<int64_t> peaks;
  peaks.reserve(values.size());
  for (int64_t v : values) peaks.push_back(plan_peak(with(v)).peak_bytes);
  const int64_t lowest = *std::min_element(peaks.begin(), peaks.end());
  for (size_t i = values.size(); i-- > 0;)
    if (peaks[i] == lowest) return values[i];
  return values.front();  // unreachable: some value holds the lowest peak
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
  });
}

int64_t planned_heads_per_stage(const RunConfig& cfg) {
  if (cfg.memory.heads_per_stage != kHeadsPerStageAuto) return cfg.memory.heads_per_stage;
  if (!cfg.memory.untied_ulysses) return 0;
  const std::vector<int64_t> sizes = valid_heads_per_stage(cfg);  // increasing: most stages first
  if (sizes.empty()) return 0;
  RunConfig candidate = cfg;
  candidate.memory.mlp_tile_tokens = planned_mlp_tile_tokens(cfg);  // the tile with which it runs
  return coarsest_at_lowest_peak(sizes, [&](int64_t heads) -> const RunConfig& {
    candidate.memory.heads_per_stage = heads;
    return candidate;
  });
}

RunConfig with_planned_sizes(const RunConfig& cfg) {
  RunConfig out = cfg;
  out.memory.mlp_tile_tokens = planned_mlp_tile_tokens(cfg);
  out.memory.heads_per_stage = planned_heads_per_stage(out);
  return out;
}

}  // namespace odyssey
