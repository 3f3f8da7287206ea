// One rank's slice of a step's batch (see data.h). defines: make_rank_batch
#include "engine/train/data.h"

#include "engine/layout/documents.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

RankBatch make_rank_batch(const Dataset& data, int64_t step, const TrainingConfig& training, const RankContext& ctx,
                          at::Device device) {
  const int64_t B = training.batch_size, S = training.seq_len;
  if (S % ctx.sp_size != 0)
    throw std::invalid_argument("seq_len " + std::to_string(S) + " is not divisible by the Ulysses degree " +
                                std::to_string(ctx.sp_size));
  const int64_t s = S / ctx.sp_size, first = ctx.sp_rank * s;
  CategoryScope category(MemCategory::Other);
  at::Tensor ids = at::empty({B, s}, at::kLong), labels = at::empty({B, s}, at::kLong);  // [B, s]
  at::Tensor mask = at::zeros({B, s}, at::kBool);                                        // [B, s]
  std::vector<int64_t> tokens, starts;
  std::vector<uint8_t> answer;
  RankBatch batch;
  batch.document_starts.resize(static_cast<size_t>(B));
  batch.last_label_starts_document.assign(static_cast<size_t>(B), 0);
  auto* ids_p = ids.data_ptr<int64_t>();
  auto* labels_p = labels.data_ptr<int64_t>();
  auto* mask_p = mask.data_ptr<bool>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t index = step * B * ctx.dp_size + ctx.dp_rank * B + b;
    data.sequence(index, &tokens, &answer);
    for (int64_t t = 0; t < s; ++t) {
      ids_p[b * s + t] = tokens[first + t];
      labels_p[b * s + t] = tokens[first + t + 1];
      mask_p[b * s + t] = !answer.empty() && answer[first + t] != 0;
    }
    // Input positions in document_starts; a start at S begins the last label (no rank holds it as
    // an input), recorded in last_label_starts_document.
    data.document_starts(index, &starts);
    for (int64_t p : starts) {
      if (p < S)
        batch.document_starts[b].push_back(p);
      else if (p == S)
        batch.last_label_starts_document[b] = 1;
    }
  }
  if (training.document_mask) {
    // No target across a boundary (engine/layout/documents.h's rule): such a label is another
    // text's first token, -100 as the loss ignores it; the loss is the mean over the global batch's
    // trained labels, counted on every rank from the dataset alone (a pure function of the index).
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < s; ++t)
        if (label_crosses_document(batch.document_starts[b], batch.last_label_starts_document[b] != 0, first + t, S))
          labels_p[b * s + t] = -100;
    batch.global_tokens = trained_labels(data, step, training, ctx.dp_size);
  } else {
    batch.global_tokens = B * S * ctx.dp_size;
  }
  batch.ids = ids.to(device);
  batch.labels = labels.to(device);
  if (data.has_answers()) batch.answer_mask = mask.to(device);
  batch.first_position = first;
  return batch;
}

}  // namespace odyssey
