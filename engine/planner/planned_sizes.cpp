// The memory sizes a preset may leave to the planner ("auto"): the Untied stage size (standard
// attention where no stage size lowers the peak) and the tiled MLP's tile at a run's length.
#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "engine/config/validate.h"
#include "engine/planner/planner.h"

namespace odyssey {

namespace {

/// The peaks one resolution walks, through `memo` when there is one. Without it each table is
/// still walked once: the stage search asks again for the finest stage size at the tile the tile
/// search picked with it. Every config one resolution asks equals the resolved one outside
/// [memory], so the table alone tells them apart.
class ResolutionPeaks {
 public:
  explicit ResolutionPeaks(PeakMemo* memo) : memo_(memo) {}
  PlanPeak operator()(const RunConfig& cfg) {
    if (memo_) return memo_->peak(cfg);
    for (const auto& [table, peak] : walked_)
      if (table == cfg.memory) return peak;
    walked_.emplace_back(cfg.memory, plan_peak(cfg));
    return walked_.back().second;
  }

 private:
  PeakMemo* memo_;
  std::vector<std::pair<MemoryConfig, PlanPeak>> walked_;  // a resolution walks about a dozen tables
};

/// The largest of `values` (increasing) whose peak under `with(value)` is the lowest of all, and
/// that peak. Equal peaks mean the coarser value costs no memory at this length.
struct CoarsestPick {
  int64_t value = 0;
  int64_t peak_bytes = 0;
};

/// CoarsestPick over any peaks: one verdict walk per value (the stage size, whose stage count,
/// KV ranges and accumulators change the peak both ways).
template <class With>
CoarsestPick coarsest_at_lowest_peak(const std::vector<int64_t>& values, With with, ResolutionPeaks& peak_of) {
  std::vector<int64_t> peaks;
  peaks.reserve(values.size());
  for (int64_t v : values) peaks.push_back(peak_of(with(v)).peak_bytes);
  const int64_t lowest = *std::min_element(peaks.begin(), peaks.end());
  for (size_t i = values.size(); i-- > 0;)
    if (peaks[i] == lowest) return {values[i], lowest};
  return {values.front(), lowest};  // unreachable: some value holds the lowest peak
}

/// CoarsestPick over peaks that never fall as the value grows: the lowest is the first value's,
/// the values at it are a prefix, and bisection finds its end in log2(n) walks instead of n. The
/// MLP tile is such a value: the walk's events are the same for every tile, and the tile enters
/// only the bytes of the tile's own activations ([B, tile, f] and [B, tile, d]), which grow with
/// it, so every running total, the peak among them, grows or stays (tested for the shipped presets
/// with every technique set in tests/planner/planner_properties_test.cpp).
template <class With>
CoarsestPick coarsest_at_lowest_rising_peak(const std::vector<int64_t>& values, With with, ResolutionPeaks& peak_of) {
  const int64_t lowest = peak_of(with(values.front())).peak_bytes;
  size_t at_lowest = 0, above = values.size();  // values[at_lowest] holds the lowest; none from `above` on
  while (above - at_lowest > 1) {
    const size_t mid = at_lowest + (above - at_lowest) / 2;
    (peak_of(with(values[mid])).peak_bytes == lowest ? at_lowest : above) = mid;
  }
  return {values[at_lowest], lowest};
}

/// The MLP tile "auto" picks for `cfg` as its attention stands (a fixed stage size, standard
/// attention, or "auto" stages at their finest: the lowest stage memory); cfg's own tile when fixed.
int64_t tile_for_attention(const RunConfig& cfg, ResolutionPeaks& peak_of) {
  if (cfg.memory.mlp_tile_tokens != kMlpTileTokensAuto) return cfg.memory.mlp_tile_tokens;
  if (!cfg.memory.tiled_mlp) return 0;
  RunConfig candidate = cfg;
  if (candidate.memory.heads_per_stage == kHeadsPerStageAuto) {
    const std::vector<int64_t> sizes = valid_heads_per_stage(cfg);
    candidate.memory.heads_per_stage = sizes.empty() || !cfg.memory.untied_ulysses ? 0 : sizes.front();
  }
  const int64_t local = cfg.training.seq_len / std::max<int64_t>(1, cfg.parallel.ulysses_degree);
  return coarsest_at_lowest_rising_peak(
             mlp_tile_candidates(cfg.model.d_model, local),
             [&](int64_t tokens) -> const RunConfig& {
               candidate.memory.mlp_tile_tokens = tokens;
               return candidate;
             },
             peak_of)
      .value;
}

/// The "auto" sizes resolved: how the attention runs (Untied Ulysses and its stage size, 0 when it
/// does not run) and the MLP tile (0 without the tiled MLP).
struct PlannedSizes {
  bool untied = false;
  int64_t heads_per_stage = 0;
  int64_t mlp_tile_tokens = 0;
};

/// One rule for every "auto" reader (planned_heads_per_stage, planned_untied_ulysses,
/// planned_mlp_tile_tokens, with_planned_sizes). The tile first, with "auto" stages at their
/// finest; then the coarsest stage size at the lowest peak with that tile. Standard attention is
/// the coarsest choice of all (no stages, and no re-projection of q, k and v in backward: the
/// Untied Function keeps none of them), so it runs, with the tile "auto" picks for it, wherever its
/// planned peak is no higher than the lowest a stage size reaches.
PlannedSizes planned_sizes(const RunConfig& cfg, PeakMemo* memo = nullptr) {
  const MemoryConfig& m = cfg.memory;
  ResolutionPeaks peak_of(memo);
  const int64_t tile = tile_for_attention(cfg, peak_of);
  if (m.heads_per_stage != kHeadsPerStageAuto) return {m.untied_ulysses, m.heads_per_stage, tile};  // as given
  if (!m.untied_ulysses) return {false, 0, tile};
  const std::vector<int64_t> sizes = valid_heads_per_stage(cfg);  // increasing: most stages first
  if (sizes.empty()) return {true, 0, tile};                      // the validator reports why
  RunConfig chunked_cfg = cfg;
  chunked_cfg.memory.mlp_tile_tokens = tile;
  const CoarsestPick chunked = coarsest_at_lowest_peak(
      sizes,
      [&](int64_t heads) -> const RunConfig& {
        chunked_cfg.memory.heads_per_stage = heads;
        return chunked_cfg;
      },
      peak_of);
  RunConfig standard = cfg;
  standard.memory.untied_ulysses = false;
  standard.memory.heads_per_stage = 0;
  standard.memory.mlp_tile_tokens = tile_for_attention(standard, peak_of);
  if (peak_of(standard).peak_bytes <= chunked.peak_bytes) return {false, 0, standard.memory.mlp_tile_tokens};
  return {true, chunked.value, tile};
}

}  // namespace

int64_t planned_mlp_tile_tokens(const RunConfig& cfg) { return planned_sizes(cfg).mlp_tile_tokens; }

int64_t planned_heads_per_stage(const RunConfig& cfg) { return planned_sizes(cfg).heads_per_stage; }

bool planned_untied_ulysses(const RunConfig& cfg) { return planned_sizes(cfg).untied; }

namespace {

RunConfig with_sizes(const RunConfig& cfg, const PlannedSizes& sizes) {
  RunConfig out = cfg;
  out.memory.untied_ulysses = sizes.untied;
  out.memory.heads_per_stage = sizes.heads_per_stage;
  out.memory.mlp_tile_tokens = sizes.mlp_tile_tokens;
  return out;
}

}  // namespace

RunConfig with_planned_sizes(const RunConfig& cfg) { return with_sizes(cfg, planned_sizes(cfg)); }

RunConfig with_planned_sizes(const RunConfig& cfg, PeakMemo& memo) {
  return with_sizes(cfg, planned_sizes(cfg, &memo));
}

size_t PeakMemo::TableHash::operator()(const MemoryConfig& m) const {
  size_t h = 0;
  for (int64_t field :
       {int64_t{m.activation_checkpointing}, int64_t{m.offload_activations}, int64_t{m.tiled_mlp}, m.mlp_tile_tokens,
        int64_t{m.tiled_loss}, m.loss_tile_tokens, int64_t{m.untied_ulysses}, m.heads_per_stage,
        int64_t{m.offload_optimizer}, int64_t{m.keep_attention}, m.keep_attention_blocks,
        int64_t{m.offload_kept_attention}, static_cast<int64_t>(m.lse_attention_kernel)})
    h = h * 1000003u ^ std::hash<int64_t>{}(field);
  return h;
}

PlanPeak PeakMemo::peak(const RunConfig& cfg) {
  RunConfig outside_memory = cfg;
  outside_memory.memory = base_.memory;
  if (!(outside_memory == base_))
    throw std::logic_error("PeakMemo: a config that differs from the memo's outside [memory]");
  const auto found = peaks_.find(cfg.memory);
  if (found != peaks_.end()) return found->second;
  ++walks_;
  return peaks_.emplace(cfg.memory, plan_peak(cfg)).first->second;
}

}  // namespace odyssey
