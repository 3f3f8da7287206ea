// Training data as sequences: the built-in long-range passkey task, llm.c .bin token files,
// raw-byte files and documents files (`odyssey prepare`), opened and checked without LibTorch, so
// that `odyssey check` refuses what `odyssey train` would. defines: Dataset, make_dataset,
// LongRangeLayout, trained_labels
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
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

/// The labels step `step` trains over the whole world (D replicas x B sequences x S labels, less
/// those crossing a document boundary under training.document_mask): the loss's divisor,
/// counted from the dataset alone, so every rank finds it without a collective.
int64_t trained_labels(const Dataset& data, int64_t step, const TrainingConfig& training, int64_t dp_size);

}  // namespace odyssey
