// Tile plan of the fused linear + cross-entropy: shape checks, default tiles and the workspace
// layout. Host arithmetic only, so kernel_tests checks it without a GPU.
// defines: plan_linear_cross_entropy, widest_vocab_tiles, largest_lce_seq_tile
#include <algorithm>

#include "kernels/linear_cross_entropy_plan.h"

#include <string>

namespace odyssey::kernels {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

std::string field(const char* name, int64_t value) { return std::string(name) + " = " + std::to_string(value); }

}  // namespace

LinearCrossEntropyShape widest_vocab_tiles(int64_t tokens, int64_t dim, int64_t vocab) {
  require(vocab > 0 && vocab <= kMaxLceTileElements,
          "linear_cross_entropy: " + field("vocab", vocab) + " must be between 1 and 2147483647");
  return LinearCrossEntropyShape{tokens, dim, vocab,
                                 std::max<int64_t>(1, std::min(tokens, kMaxLceTileElements / vocab)), vocab};
}

int64_t largest_lce_seq_tile(int64_t vocab, int64_t vocab_tile) {
  const int64_t columns = std::max<int64_t>(1, lce_vocab_tile(vocab, vocab_tile));
  return std::max<int64_t>(1, kMaxLceTileElements / columns);
}

LceTilePlan plan_linear_cross_entropy(KernelDtype dtype, const LinearCrossEntropyShape& s) {
  // The messages are built only for a refusal: the planner asks for this plan in every walk.
  constexpr const char* where = "linear_cross_entropy: ";
  if (!(s.tokens > 0 && s.dim > 0 && s.vocab > 0))
    throw KernelError(where + field("tokens", s.tokens) + ", " + field("dim", s.dim) + ", " + field("vocab", s.vocab) +
                      " must be positive");
  if (!(s.seq_tile >= 0 && s.vocab_tile >= 0))
    throw KernelError(where + field("seq_tile", s.seq_tile) + ", " + field("vocab_tile", s.vocab_tile) +
                      " must be >= 0 (0 = default)");
  constexpr int64_t kIntMax = kMaxLceTileElements;  // cuBLAS dimensions and leading dimensions are int
  if (!(s.dim <= kIntMax && s.vocab <= kIntMax))
    throw KernelError(where + field("dim", s.dim) + ", " + field("vocab", s.vocab) +
                      " must fit cuBLAS's int dimensions");
  LceTilePlan plan;
  plan.seq_tile = std::min(s.seq_tile > 0 ? s.seq_tile : kLceDefaultTile, s.tokens);
  plan.vocab_tile = lce_vocab_tile(s.vocab, s.vocab_tile);
  if (!(plan.seq_tile * plan.vocab_tile <= kIntMax && plan.seq_tile * s.dim <= (int64_t{1} << 40)))
    throw KernelError(std::string(where) + "tile " + std::to_string(plan.seq_tile) + " x " +
                      std::to_string(plan.vocab_tile) + " is too large; pick smaller seq_tile/vocab_tile");
  plan.n_seq_tiles = (s.tokens + plan.seq_tile - 1) / plan.seq_tile;
  plan.n_vocab_tiles = (s.vocab + plan.vocab_tile - 1) / plan.vocab_tile;
  const size_t tile = static_cast<size_t>(plan.seq_tile * plan.vocab_tile);
  const size_t rows = static_cast<size_t>(plan.seq_tile);
  size_t offset = 0;
  plan.logits_offset = offset;
  offset = align_up(offset + tile * sizeof(float));
  if (dtype == KernelDtype::F32) {
    plan.grad_offset = plan.logits_offset;  // the gradient overwrites its logit element by element
  } else {
    plan.grad_offset = offset;
    offset = align_up(offset + tile * dtype_bytes(dtype));
  }
  plan.row_max_offset = offset;
  offset = align_up(offset + rows * sizeof(float));
  plan.row_sum_offset = offset;
  offset = align_up(offset + rows * sizeof(float));
  plan.target_offset = offset;
  offset = align_up(offset + rows * sizeof(float));
  if (dtype == KernelDtype::F32) {
    plan.dhidden_acc_offset = offset;  // unused: fp32 dhidden is accumulated in place
  } else {
    plan.dhidden_acc_offset = offset;
    offset = align_up(offset + rows * static_cast<size_t>(s.dim) * sizeof(float));
  }
  plan.bytes = offset;
  return plan;
}

}  // namespace odyssey::kernels
