// The sequence over Ulysses ranks and the tiles of the tiled MLP, the tiled loss and the Untied input
// norm (engine/layout/tiles.h): the shard rule; each tile setting, its automatic value and the clamp.
#include "engine/layout/tiles.h"

#include <algorithm>
#include <stdexcept>

namespace odyssey {

std::optional<std::string> sequence_shard_rule(int64_t seq_len, int64_t degree) {
  if (degree >= 1 && seq_len % degree == 0) return std::nullopt;
  return "must be divisible by parallel.ulysses_degree = " + std::to_string(degree) +
         " so that every rank holds an equal sequence shard";
}

namespace {

SequenceTile sequence_tile(int64_t positions, int64_t batch, int64_t local_positions) {
  const int64_t local = std::max<int64_t>(1, local_positions);
  SequenceTile t;
  t.positions = std::clamp<int64_t>(positions, 1, local);
  t.rows = std::max<int64_t>(1, batch) * t.positions;
  t.count = (local + t.positions - 1) / t.positions;
  return t;
}

}  // namespace

SequenceTile mlp_sequence_tile(int64_t mlp_tile_tokens, int64_t d_model, int64_t batch, int64_t local_positions) {
  if (mlp_tile_tokens == kMlpTileTokensAuto)
    throw std::invalid_argument(
        "memory.mlp_tile_tokens = \"auto\" has no tile of its own: the planner picks one "
        "(planned_mlp_tile_tokens) before the engine or the planner's shapes read it");
  return sequence_tile(mlp_tile_tokens > 0 ? mlp_tile_tokens : d_model, batch, local_positions);
}

std::vector<int64_t> mlp_tile_candidates(int64_t d_model, int64_t local_positions) {
  std::vector<int64_t> out;
  const int64_t local = std::max<int64_t>(1, local_positions);
  for (int64_t n = std::max<int64_t>(1, d_model);; n *= 2) {
    out.push_back(std::min(n, local));
    if (n >= local) break;
  }
  return out;
}

SequenceTile loss_sequence_tile(int64_t loss_tile_tokens, int64_t vocab_size, int64_t batch, int64_t local_positions) {
  constexpr int64_t kAutoLogitsBytes = int64_t{1} << 30;  // about 1 GiB of fp32 logits per tile
  const int64_t positions = loss_tile_tokens > 0
                                ? loss_tile_tokens
                                : std::max<int64_t>(1, kAutoLogitsBytes / (4 * std::max<int64_t>(1, vocab_size)));
  return sequence_tile(positions, batch, local_positions);
}

int64_t input_norm_tile_rows(int64_t rows, int64_t d_model) {
  constexpr int64_t kTileFloats = int64_t{1} << 24;  // 64 MiB of fp32 per [rows, d] tile
  return std::clamp<int64_t>(kTileFloats / std::max<int64_t>(1, d_model), 1, std::max<int64_t>(1, rows));
}

}  // namespace odyssey
