// Tile plan of the fused linear + cross-entropy (kernels/linear_cross_entropy.cu): shapes, default
// tiles and the workspace layout. Host arithmetic without CUDA headers, shared by the kernels, the
// engine and the planner (whose GPU profile charges exactly this workspace).
// defines: LinearCrossEntropyShape, LceTilePlan, plan_linear_cross_entropy, kMaxLceTileElements,
//          kLceDefaultTile, lce_head_gemms, lce_vocab_tile, widest_vocab_tiles, largest_lce_seq_tile,
//          FusedLossTiles, fused_loss_tiles, fused_loss_answer_rows
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_host.h"

namespace odyssey::kernels {

/// The default sequence and vocabulary tile (tokens, entries).
constexpr int64_t kLceDefaultTile = 8192;

/// The head GEMMs of 2 x tokens x vocab x dim FLOPs the fused kernel runs with `n_vocab_tiles`
/// vocabulary tiles (LceTilePlan::n_vocab_tiles): over several tiles the logits twice (pass 1 for
/// the row statistics, pass 2 again for the gradient, the log-sum-exp being known only after the
/// last tile), over one tile of whole rows once (pass 2 reads the tile pass 1 left), then dhidden
/// and dweight. The unfused head runs 3. The kernel and the planner's step time read this.
constexpr int lce_head_gemms(int64_t n_vocab_tiles) { return n_vocab_tiles > 1 ? 4 : 3; }

/// hidden [tokens, dim], weight [vocab, dim], labels [tokens]. Tiles of 0 pick the defaults
/// (min(tokens, 8192) and min(vocab, 8192): a 256 MiB fp32 logits tile).
struct LinearCrossEntropyShape {
  int64_t tokens = 0;
  int64_t dim = 0;
  int64_t vocab = 0;
  int64_t seq_tile = 0;
  int64_t vocab_tile = 0;
};

/// Tile counts and the byte layout of the workspace (offsets 256-byte aligned). Host arithmetic.
struct LceTilePlan {
  int64_t seq_tile = 0, vocab_tile = 0;
  int64_t n_seq_tiles = 0, n_vocab_tiles = 0;
  size_t logits_offset = 0;       ///< fp32 [seq_tile, vocab_tile]: one logits tile
  size_t grad_offset = 0;         ///< dtype [seq_tile, vocab_tile]: the tile's dlogits (aliases logits for fp32)
  size_t row_max_offset = 0;      ///< fp32 [seq_tile]: running max, then the row's log-sum-exp
  size_t row_sum_offset = 0;      ///< fp32 [seq_tile]: running sum of exp(logit - max)
  size_t target_offset = 0;       ///< fp32 [seq_tile]: the label's logit
  size_t dhidden_acc_offset = 0;  ///< fp32 [seq_tile, dim]: dhidden accumulator (bf16 only; fp32 writes in place)
  size_t bytes = 0;               ///< total workspace
};

/// The vocabulary tile of a plan: `vocab_tile`, or kLceDefaultTile when 0, at most the vocabulary.
inline int64_t lce_vocab_tile(int64_t vocab, int64_t vocab_tile) {
  const int64_t wanted = vocab_tile > 0 ? vocab_tile : kLceDefaultTile;
  return wanted < vocab ? wanted : vocab;
}

/// Checks the shape (throws KernelError naming the field) and lays out the workspace.
LceTilePlan plan_linear_cross_entropy(KernelDtype dtype, const LinearCrossEntropyShape& shape);

/// Most elements one logits tile may hold: cuBLAS takes int dimensions and leading dimensions.
constexpr int64_t kMaxLceTileElements = 0x7fffffff;

/// The widest tiling of the same problem that the plan accepts: whole vocabulary rows (vocab_tile
/// = vocab) in as many tokens as kMaxLceTileElements allows. The benchmark's "untiled" comparator:
/// a [32768, 128256] tile itself has 4.2e9 elements, past int.
LinearCrossEntropyShape widest_vocab_tiles(int64_t tokens, int64_t dim, int64_t vocab);

/// The largest sequence tile whose logits tile fits kMaxLceTileElements with this vocabulary tiling
/// (vocab_tile 0 = the default): callers with a tile chosen for another reason (the training
/// step's loss tile) clamp to it instead of being refused.
int64_t largest_lce_seq_tile(int64_t vocab, int64_t vocab_tile);

/// The tiles the training step's tiled loss gives the kernel (engine/memory/tiled_loss.cpp runs
/// them; the planner's GPU profile charges their workspace and lce_head_gemms' count): whole
/// vocabulary rows over its tile of `tile_tokens` positions of `batch` sequences, the token count
/// clamped by largest_lce_seq_tile. One vocabulary tile lets pass 2 read pass 1's logits: 3 head
/// GEMMs instead of the 4 of several tiles (the 1B at 32K: 17 TFLOP a step less, about 25 ms on an
/// H200). Memory: the kernel's fp32 logits tile is then the [tile, V] tile that memory.loss_tile_tokens
/// sizes (about 1 GiB at its default: engine/layout/tiles.h) plus its bf16 gradient, where the default
/// 8192-entry tiles held a sixteenth of it over Llama's 128256 entries.
struct FusedLossTiles {
  int64_t seq_tile = 1;
  int64_t vocab_tile = 1;
};
inline FusedLossTiles fused_loss_tiles(int64_t batch, int64_t tile_tokens, int64_t vocab) {
  const int64_t wanted = batch * tile_tokens;
  const int64_t largest = largest_lce_seq_tile(vocab, vocab);
  return FusedLossTiles{wanted < largest ? wanted : largest, vocab};
}

/// Answer rows per chunk when the training step reads the answer tokens' argmax after the fused
/// kernel (engine/memory/tiled_loss.cpp): a chunk's [rows, vocab] logits in the compute dtype hold
/// at most as many elements as the kernel's fp32 logits tile, so they fit in the workspace the
/// kernel has just released and add nothing to the loss phase's peak (the planner charges the
/// workspace alone). Memory: without chunks, 8K answer rows of a 64K sequence over a 128K
/// vocabulary took 13 GiB (measured on an H200, 2026-11-26).
inline int64_t fused_loss_answer_rows(int64_t batch, int64_t tile_tokens, int64_t vocab) {
  const FusedLossTiles tiles = fused_loss_tiles(batch, tile_tokens, vocab);
  const int64_t rows = tiles.seq_tile * lce_vocab_tile(vocab, tiles.vocab_tile) / vocab;
  return rows > 1 ? rows : 1;
}

}  // namespace odyssey::kernels
