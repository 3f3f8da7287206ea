// Sequence tiles of the tiled MLP and the tiled loss: how many positions of each of the B
// sequences one tile holds, defined once for the engine (which tiles [B, n, ...]) and the planner.
// defines: SequenceTile, mlp_sequence_tile, loss_sequence_tile
#pragma once

#include <cstdint>

namespace odyssey {

/// One tile of `positions` positions over all `batch` sequences: `rows` = batch x positions token
/// rows of the [rows, f] (MLP) or [rows, V] (loss) intermediates; `count` tiles cover the local
/// sequence (the last one may be shorter).
struct SequenceTile {
  int64_t positions = 1;
  int64_t rows = 1;
  int64_t count = 1;
};

/// memory.mlp_tile_tokens (0 = d_model positions), clamped to [1, local_positions].
SequenceTile mlp_sequence_tile(int64_t mlp_tile_tokens, int64_t d_model, int64_t batch, int64_t local_positions);

/// memory.loss_tile_tokens (0 = about 1 GiB of fp32 logits: 2^30 / (4 V) positions), clamped to
/// [1, local_positions].
SequenceTile loss_sequence_tile(int64_t loss_tile_tokens, int64_t vocab_size, int64_t batch, int64_t local_positions);

}  // namespace odyssey
