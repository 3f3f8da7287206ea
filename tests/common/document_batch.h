// Packed batches for the document-masking equivalence suites: random tokens in hand-placed
// documents, labels across a boundary masked by the layout's rule, a rank's shard of the packed
// batch, and the reference that runs each document alone. defines: PackedBatch, make_packed_batch,
// packed_batch_of, packed_inputs, run_documents_alone
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "engine/layout/documents.h"
#include "engine/model/llama.h"
#include "engine/train/data.h"
#include "engine/train/trainer.h"

namespace odyssey::test {

/// B rows of S input tokens (and the token after each row, a label only) in documents.
struct PackedBatch {
  at::Tensor tokens;  ///< [B, S + 1] int64
  at::Tensor labels;  ///< [B, S] int64: tokens[:, 1:], -100 where a label crosses a boundary
  DocumentSpans documents;
  std::vector<bool> next_starts_document;  ///< per row: the token after the row begins a document
  int64_t targets = 0;                     ///< the labels trained (not -100)
};

/// Rows of tokens [B, S + 1] with each row's document starts (in [0, S)) and last-label flag.
inline PackedBatch make_packed_batch(at::Tensor tokens, std::vector<std::vector<int64_t>> starts,
                                     std::vector<bool> next_starts) {
  PackedBatch p;
  const int64_t B = tokens.size(0), S = tokens.size(1) - 1;
  p.tokens = std::move(tokens);                 // [B, S + 1]
  p.labels = p.tokens.narrow(1, 1, S).clone();  // [B, S]
  p.documents.starts = std::move(starts);
  p.next_starts_document = std::move(next_starts);
  auto labels = p.labels.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t pos = 0; pos < S; ++pos) {
      if (label_crosses_document(p.documents.starts[b], p.next_starts_document[b], pos, S))
        labels[b][pos] = -100;
      else
        ++p.targets;
    }
  return p;
}

/// Random tokens in [0, vocab) (seeded) with each row's document starts and last-label flag.
inline PackedBatch make_packed_batch(std::vector<std::vector<int64_t>> starts, std::vector<bool> next_starts, int64_t S,
                                     int64_t vocab, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t B = static_cast<int64_t>(starts.size());
  return make_packed_batch(at::randint(vocab, {B, S + 1}, gen, at::TensorOptions().dtype(at::kLong)), std::move(starts),
                           std::move(next_starts));
}

/// Sequences [first, first + B) of a documents dataset as a packed batch: its tokens and its own
/// document starts (S, the token after a row, as the row's last-label flag).
inline PackedBatch packed_batch_of(const Dataset& data, int64_t first, int64_t B, int64_t S) {
  at::Tensor tokens = at::empty({B, S + 1}, at::TensorOptions().dtype(at::kLong));  // [B, S + 1]
  std::vector<std::vector<int64_t>> starts(static_cast<size_t>(B));
  std::vector<bool> next(static_cast<size_t>(B), false);
  std::vector<int64_t> row, row_starts;
  std::vector<uint8_t> answer;
  for (int64_t b = 0; b < B; ++b) {
    data.sequence(first + b, &row, &answer);
    for (int64_t t = 0; t <= S; ++t) tokens[b][t] = row[t];
    data.document_starts(first + b, &row_starts);
    for (int64_t p : row_starts) {
      if (p < S)
        starts[b].push_back(p);
      else
        next[b] = true;
    }
  }
  return make_packed_batch(tokens, std::move(starts), std::move(next));
}

/// The inputs of the rank holding positions [first, first + s) of every row: ids, labels and the
/// whole sequence's documents, the loss scaled by the batch's trained labels (`replicas` copies
/// of the batch when data-parallel replicas each run it).
inline ModelInputs packed_inputs(const PackedBatch& p, int64_t first, int64_t s, bool restart, int64_t replicas = 1) {
  ModelInputs in;
  in.ids = p.tokens.narrow(1, first, s).contiguous();     // [B, s]
  in.labels = p.labels.narrow(1, first, s).contiguous();  // [B, s]
  in.first_position = first;
  in.global_tokens = p.targets * replicas;
  in.documents = p.documents;
  in.restart_positions = restart;
  return in;
}

/// The reference: each document of each row alone, a batch of one sequence of its own length, at
/// positions from 0 (restart) or from its place in the row, the loss scaled by the packed batch's
/// trained labels so that the sum over documents is the packed loss. Gradients accumulate in the
/// trainer's groups. Returns the summed loss.
inline double run_documents_alone(Trainer& t, const PackedBatch& p, bool restart) {
  const int64_t B = p.tokens.size(0), S = p.labels.size(1);
  double loss = 0;
  for (int64_t b = 0; b < B; ++b)
    for (const DocumentSegment& seg : document_segments(p.documents.starts[b], S)) {
      ModelInputs in;
      in.ids = p.tokens.narrow(0, b, 1).narrow(1, seg.begin, seg.length).contiguous();     // [1, n]
      in.labels = p.labels.narrow(0, b, 1).narrow(1, seg.begin, seg.length).contiguous();  // [1, n]
      in.first_position = restart ? 0 : seg.begin;
      in.global_tokens = p.targets;
      loss += t.forward_backward(in);
    }
  return loss;
}

}  // namespace odyssey::test
