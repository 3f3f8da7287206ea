// Training data: the built-in long-range passkey task, llm.c .bin token files, raw-byte files and
// documents files (`odyssey prepare`), and the selection of one rank's slice of a step's batch
// (replica dp_rank's sequences, sequence shard sp_rank with global positions, document starts).
// defines: Dataset, RankBatch, make_dataset, trained_labels, make_rank_batch, LongRangeLayout
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/parallel/comm.h"
#include "engine/train/data_file.h"  // DataError, DataChangedError

namespace odyssey {

/// A source of fixed-length sequences, a pure function of (step-independent) sequence index.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Writes the `seq_len + 1` tokens of global sequence `index` (inputs are [0, S), labels
  /// [1, S]) and, per label position, whether it is an answer token (long-range task only).
  /// Token files are read here, one read per sequence: throws DataChangedError when the file
  /// changed since it was opened.
  virtual void sequence(int64_t index, std::vector<int64_t>* tokens, std::vector<uint8_t>* answer) const = 0;
  /// True when answer masks mean something (the long-range task).
  virtual bool has_answers() const { return false; }
  /// Writes the positions p in [0, seq_len] of sequence `index`'s `seq_len + 1` tokens (as
  /// sequence() writes them) where a document begins, ascending and distinct. Empty for datasets
  /// without documents, and for a sequence that lies inside one document (split packing). 0 is
  /// listed when the sequence begins with a document's first token; seq_len is listed when the last
  /// token (a label only) is a document's first. Reads nothing from the file: a pure function of
  /// `index`, as sequence() is.
  virtual void document_starts(int64_t index, std::vector<int64_t>* starts) const {
    (void)index;
    starts->clear();
  }
  /// True when document_starts means something (the documents dataset).
  virtual bool has_documents() const { return false; }
  /// One line for logs: "long-range passkey: 8 copies ... asked 64 times" / "tokens: data.bin (1.2M tokens)".
  virtual std::string describe() const = 0;
};

/// Opens the dataset of `training` for `model` (vocabulary checks included). Throws DataError.
std::unique_ptr<Dataset> make_dataset(const TrainingConfig& training, const ModelConfig& model);

/// Shape of the long-range passkey task for one (seq_len, vocab): token classes and counts. The
/// task uses the first 11 token ids whatever the vocabulary.
struct LongRangeLayout {
  int64_t seq_len = 0, vocab = 0;
  int64_t filler = 1;                            ///< the one token around everything else
  int64_t query_mark = 2;                        ///< asks for the passkey
  int64_t passkey_first = 3, passkey_count = 8;  ///< the passkey's symbols (chance: 1/8)
  int64_t context = 0;                           ///< S/2: tokens [0, context) hold the copies, the queries come after
  int64_t copies = 0;                            ///< passkey copies in the first half, one per 64 tokens
  int64_t queries = 0;                           ///< [QUERY_MARK answer] pairs in the second half, one per 4 tokens
  static LongRangeLayout make(int64_t seq_len, int64_t vocab);  ///< throws for seq_len < 32 or vocab < 32
};

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

/// The labels step `step` trains over the whole world (D replicas x B sequences x S labels, less
/// those crossing a document boundary under training.document_mask): the loss's divisor,
/// counted from the dataset alone, so every rank finds it without a collective.
int64_t trained_labels(const Dataset& data, int64_t step, const TrainingConfig& training, int64_t dp_size);

/// The sequences of replica ctx.dp_rank at `step` (global indices step*B*D + dp_rank*B + b),
/// sliced to tokens [sp_rank*s, (sp_rank+1)*s) with s = S / sp_size, with each sequence's
/// document starts in [0, S) (whole-sequence positions, see RankBatch::document_starts). Under
/// training.document_mask the labels crossing a boundary are -100 and global_tokens is
/// trained_labels.

RankBatch make_rank_batch(const Dataset& data, int64_t step, const TrainingConfig& training, const RankContext& ctx,
                          at::Device device);

}  // namespace odyssey
