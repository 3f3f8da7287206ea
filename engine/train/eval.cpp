// Evaluation forward passes on the run's ranks: loss by position bucket over packed held-out
// documents and the needle-in-a-haystack grid by teacher forcing, from each forward's gathered rows.
// defines: eval_config, position_buckets, eval_position_buckets, needle_lengths, needle_sequence,
// needle_trial, needle_sequences, eval_needle_grid, evaluate_on_ranks
#include "engine/train/eval.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/layout/documents.h"
#include "engine/parallel/job.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/train/data.h"
#include "engine/train/documents_dataset.h"
#include "engine/train/rank_loop.h"

namespace odyssey {

RunConfig eval_config(const RunConfig& run, const std::string& data_path, int64_t seq_len) {
  RunConfig cfg = run;
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
    throw std::invalid_argument("position buckets: seq_len = " + std::to_string(seq_len) +
                                " and first = " + std::to_string(first) + " must be >= 1");
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

namespace {

/// Every position's result of one forward, the whole rows of every replica.
struct GatheredRows {
  at::Tensor ce;      ///< [D, L] fp64 on the CPU: each label's CE (fp32 values), 0 where not scored
  at::Tensor argmax;  ///< [D, L] int64 on the CPU
  at::Tensor labels;  ///< [D, L] int64 on the CPU, -100 where not scored
};

/// This rank's slice `in` (make_rank_batch's: replica dp_rank's row, its tokens [sp_rank s,
/// (sp_rank + 1) s)) forward, then every rank's CE, argmax and labels all-gathered over the world
/// group. World rank r = dp_rank P + sp_rank (layout_of), so rank order is replica by replica,
/// slice by slice: the gathered [W, s] is [D, L] row-major. Memory: the gathered rows, (4 + 2 x 8)
/// bytes a position of the D whole rows, on every rank (20 MiB for one row of 1M tokens).
GatheredRows forward_gathered(Trainer& trainer, const ModelInputs& in) {
  const RankContext& ctx = trainer.rank_context();
  const TokenLosses t = trainer.forward_tokens(in);  // [1, s] each
  CategoryScope category(MemCategory::Other);
  const int64_t s = in.ids.size(1), W = ctx.world_size, D = ctx.dp_size, L = s * ctx.sp_size;
  at::Tensor ce = at::empty({W * s}, t.ce.options());  // [W s] fp32
  ctx.world->all_gather(ce, t.ce.reshape(-1).contiguous());
  const at::Tensor mine = at::stack({t.argmax.reshape(-1), in.labels.reshape(-1).to(t.argmax.device())});  // [2, s]
  at::Tensor longs = at::empty({W * 2 * s}, mine.options());  // [W, 2, s] int64
  ctx.world->all_gather(longs, mine.contiguous());
  const at::Tensor rows = longs.cpu().view({W, 2, s});
  GatheredRows out;
  out.ce = ce.cpu().to(at::kDouble).view({D, L});
  out.argmax = rows.select(1, 0).reshape({D, L});
  out.labels = rows.select(1, 1).reshape({D, L});
  return out;
}

}  // namespace

BucketEval eval_position_buckets(Trainer& trainer, int64_t first_bucket, int64_t max_sequences,
                                 const std::function<void(int64_t, int64_t)>& progress) {
  const RunConfig& cfg = trainer.config();
  const TrainingConfig& training = cfg.training;
  const int64_t S = training.seq_len;
  const auto* documents = dynamic_cast<const DocumentsDataset*>(&trainer.dataset());
  if (documents == nullptr)
    throw std::invalid_argument("eval: the position buckets need the documents dataset (eval_config)");
  if (training.batch_size != 1)
    throw std::invalid_argument("eval: one sequence per replica (eval_config), not training.batch_size = " +
                                std::to_string(training.batch_size));
  BucketEval out;
  out.buckets = position_buckets(S, first_bucket);
  // Split packing: sequence k is the stream's tokens [kS, kS + S + 1), those that end in the file,
  // less those without a target inside a document (skipped by the dataset).
  const int64_t sequences = documents->sequences();
  out.sequences = max_sequences > 0 ? std::min(sequences, max_sequences) : sequences;
  out.skipped = documents->skipped();
  out.unused_tokens = documents->unused_tokens();
  const bool restart = training.document_positions == DocumentPositions::Restart;
  const RankContext& ctx = trainer.rank_context();
  const int64_t D = ctx.dp_size;
  double ce_total = 0;
  std::vector<int64_t> starts;
  // Forward j: sequence jD + d on replica d (make_rank_batch's index); a replica past the last
  // sequence runs the dataset's wrapped one, its result unused (every rank runs every forward).
  for (int64_t j = 0; j * D < out.sequences; ++j) {
    const RankBatch batch = make_rank_batch(trainer.dataset(), j, training, ctx, ctx.device);  // [1, S/P]
    ModelInputs in{batch.ids, batch.labels, batch.answer_mask, batch.first_position, batch.global_tokens};
    in.documents.starts = batch.document_starts;
    in.restart_positions = restart;
    const GatheredRows rows = forward_gathered(trainer, in);  // [D, S]
    for (int64_t d = 0; d < D && j * D + d < out.sequences; ++d) {
      const double* c = rows.ce[d].data_ptr<double>();
      const int64_t* l = rows.labels[d].data_ptr<int64_t>();
      // The row's document starts over [0, S), as make_rank_batch lists them for its replica.
      trainer.dataset().document_starts(j * D + d, &starts);
      starts.erase(std::remove_if(starts.begin(), starts.end(), [S](int64_t p) { return p >= S; }), starts.end());
      const std::vector<int64_t> positions = restart ? positions_in_documents(starts, 0, S) : std::vector<int64_t>();
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
    }
    if (progress) progress(std::min((j + 1) * D, out.sequences), out.sequences);
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
  const int64_t before =
      static_cast<int64_t>(std::llround(static_cast<double>(F) * static_cast<double>(depth_percent) / 100.0));
  std::vector<int64_t> stream(static_cast<size_t>(F));
  const int64_t T = filler.token_count();
  for (int64_t got = 0, at = filler_offset % T; got < F;) {  // the stream, wrapping at its end
    const int64_t n = std::min(F - got, T - at);
    filler.read_tokens(at, n, stream.data() + got);
    got += n;
    at = 0;
  }
  NeedleSequence s;
  s.answer_tokens = static_cast<int64_t>(prompt.answer.size());
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

NeedleSequence needle_trial(const DocumentsFile& filler, const std::vector<NeedlePrompt>& prompts, int64_t length,
                            int64_t index) {
  const int64_t trials = static_cast<int64_t>(prompts.size());
  const int64_t depth = kNeedleDepths.at(static_cast<size_t>(index / trials)), t = index % trials;
  // Trial t reads the stream from a place of its own: t/trials of the way through it.
  const int64_t offset = static_cast<int64_t>(static_cast<double>(filler.token_count()) * static_cast<double>(t) /
                                              static_cast<double>(trials));
  return needle_sequence(filler, offset, prompts[static_cast<size_t>(t)], length, depth);
}

std::vector<NeedleSequence> needle_sequences(const DocumentsFile& filler, const std::vector<NeedlePrompt>& prompts,
                                             int64_t length) {
  std::vector<NeedleSequence> out;
  const int64_t trials = static_cast<int64_t>(kNeedleDepths.size() * prompts.size());
  for (int64_t i = 0; i < trials; ++i) out.push_back(needle_trial(filler, prompts, length, i));
  return out;
}

namespace {

/// The trials of one length as a dataset, so that make_rank_batch cuts their rows as it cuts
/// training's: trial `index` (the last one past the end), its answer labels marked as answers.
/// Memory: each trial is built when make_rank_batch asks for it (needle_trial), never all at once.
class NeedleRows final : public Dataset {
 public:
  NeedleRows(const DocumentsFile& filler, const std::vector<NeedlePrompt>& prompts, int64_t length)
      : filler_(filler), prompts_(prompts), length_(length) {}
  void sequence(int64_t index, std::vector<int64_t>* tokens, std::vector<uint8_t>* answer) const override {
    NeedleSequence s = needle_trial(filler_, prompts_, length_, std::min<int64_t>(index, size() - 1));
    *tokens = std::move(s.tokens);
    answer->assign(tokens->size() - 1, 0);
    std::fill(answer->begin() + s.answer_first_label, answer->begin() + s.answer_first_label + s.answer_tokens, 1);
  }
  bool has_answers() const override { return true; }
  std::string describe() const override { return "needle trials: " + std::to_string(size()); }
  int64_t size() const { return static_cast<int64_t>(kNeedleDepths.size() * prompts_.size()); }

 private:
  const DocumentsFile& filler_;
  const std::vector<NeedlePrompt>& prompts_;
  int64_t length_;
};

}  // namespace

std::vector<NeedleCell> eval_needle_grid(Trainer& trainer, const DocumentsFile& filler,
                                         const std::vector<NeedlePrompt>& prompts, const std::vector<int64_t>& lengths,
                                         const std::function<void(int64_t, int64_t)>& progress) {
  const RankContext& ctx = trainer.rank_context();
  const int64_t D = ctx.dp_size, trials = static_cast<int64_t>(prompts.size());
  std::vector<NeedleCell> cells;
  const int64_t total = static_cast<int64_t>(lengths.size() * kNeedleDepths.size()) * trials;
  int64_t done = 0;
  for (int64_t length : lengths) {
    const NeedleRows rows(filler, prompts, length);
    const size_t first_cell = cells.size();
    for (int64_t depth : kNeedleDepths) {
      NeedleCell cell;
      cell.length = length;
      cell.depth = depth;
      cells.push_back(cell);
    }
    // One text per row, no documents: only the answer's labels are scored.
    TrainingConfig one = trainer.config().training;
    one.seq_len = length;
    one.batch_size = 1;
    one.document_mask = false;
    for (int64_t j = 0; j * D < rows.size(); ++j) {
      const RankBatch batch = make_rank_batch(rows, j, one, ctx, ctx.device);  // [1, length/P]
      ModelInputs in;
      in.ids = batch.ids;
      in.labels = at::where(batch.answer_mask, batch.labels, at::full_like(batch.labels, -100));  // [1, length/P]
      in.first_position = batch.first_position;
      // The loss's divisor: its value is not used here.
      in.global_tokens = static_cast<int64_t>(prompts.front().answer.size()) * D;
      const GatheredRows result = forward_gathered(trainer, in);  // [D, length]
      for (int64_t d = 0; d < D && j * D + d < rows.size(); ++d) {
        const int64_t trial = j * D + d;
        const at::Tensor scored = result.labels[d].ge(0);
        const bool correct = result.argmax[d].masked_select(scored).equal(result.labels[d].masked_select(scored));
        NeedleCell& cell = cells[first_cell + static_cast<size_t>(trial / trials)];
        cell.trials += 1;
        cell.correct += correct ? 1 : 0;
        ++done;
      }
      if (progress) progress(done, total);
    }
  }
  return cells;
}

EvalReport evaluate_on_ranks(const RunConfig& cfg, const EvalRequest& request) {
  EvalReport report;
  const auto evaluate_rank = [&](RankContext& ctx) {
    // The trainer opens the documents dataset: a sequence without a target is left out, not refused.
    const UntargetedSequencesScope skip(UntargetedSequences::Skip);
    Trainer trainer(cfg, ctx);
    if (request.load_weights) request.load_weights(trainer);
    const bool lead = ctx.rank == 0;
    const std::function<void(int64_t, int64_t)> none;  // progress is rank 0's to report
    BucketEval buckets = eval_position_buckets(trainer, request.first_bucket, request.max_sequences,
                                               lead ? request.bucket_progress : none);
    std::vector<NeedleCell> cells;
    if (!request.prompts.empty()) {
      const DocumentsFile filler(cfg.training.dataset_path, cfg.model.vocab_size);
      cells = eval_needle_grid(trainer, filler, request.prompts, request.needle_lengths,
                               lead ? request.needle_progress : none);
    }
    if (!lead) return;
    report.lead = true;
    report.buckets = std::move(buckets);
    report.cells = std::move(cells);
    report.memory = describe_memory(cfg, trainer.model_memory());
    report.device = ctx.device.str();
  };
  run_on_ranks(cfg, "odyssey eval RUN_DIR --data FILE --seq-len N", evaluate_rank, request.start);
  return report;
}

}  // namespace odyssey
