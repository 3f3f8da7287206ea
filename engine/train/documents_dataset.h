// The documents dataset (training.dataset = "documents"): a documents file of `odyssey prepare`
// packed in file order into sequences of seq_len + 1 tokens, with each sequence's document starts.
// defines: make_documents_dataset
#pragma once

#include <memory>

#include "engine/config/run_config.h"
#include "engine/train/data.h"

namespace odyssey {

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
/// sequence, are not used); global sequence i is sequence i mod (sequences a pass). Throws DataError.
std::unique_ptr<Dataset> make_documents_dataset(const TrainingConfig& training, const ModelConfig& model);

}  // namespace odyssey
