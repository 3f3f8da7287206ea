// Evaluation of a trained model on held-out documents (`odyssey eval`): the loss by position bucket
// over a documents file packed with document masking, and a needle-in-a-haystack grid scored by
// teacher forcing, both forward only through Trainer::forward_tokens under the run's memory stack,
// on the run's ranks (Ulysses slices and FSDP shards), every position's result gathered to each rank.
// defines: eval_config, PositionBucket, position_buckets, BucketEval, eval_position_buckets,
// NeedlePrompt, kMaxNeedleTrials, NeedleSequence, needle_lengths, kNeedleDepths, needle_sequence,
// needle_trial, needle_sequences, NeedleCell, eval_needle_grid, EvalRequest, EvalReport, evaluate_on_ranks
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/parallel/job.h"
#include "engine/train/documents_file.h"
#include "engine/train/trainer.h"

namespace odyssey {

/// The config an evaluation runs `run` with: the ranks of `run` (parallel.world_size,
/// ulysses_degree, fsdp; no emulation: every rank computes), one sequence per data-parallel replica,
/// training.seq_len = `seq_len`, the documents dataset on `data_path` packed split with
/// training.document_mask (positions as `run` had them), no optimizer offload; the memory
/// techniques and the model as `run` has them. Not validated here (the caller validates: a
/// Ulysses degree that does not divide the heads or `seq_len` is the validator's message).
RunConfig eval_config(const RunConfig& run, const std::string& data_path, int64_t seq_len);

/// Tokens at positions [from, to) of their document: their count and mean CE.
struct PositionBucket {
  int64_t from = 0, to = 0;
  int64_t tokens = 0;  ///< labels scored in the bucket
  double ce_sum = 0;   ///< Σ CE (nats)
  double loss() const { return tokens > 0 ? ce_sum / static_cast<double>(tokens) : 0.0; }
};

/// [0, first), [first, 4 first), [4 first, 16 first), ... the last one ending at seq_len (cut
/// short there). first >= 1; first >= seq_len gives one bucket [0, seq_len).
///   position_buckets(10000, 1024) -> [0,1024) [1024,4096) [4096,10000)
std::vector<PositionBucket> position_buckets(int64_t seq_len, int64_t first);

struct BucketEval {
  std::vector<PositionBucket> buckets;
  int64_t sequences = 0;      ///< sequences of seq_len + 1 tokens evaluated
  int64_t skipped = 0;        ///< sequences without a target inside a document, left out (not counted above)
  int64_t tokens = 0;         ///< labels scored (those crossing a document boundary are not)
  double loss = 0;            ///< mean CE over every scored label
  int64_t unused_tokens = 0;  ///< tokens after the last whole sequence (not evaluated)
};

/// Runs every sequence of the trainer's documents dataset (eval_config: split packing, masking)
/// once, at most `max_sequences` (0: all), forward only (a sequence without a target inside a
/// document, whose loss would be 0 / 0, is left out of the dataset: evaluate_on_ranks builds it
/// under UntargetedSequences::Skip), and sums each scored label's CE into the
/// bucket of its input's position: its offset within its document's part of the sequence (a
/// document begun in an earlier sequence restarts at the sequence's start, as attention does), or
/// its offset in the sequence with training.document_positions = "continue".
/// Collective: every rank of the trainer's job calls it. Each forward takes D sequences (D =
/// data-parallel replicas, sequence k on replica k mod D), each rank its S/P slice as
/// make_rank_batch cuts it; every rank's CE is gathered to every rank, which sums the whole rows
/// in the one-rank order (sequence by sequence, position by position): the result is the same on
/// every rank and for every layout, up to the forward's own rounding. `progress(done, total)`
/// after each forward. Throws DataError, StepFailure, CommError.
BucketEval eval_position_buckets(Trainer& trainer, int64_t first_bucket, int64_t max_sequences,
                                 const std::function<void(int64_t, int64_t)>& progress = {});

/// The tokens of one needle trial: the passkey sentence, the question, and the answer (the
/// passkey as the model should continue the question).
struct NeedlePrompt {
  std::string passkey;  ///< the digits, for reports
  std::vector<int64_t> needle, question, answer;
};

/// The most trials a needle cell runs (`--trials`): a cell's accuracy then resolves 0.1%, finer than
/// any difference between two runs worth reading, and the grid costs 5 x 1000 forwards a length.
/// The prompts are held for the whole grid (a few dozen tokens each), the sequences one forward at
/// a time (needle_trial).
constexpr int64_t kMaxNeedleTrials = 1000;

/// Depths of the needle in percent of the filler: 0, 25, 50, 75, 100.
inline const std::vector<int64_t> kNeedleDepths = {0, 25, 50, 75, 100};

/// Context lengths `min_length`, 2 min_length, 4 min_length, ... and seq_len last (when it is not
/// already one of them). min_length >= seq_len gives {seq_len}.
std::vector<int64_t> needle_lengths(int64_t min_length, int64_t seq_len);

/// One needle sequence of `length` input tokens and its answer's label positions:
/// [filler a][needle][filler b][question][answer], length + 1 tokens in all (the last answer token
/// is the last label). filler a holds round(depth% x F) of the F = length + 1 - needle - question
/// - answer filler tokens. The filler is the documents file's token stream from `filler_offset`
/// (wrapping at its end).
struct NeedleSequence {
  std::vector<int64_t> tokens;     ///< length + 1
  int64_t answer_first_label = 0;  ///< label position (input position) of the first answer token
  int64_t answer_tokens = 0;       ///< the answer's labels: [answer_first_label, + answer_tokens)
  int64_t needle_at = 0;           ///< where the needle begins
};
/// Throws std::invalid_argument when the prompt does not fit `length` (F < 0).
NeedleSequence needle_sequence(const DocumentsFile& filler, int64_t filler_offset, const NeedlePrompt& prompt,
                               int64_t length, int64_t depth_percent);

/// Trial `index` of one context length in the grid's order: depths outer (kNeedleDepths), prompts
/// inner (index = depth index x prompts + t); trial t's filler starts t/trials of the way through
/// the stream. Built when asked: eval_needle_grid holds one sequence a replica at a time.
NeedleSequence needle_trial(const DocumentsFile& filler, const std::vector<NeedlePrompt>& prompts, int64_t length,
                            int64_t index);

/// Every trial of one context length (needle_trial's, in its order).
std::vector<NeedleSequence> needle_sequences(const DocumentsFile& filler, const std::vector<NeedlePrompt>& prompts,
                                             int64_t length);

struct NeedleCell {
  int64_t length = 0, depth = 0;  ///< context tokens, depth in percent
  int64_t trials = 0, correct = 0;
  double accuracy() const { return trials > 0 ? static_cast<double>(correct) / static_cast<double>(trials) : 0.0; }
};

/// Every (length, depth) cell over `prompts` (needle_sequences: one trial each), lengths outer,
/// depths inner (kNeedleDepths). Teacher forcing: a trial is correct when the argmax at every
/// answer label position equals the answer token (the greedy decoding of the answer), from one
/// forward of its sequence. Collective, as eval_position_buckets: a forward takes D trials of one
/// length (one per replica; the last forward of a length repeats its last trial on the replicas
/// left over, its result unused), each length a multiple of the Ulysses degree. The same cells on
/// every rank. `progress(done, total)` after each forward, in trials.
std::vector<NeedleCell> eval_needle_grid(Trainer& trainer, const DocumentsFile& filler,
                                         const std::vector<NeedlePrompt>& prompts, const std::vector<int64_t>& lengths,
                                         const std::function<void(int64_t, int64_t)>& progress = {});

/// What an evaluation asks of every rank (evaluate_on_ranks).
struct EvalRequest {
  int64_t first_bucket = 1024;  ///< position_buckets' first edge
  int64_t max_sequences = 0;    ///< 0: every sequence of the file
  /// The needle grid's trials and context lengths (each a multiple of the Ulysses degree); no
  /// prompts: no grid. The filler is the evaluated documents file (training.dataset_path).
  std::vector<NeedlePrompt> prompts;
  std::vector<int64_t> needle_lengths;
  /// Called on every rank once its trainer is built: puts the evaluated weights into this rank's
  /// master shards (FSDP: its slice of each group). Called from the rank's thread.
  std::function<void(Trainer&)> load_weights;
  /// Rank 0's progress (done, total): sequences of the buckets, then trials of the grid.
  std::function<void(int64_t, int64_t)> bucket_progress, needle_progress;
  /// The agreement this torchrun process's checks ended in: the job is joined over its store.
  const JobStart* start = nullptr;
};

/// Rank 0's results, in the process that runs rank 0.
struct EvalReport {
  bool lead = false;  ///< rank 0 ran in this process (false: a torchrun process of another rank, nothing below)
  BucketEval buckets;
  std::vector<NeedleCell> cells;  ///< empty without prompts
  std::string memory;             ///< the techniques the model ran (describe_memory of its resolved memory)
  std::string device;             ///< rank 0's device ("cpu", "cuda:0")
};

/// Starts `cfg`'s ranks as `odyssey train` starts them (run_on_ranks: parallel.world_size rank
/// threads in this process, or this process's rank of a torchrun job), builds each rank's
/// trainer, loads its weights (request.load_weights) and runs eval_position_buckets, then
/// eval_needle_grid, on every rank together. `cfg`: eval_config's, validated. Throws what a rank
/// threw first (StepFailure, DataError, CommError, std::invalid_argument).
///   EvalReport r = evaluate_on_ranks(cfg, request);  // r.buckets, r.cells where r.lead
EvalReport evaluate_on_ranks(const RunConfig& cfg, const EvalRequest& request);

}  // namespace odyssey
