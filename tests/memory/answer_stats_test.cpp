// The answer statistics the fused loss path reads (accumulate_answer_rows): the same CE sum, count
// and argmax hits as the all-logits reference, and a working set of one chunk of answer rows.
// The fused CUDA kernel itself is not on this path; its per-token CE is stood in for by ATen's.
#include <catch2/catch.hpp>

#include "engine/memory/tiled_loss.h"
#include "engine/telemetry/memory_tracker.h"
#include "../fp_tolerance.h"
#include "kernels/linear_cross_entropy_plan.h"

using namespace odyssey;

namespace {

constexpr int64_t kTokens = 512, kDim = 32, kVocab = 1000;

/// Hidden states whose logits have a clear winner: token i points at head row winner[i] (3 times
/// that row plus small noise), so the argmax margin (about 2 in logit units) is far above fp32
/// rounding (d * u * |logit|, about 1e-5) and both evaluation orders pick the same entry.
struct AnswerCase {
  at::Tensor hidden;  // [T, d] fp32
  at::Tensor head;    // [V, d] fp32, rows of norm ~1
  at::Tensor labels;  // [T] int64: the winner on even answer positions, another entry on odd ones
  at::Tensor mask;    // [T] bool: one position in four is an answer
};

AnswerCase make_case() {
  at::manual_seed(11);
  AnswerCase c;
  c.head = at::randn({kVocab, kDim}) / std::sqrt(static_cast<double>(kDim));
  const at::Tensor winner = at::randint(kVocab, {kTokens}, at::kLong);
  c.hidden = 3.0 * c.head.index_select(0, winner) + 0.05 * at::randn({kTokens, kDim});
  const at::Tensor position = at::arange(kTokens, at::kLong);
  c.mask = position.remainder(4) == 1;
  const at::Tensor other = (winner + 1 + at::randint(kVocab - 1, {kTokens}, at::kLong)).remainder(kVocab);
  c.labels = at::where(position.remainder(8) == 1, winner, other);
  return c;
}

}  // namespace

TEST_CASE("answer statistics from the per-token CE equal the all-logits reference, in any chunking",
          "[tiled_loss][answer]") {
  const AnswerCase c = make_case();
  const at::Tensor logits = head_logits(c.hidden.unsqueeze(0), c.head);  // [1, T, V] fp32
  AnswerStats reference;
  accumulate_answer_stats(logits, c.labels.unsqueeze(0), c.mask.unsqueeze(0), &reference);
  const at::Tensor token_ce = at::cross_entropy_loss(logits.squeeze(0), c.labels, {}, at::Reduction::None);  // [T] fp32
  const int64_t answers = c.mask.sum().item<int64_t>();
  REQUIRE(reference.count.item<double>() == static_cast<double>(answers));
  // Every even answer (labels = the winner) is a hit, every odd one a miss.
  REQUIRE(reference.correct.item<double>() == static_cast<double>((answers + 1) / 2));
  for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{64}, answers, answers + 5}) {
    AnswerStats chunked;
    accumulate_answer_rows(c.hidden, c.head, c.labels, c.mask, token_ce, chunk, &chunked);
    INFO("chunk_rows " << chunk);
    CHECK(chunked.count.item<double>() == reference.count.item<double>());
    CHECK(chunked.correct.item<double>() == reference.correct.item<double>());
    // The same per-token CE values summed in another order (k positive terms) after a
    // log-sum-exp over V entries: chain V + k, kappa 1.
    const double want = reference.ce_sum.item<double>();
    CHECK(std::abs(chunked.ce_sum.item<double>() - want) <=
          test::reordering_tolerance(kVocab + answers, 1.0) * std::abs(want));
  }
  AnswerStats twice;  // statistics accumulate across calls (tiles, micro-batches)
  accumulate_answer_rows(c.hidden, c.head, c.labels, c.mask, token_ce, 7, &twice);
  accumulate_answer_rows(c.hidden, c.head, c.labels, c.mask, token_ce, 7, &twice);
  CHECK(twice.count.item<double>() == 2.0 * answers);
  CHECK_THROWS_WITH(accumulate_answer_rows(c.hidden, c.head, c.labels, c.mask, token_ce, 0, &twice),
                    Catch::Contains("chunk_rows = 0"));
}

TEST_CASE("answer statistics hold one chunk of answer logits, not all of them", "[tiled_loss][answer][memory]") {
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.install_cpu_allocator();
  const AnswerCase c = make_case();
  const at::Tensor token_ce = at::rand({kTokens});  // only summed here
  const int64_t answers = c.mask.sum().item<int64_t>(), chunk = 4;
  AnswerStats stats;
  accumulate_answer_rows(c.hidden, c.head, c.labels, c.mask, token_ce, chunk, &stats);  // first-use allocations
  const int64_t base = tracker.device_bytes(0);
  const int window = tracker.open_peak_window(0);
  accumulate_answer_rows(c.hidden, c.head, c.labels, c.mask, token_ce, chunk, &stats);
  const int64_t peak = tracker.close_peak_window(0, window).device_peak - base;
  // One chunk: its [chunk, V] fp32 logits, gathered rows [chunk, d] fp32, argmax (int64) and
  // compare (bool) per row; plus the per-answer index tensors (rows, targets: int64; CE: fp32) and
  // nonzero()'s scratch over the T-entry mask, counted generously as 4 int64 words per entry.
  const int64_t bound = chunk * (kVocab * 4 + kDim * 4 + 8 + 1) + answers * (8 + 8 + 4) + 4 * kTokens * 8;
  INFO("peak " << peak << " B, bound " << bound << " B, all answers' fp32 logits " << answers * kVocab * 4 << " B");
  CHECK(peak <= bound);
  CHECK(peak * 4 < answers * kVocab * 4);  // the all-at-once logits alone were 4x more than everything here
}

TEST_CASE("fused-loss answer chunks hold no more logits than the kernel's fp32 tile", "[tiled_loss][answer]") {
  for (int64_t vocab : {int64_t{1000}, int64_t{8192}, int64_t{128256}}) {
    for (int64_t tile : {int64_t{1}, int64_t{2092}, int64_t{8192}, int64_t{65536}}) {
      const int64_t rows = kernels::fused_loss_answer_rows(1, tile, vocab);
      const kernels::FusedLossTiles tiles = kernels::fused_loss_tiles(1, tile, vocab);
      const int64_t seq_tile = tiles.seq_tile, vocab_tile = tiles.vocab_tile;
      INFO("vocab " << vocab << " tile " << tile << " rows " << rows);
      CHECK(rows >= 1);
      if (rows > 1) CHECK(rows * vocab <= seq_tile * vocab_tile);  // fits the released workspace's logits
      CHECK((rows + 1) * vocab > seq_tile * vocab_tile);           // and is the largest that does
    }
  }
}
