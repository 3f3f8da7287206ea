// The segment rule of packed documents (see documents.h), used by the engine's attention, RoPE
// and loss masking and by the planner. defines: the functions of documents.h
#include "engine/layout/documents.h"

#include <algorithm>
#include <stdexcept>

namespace odyssey {

bool DocumentSpans::any() const {
  return std::any_of(starts.begin(), starts.end(), [](const auto& row) { return !row.empty(); });
}

std::optional<std::string> document_starts_rule(const std::vector<int64_t>& starts, int64_t seq_len) {
  for (size_t k = 0; k < starts.size(); ++k) {
    if (starts[k] < 0 || starts[k] >= seq_len)
      return "document start " + std::to_string(starts[k]) + " lies outside the sequence [0, " +
             std::to_string(seq_len) + ")";
    if (k > 0 && starts[k] <= starts[k - 1])
      return "document starts must ascend without repeats (" + std::to_string(starts[k - 1]) + " then " +
             std::to_string(starts[k]) + ")";
  }
  return std::nullopt;
}

std::vector<DocumentSegment> document_segments(const std::vector<int64_t>& starts, int64_t seq_len) {
  if (auto broken = document_starts_rule(starts, seq_len)) throw std::invalid_argument("document_segments: " + *broken);
  std::vector<DocumentSegment> out;
  int64_t begin = 0;
  for (int64_t s : starts) {
    if (s > begin) out.push_back({begin, s - begin});
    begin = s;
  }
  out.push_back({begin, seq_len - begin});
  return out;
}

std::vector<int64_t> positions_in_documents(const std::vector<int64_t>& starts, int64_t first, int64_t count) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = first + i;
    // the last start at or before p (none: the row's leading segment, which begins at 0)
    auto after = std::upper_bound(starts.begin(), starts.end(), p);
    out[static_cast<size_t>(i)] = after == starts.begin() ? p : p - *(after - 1);
  }
  return out;
}

int64_t rope_position_rows(int64_t batch, bool per_document) { return per_document ? batch : 1; }

bool label_crosses_document(const std::vector<int64_t>& starts, bool next_starts_document, int64_t p, int64_t seq_len) {
  if (p + 1 == seq_len) return next_starts_document;
  return std::binary_search(starts.begin(), starts.end(), p + 1);
}

int64_t crossing_label_count(const std::vector<int64_t>& starts, bool next_starts_document, int64_t seq_len) {
  const int64_t inside = std::count_if(starts.begin(), starts.end(), [&](int64_t p) { return p > 0 && p < seq_len; });
  return inside + (next_starts_document ? 1 : 0);
}

DocumentLengthProfile::DocumentLengthProfile(std::vector<int64_t> lengths) : sorted_(std::move(lengths)) {
  std::sort(sorted_.begin(), sorted_.end());
  prefix_tokens_.assign(sorted_.size() + 1, 0.0);
  prefix_triangles_.assign(sorted_.size() + 1, 0.0);
  for (size_t i = 0; i < sorted_.size(); ++i) {
    const double n = static_cast<double>(sorted_[i]);
    prefix_tokens_[i + 1] = prefix_tokens_[i] + n;
    prefix_triangles_[i + 1] = prefix_triangles_[i] + n * (n + 1) / 2;
  }
}

double DocumentLengthProfile::attention_fraction(int64_t seq_len) const {
  const double total = prefix_tokens_.back();
  if (total <= 0 || seq_len <= 0) return 1.0;
  const double S = static_cast<double>(seq_len);
  const size_t short_ones =
      static_cast<size_t>(std::upper_bound(sorted_.begin(), sorted_.end(), seq_len) - sorted_.begin());
  // documents of n <= S: their triangles; longer ones: (S + 1) / 2 pairs per token, as without documents
  const double pairs = prefix_triangles_[short_ones] + (total - prefix_tokens_[short_ones]) * (S + 1) / 2;
  return pairs / (total * (S + 1) / 2);
}

int64_t longest_attention_segment(const DocumentLengthProfile* profile, int64_t seq_len) {
  if (profile == nullptr || profile->longest() == 0) return seq_len;
  return std::min(profile->longest(), seq_len);
}

int64_t causal_attention_pairs(const std::vector<int64_t>& starts, int64_t seq_len) {
  int64_t pairs = 0;
  for (const DocumentSegment& s : document_segments(starts, seq_len)) pairs += s.length * (s.length + 1) / 2;
  return pairs;
}

}  // namespace odyssey
