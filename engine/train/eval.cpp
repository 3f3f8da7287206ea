// Evaluation forward passes: loss by position bucket over packed held-out documents, and the
// needle-in-a-haystack grid by teacher forcing (see eval.h).
// defines: eval_config, position_buckets, eval_position_buckets, needle_lengths, needle_sequence,
// needle_trial_correct, eval_needle_grid
#include "engine/train/eval.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/layout/documents.h"
#include "engine/train/data.h"

namespace odyssey {

RunConfig eval_config(const RunConfig& run, const std::string& data_path, int64_t seq_len) {
  RunConfig cfg = run;
  cfg.parallel.world_size = 1;
  cfg.parallel.ulysses_degree = 1;
  cfg.parallel.fsdp = false;
  cfg.parallel.emulate = false;
  cfg.training.batch_size = 1;
  cfg.training.seq_len = seq_len;
  cfg.training.dataset = DatasetKind::Documents;
  cfg.training.dataset_path = data_path;
  cfg.training.document_packing = DocumentPacking::Split;
  cfg.training.document_mask = true;
  cfg.memory.offload_optimizer = false;  // no optimizer runs
  return cfg;
}

std::vector<PositionBucket> position_buckets(int64_t seq_len, int64_t first) {
  if (seq_len < 1 || first < 1)
    throw std::invalid_argument("position buckets: seq_len = " + std::to_string(seq_len) + " and first = " +
                                std::to_string(first) + " must be >= 1");
  std::vector<PositionBucket> out;
  int64_t from = 0, to = first;
  while (from < seq_len) {
    PositionBucket b;
    b.from = from;
    b.to = std::min(to, seq_len);
    out.push_back(b);
    from = b.to;
    to = from == first ? 4 * first : 4 * from;
  }
  return out;
}

BucketEval eval_position_buckets(Trainer& trainer, int64_t first_bucket, int64_t max_sequences,
                                 const std::function<void(int64_t, int64_t)>& progress) {
  const RunConfig& cfg = trainer.config();
  const TrainingConfig& training = cfg.training;
  const int64_t S = training.seq_len;
  if (!trainer.dataset().has_documents())
    throw std::invalid_argument("eval: the position buckets need the documents dataset (eval_config)");
  BucketEval out;
  out.buckets = position_buckets(S, first_bucket);
  // Split packing: sequence k is the stream's tokens [kS, kS + S + 1), those that end in the file.
  const int64_t T = DocumentsFile(training.dataset_path, cfg.model.vocab_size).token_count();
  const int64_t sequences = std::max<int64_t>(0, (T - 1) / S);
  out.sequences = max_sequences > 0 ? std::min(sequences, max_sequences) : sequences;
  out.unused_tokens = T - std::min(T, sequences * S + 1);
  const bool restart = training.document_positions == DocumentPositions::Restart;
  const RankContext& ctx = trainer.rank_context();
  double ce_total = 0;
  for (int64_t k = 0; k < out.sequences; ++k) {
    const RankBatch batch = make_rank_batch(trainer.dataset(), k, training, ctx, ctx.device);  // [1, S]
    ModelInputs in{batch.ids, batch.labels, batch.answer_mask, batch.first_position, batch.global_tokens};
    in.documents.starts = batch.document_starts;
    in.restart_positions = restart;
    const TokenLosses t = trainer.forward_tokens(in);
    const at::Tensor ce = t.ce.to(at::kDouble).cpu().reshape(-1);   // [S]
    const at::Tensor labels = batch.labels.cpu().reshape(-1);      // [S]
    const double* c = ce.data_ptr<double>();
    const int64_t* l = labels.data_ptr<int64_t>();
    const std::vector<int64_t> positions =
        restart ? positions_in_documents(batch.document_starts.at(0), 0, S) : std::vector<int64_t>();
    size_t b = 0;  // positions only grow within a segment: reset the search per token
    for (int64_t p = 0; p < S; ++p) {
      if (l[p] < 0) continue;  // a label across a boundary: never scored
      const int64_t pos = restart ? positions[static_cast<size_t>(p)] : p;
      b = 0;
      while (b + 1 < out.buckets.size() && pos >= out.buckets[b].to) ++b;
      out.buckets[b].tokens += 1;
      out.buckets[b].ce_sum += c[p];
      out.tokens += 1;
      ce_total += c[p];
    }
    if (progress) progress(k + 1, out.sequences);
  }
  out.loss = out.tokens > 0 ? ce_total / static_cast<double>(out.tokens) : 0.0;
  return out;
}

std::vector<int64_t> needle_lengths(int64_t min_length, int64_t seq_len) {
  std::vector<int64_t> out;
  for (int64_t n = std::max<int64_t>(1, min_length); n < seq_len; n *= 2) out.push_back(n);
  out.push_back(seq_len);
  return out;
}

NeedleSequence needle_sequence(const DocumentsFile& filler, int64_t filler_offset, const NeedlePrompt& prompt,
                               int64_t length, int64_t depth_percent) {
  const int64_t fixed = static_cast<int64_t>(prompt.needle.size() + prompt.question.size() + prompt.answer.size());
  const int64_t F = length + 1 - fixed;
  if (F < 0 || prompt.answer.empty())
    throw std::invalid_argument("needle: a context of " + std::to_string(length) + " tokens cannot hold the needle (" +
                                std::to_string(prompt.needle.size()) + " tokens), the question (" +
                                std::to_string(prompt.question.size()) + ") and the answer (" +
                                std::to_string(prompt.answer.size()) + ")");
  const int64_t before = static_cast<int64_t>(std::llround(static_cast<double>(F) * static_cast<double>(depth_percent) / 100.0));
  std::vector<int64_t> stream(static_cast<size_t>(F));
  const int64_t T = filler.token_count();
  for (int64_t got = 0, at = filler_offset % T; got < F;) {  // the stream, wrapping at its end
    const int64_t n = std::min(F - got, T - at);
    filler.read_tokens(at, n, stream.data() + got);
    got += n;
    at = 0;
  }
  NeedleSequence s;
  s.tokens.reserve(static_cast<size_t>(length + 1));
  s.tokens.insert(s.tokens.end(), stream.begin(), stream.begin() + before);
  s.needle_at = before;
  s.tokens.insert(s.tokens.end(), prompt.needle.begin(), prompt.needle.end());
  s.tokens.insert(s.tokens.end(), stream.begin() + before, stream.end());
  s.tokens.insert(s.tokens.end(), prompt.question.begin(), prompt.question.end());
  s.answer_first_label = static_cast<int64_t>(s.tokens.size()) - 1;  // the input before the first answer token
  s.tokens.insert(s.tokens.end(), prompt.answer.begin(), prompt.answer.end());
  return s;
}

bool needle_trial_correct(Trainer& trainer, const NeedleSequence& sequence, int64_t answer_tokens) {
  const int64_t L = static_cast<int64_t>(sequence.tokens.size()) - 1;
  const at::Device device = trainer.rank_context().device;
  const auto longs = at::TensorOptions().dtype(at::kLong);
  const at::Tensor all = at::tensor(sequence.tokens, longs);         // [L + 1]
  at::Tensor labels = at::full({L}, -100, longs);                     // [L]: only the answer is scored
  labels.narrow(0, sequence.answer_first_label, answer_tokens)
      .copy_(all.narrow(0, sequence.answer_first_label + 1, answer_tokens));
  ModelInputs in;
  in.ids = all.narrow(0, 0, L).reshape({1, L}).to(device);  // [1, L]: one text, positions 0..L-1
  in.labels = labels.reshape({1, L}).to(device);            // [1, L]
  in.global_tokens = answer_tokens;
  const TokenLosses t = trainer.forward_tokens(in);
  const at::Tensor predicted = t.argmax.reshape(-1).narrow(0, sequence.answer_first_label, answer_tokens).cpu();
  const at::Tensor wanted = labels.narrow(0, sequence.answer_first_label, answer_tokens);
  return predicted.equal(wanted);
}

std::vector<NeedleCell> eval_needle_grid(Trainer& trainer, const DocumentsFile& filler,
                                         const std::vector<NeedlePrompt>& prompts, const std::vector<int64_t>& lengths,
                                         const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<NeedleCell> cells;
  const int64_t total = static_cast<int64_t>(lengths.size() * kNeedleDepths.size() * prompts.size());
  int64_t done = 0;
  const int64_t T = filler.token_count();
  for (int64_t length : lengths)
    for (int64_t depth : kNeedleDepths) {
      NeedleCell cell;
      cell.length = length;
      cell.depth = depth;
      for (size_t t = 0; t < prompts.size(); ++t) {
        // Trial t reads the stream from a place of its own: t/trials of the way through it.
        const int64_t offset = static_cast<int64_t>(static_cast<double>(T) * static_cast<double>(t) /
                                                    static_cast<double>(prompts.size()));
        const NeedleSequence s = needle_sequence(filler, offset, prompts[t], length, depth);
        cell.trials += 1;
        cell.correct += needle_trial_correct(trainer, s, static_cast<int64_t>(prompts[t].answer.size())) ? 1 : 0;
        if (progress) progress(++done, total);
      }
      cells.push_back(cell);
    }
  return cells;
}

}  // namespace odyssey
