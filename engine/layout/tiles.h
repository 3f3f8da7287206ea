// How the sequence splits: over the Ulysses ranks (the rule), and into the tiled MLP's and tiled
// loss's tiles (positions of each of the B sequences one tile holds), for the engine and the planner.
// defines: sequence_shard_rule, SequenceTile, kMlpTileTokensAuto, mlp_sequence_tile, mlp_tile_candidates,
// loss_sequence_tile, input_norm_tile_rows
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace odyssey {

/// Rule: the Ulysses degree divides the sequence (every rank holds an equal shard). nullopt when it
/// holds, else the text the validator reports under training.seq_len.
std::optional<std::string> sequence_shard_rule(int64_t seq_len, int64_t degree);

/// One tile of `positions` positions over all `batch` sequences: `rows` = batch x positions token
/// rows of the [rows, f] (MLP) or [rows, V] (loss) intermediates; `count` tiles cover the local
/// sequence (the last one may be shorter).
struct SequenceTile {
  int64_t positions = 1;
  int64_t rows = 1;
  int64_t count = 1;
};

/// memory.mlp_tile_tokens = "auto" as stored: the planner picks the tile at the run's length
/// (planned_mlp_tile_tokens, engine/planner/planner.h: the fewest tiles at the lowest planned peak).
/// Outside the key's range on purpose: mlp_sequence_tile refuses it unresolved.
inline constexpr int64_t kMlpTileTokensAuto = -1;

/// memory.mlp_tile_tokens (0 = d_model positions), clamped to [1, local_positions]. Throws
/// std::invalid_argument for kMlpTileTokensAuto, which only the planner resolves.
SequenceTile mlp_sequence_tile(int64_t mlp_tile_tokens, int64_t d_model, int64_t batch, int64_t local_positions);
/// The tiles "auto" chooses among, increasing: d_model positions doubled until one tile holds the
/// rank's whole local sequence (DeepSpeed's d_model tile first, the fewest tiles last).
std::vector<int64_t> mlp_tile_candidates(int64_t d_model, int64_t local_positions);

/// memory.loss_tile_tokens (0 = about 1 GiB of fp32 logits: 2^30 / (4 V) positions), clamped to
/// [1, local_positions].
SequenceTile loss_sequence_tile(int64_t loss_tile_tokens, int64_t vocab_size, int64_t batch, int64_t local_positions);

/// Token rows per tile of the Untied Function's passes over its block input for the attention's
/// RMSNorm (the 1/rms in forward, the norm's backward written over the gradient in backward):
/// 2^24 / d_model rows (one [rows, d] tile is 64 MiB in fp32), at least 1, at most `rows`.
/// Memory reason: the normed input is never made whole; these tiles are what the norm costs.
int64_t input_norm_tile_rows(int64_t rows, int64_t d_model);

}  // namespace odyssey
