// Training data: the built-in long-range passkey task, llm.c .bin token files and raw-byte files,
// and the selection of one rank's slice of a step's batch (replica dp_rank's sequences, sequence
// shard sp_rank with global positions). defines: DataError, DataChangedError, Dataset, RankBatch,
// make_dataset, make_rank_batch, LongRangeLayout
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/parallel/comm.h"

namespace odyssey {

/// A data file that cannot be used: the message names the file and the problem. Bad input (exit 2).
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A data file that was valid when the run began and changed during it (it shrank, or holds a
/// token the open-time scan did not see): a runtime failure (exit 1), not bad input, and the run
/// still writes its trace and summary. The message names the file and what changed.
class DataChangedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
  /// One line for logs: "long-range passkey: 8 copies ... asked 64 times" / "tokens: data.bin (1.2M tokens)".
  virtual std::string describe() const = 0;
};

/// Opens the dataset of `training` for `model` (vocabulary checks included). Throws DataError.
std::unique_ptr<Dataset> make_dataset(const TrainingConfig& training, const ModelConfig& model);

/// Shape of the long-range passkey task for one (seq_len, vocab): token classes and counts. The
/// task uses the first 11 token ids whatever the vocabulary.
struct LongRangeLayout {
  int64_t seq_len = 0, vocab = 0;
  int64_t filler = 1;                             ///< the one token around everything else
  int64_t query_mark = 2;                         ///< asks for the passkey
  int64_t passkey_first = 3, passkey_count = 8;   ///< the passkey's symbols (chance: 1/8)
  int64_t context = 0;  ///< S/2: tokens [0, context) hold the copies, the queries come after
  int64_t copies = 0;   ///< passkey copies in the first half, one per 64 tokens
  int64_t queries = 0;  ///< [QUERY_MARK answer] pairs in the second half, one per 4 tokens
  static LongRangeLayout make(int64_t seq_len, int64_t vocab);  ///< throws for seq_len < 32 or vocab < 32
};

/// One rank's part of a step's batch.
struct RankBatch {
  at::Tensor ids;          ///< [B, s] int64
  at::Tensor labels;       ///< [B, s] int64
  at::Tensor answer_mask;  ///< [B, s] bool, undefined when the dataset has no answers
  int64_t first_position = 0;
  int64_t global_tokens = 0;  ///< B x S x D
};

/// The sequences of replica ctx.dp_rank at `step` (global indices step*B*D + dp_rank*B + b),
/// sliced to tokens [sp_rank*s, (sp_rank+1)*s) with s = S / sp_size.
RankBatch make_rank_batch(const Dataset& data, int64_t step, const TrainingConfig& training, const RankContext& ctx,
                          at::Device device);

}  // namespace odyssey
