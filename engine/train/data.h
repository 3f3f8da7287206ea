// One rank's slice of a step's batch from a Dataset (dataset.h): replica dp_rank's sequences,
// sequence shard sp_rank with global positions, document starts, as tensors on the rank's device.
// defines: RankBatch, make_rank_batch
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/parallel/comm.h"
#include "engine/train/dataset.h"

namespace odyssey {

/// One rank's part of a step's batch.
struct RankBatch {
  at::Tensor ids;          ///< [B, s] int64
  at::Tensor labels;       ///< [B, s] int64
  at::Tensor answer_mask;  ///< [B, s] bool, undefined when the dataset has no answers
  int64_t first_position = 0;
  int64_t global_tokens = 0;  ///< the global batch's trained labels: B x S x D, less crossing ones (document_mask)
  /// Where documents begin, for attention masking, position resets and loss masking built on it.
  /// The contract:
  /// - document_starts.size() == B always; document_starts[b] belongs to row b of ids and labels
  ///   (global sequence step*B*D + dp_rank*B + b).
  /// - document_starts[b] holds GLOBAL input positions p in [0, S) (S = training.seq_len, the
  ///   whole sequence, not the shard): the input token at position p (ids of the rank holding p,
  ///   column p - first_position) is the first token of a document. Sorted ascending, no repeats.
  /// - The list is the WHOLE sequence's, the same on every Ulysses rank of the sequence (after its
  ///   all-to-all, attention sees all S positions); a rank finds its own shard's starts as those
  ///   in [first_position, first_position + s).
  /// - 0 is listed when the sequence begins with a document's first token. When it is not listed
  ///   (split packing, where a document longer than the space left continues in the next
  ///   sequence), positions [0, first listed start) continue a document begun in an earlier
  ///   sequence. Refuse packing lists 0 always.
  /// - Document k of the sequence spans [starts[k], starts[k+1]) (the last one to S): tokens of
  ///   different documents are from unrelated text.
  /// - A label is never a start by itself: the label at input position p is the input at p + 1,
  ///   so it begins a document when p + 1 is listed. (Position S, the last label's, is not an
  ///   input position and is not reported here; Dataset::document_starts lists it.)
  /// - Every list is empty for datasets without documents (long-range, tokens, bytes), and for a
  ///   sequence inside one document: then the whole row is one text, as without documents.
  /// Host memory, never on the device: the consumer builds its masks from it.
  std::vector<std::vector<int64_t>> document_starts;
  /// Whether the last label of each row begins a document, for the loss masking built on
  /// document_starts. The contract:
  /// - last_label_starts_document.size() == B always; entry b belongs to row b, as in
  ///   document_starts.
  /// - 1 when position S (the last label's: the label at input position S - 1, which only the
  ///   rank holding that position sees) is a document's first token, i.e.
  ///   Dataset::document_starts of the row's sequence lists S; then the target at S - 1 crosses
  ///   a boundary. 0 otherwise.
  /// - The same on every Ulysses rank of the sequence; all zeros for datasets without documents.
  /// Host memory, never on the device.
  std::vector<uint8_t> last_label_starts_document;
};

/// The sequences of replica ctx.dp_rank at `step` (global indices step*B*D + dp_rank*B + b),
/// sliced to tokens [sp_rank*s, (sp_rank+1)*s) with s = S / sp_size, with each sequence's
/// document starts in [0, S) (whole-sequence positions, see RankBatch::document_starts). Under
/// training.document_mask the labels crossing a boundary are -100 and global_tokens is
/// trained_labels.

RankBatch make_rank_batch(const Dataset& data, int64_t step, const TrainingConfig& training, const RankContext& ctx,
                          at::Device device);

}  // namespace odyssey
