// The documents dataset (training.dataset = "documents"): a documents file of `odyssey prepare`
// packed in file order into sequences of seq_len + 1 tokens, with each sequence's document starts.
// defines: UntargetedSequences, UntargetedSequencesScope, DocumentsDataset, make_documents_dataset
#pragma once

#include <memory>

#include "engine/config/run_config.h"
#include "engine/train/dataset.h"

namespace odyssey {

/// What the documents dataset does, under training.document_mask, with a sequence that holds no
/// target inside a document: each of its seq_len labels is the first token of the next document
/// (one-token documents in a row), so every label is ignored and its loss would be 0 / 0.
enum class UntargetedSequences {
  Refuse,  ///< `odyssey train`: the file is bad input (DataError naming the sequence, its tokens and the rule)
  Skip,    ///< `odyssey eval`: the sequence is left out of the pass (DocumentsDataset::skipped)
};

/// While alive, make_documents_dataset(training, model) on this thread takes `policy` (otherwise
/// Refuse). `odyssey eval` builds each rank's Trainer, which opens its dataset through
/// make_dataset, under Skip:  UntargetedSequencesScope skip(UntargetedSequences::Skip);
class UntargetedSequencesScope {
 public:
  explicit UntargetedSequencesScope(UntargetedSequences policy);
  ~UntargetedSequencesScope();
  UntargetedSequencesScope(const UntargetedSequencesScope&) = delete;
  UntargetedSequencesScope& operator=(const UntargetedSequencesScope&) = delete;

 private:
  UntargetedSequences previous_;
};

/// The documents dataset, with what only it can say about its pass.
class DocumentsDataset : public Dataset {
 public:
  /// Sequences a pass (global sequence i is the pass's sequence i mod this), skipped ones not counted.
  virtual int64_t sequences() const = 0;
  /// Sequences of the packing left out of the pass (UntargetedSequences::Skip), else 0.
  virtual int64_t skipped() const = 0;
  /// Tokens after the end of the packing's last sequence (never read).
  virtual int64_t unused_tokens() const = 0;
};

/// Opens training.dataset_path as a documents file (every field checked, every token below its
/// vocab_size, which must not exceed model.vocab_size) and packs it by training.document_packing:
/// - split: sequence k is the stream's tokens [k*S, k*S + S + 1) (S = seq_len; consecutive
///   sequences share one token, so every token after the first is a label once a pass); a
///   document longer than the space left continues in the next sequence.
/// - refuse: sequence k is the S + 1 tokens from the first token of document f(k), f(0) = 0 and
///   f(k+1) the first document sequence k does not hold whole; a document is therefore whole in
///   the sequence it begins (the space after the last whole one holds the next document's
///   beginning, which the next sequence then holds whole). A document longer than S + 1 tokens is
///   bad input naming its index and length.
/// Both: only sequences that end within the file (the last tokens of a pass, fewer than a
/// sequence, are not used); global sequence i is sequence i mod (sequences a pass). Under
/// training.document_mask a sequence without a target inside a document is refused or skipped
/// as `untargeted` says (checked at open: two walks over the index, no token read). Throws DataError.
std::unique_ptr<DocumentsDataset> make_documents_dataset(const TrainingConfig& training, const ModelConfig& model,
                                                         UntargetedSequences untargeted);
/// The same with this thread's policy (UntargetedSequencesScope; Refuse by default): make_dataset's.
std::unique_ptr<Dataset> make_documents_dataset(const TrainingConfig& training, const ModelConfig& model);

}  // namespace odyssey
