// Packed documents as segments of a sequence: the one rule document masking applies to attention
// (each segment attends within itself), RoPE positions (restarting per segment) and the loss (no
// target across a boundary). defines: DocumentSpans, DocumentSegment, document_segments,
// document_starts_rule, positions_in_documents, rope_position_rows, label_crosses_document,
// crossing_label_count, causal_attention_pairs, DocumentLengthProfile, longest_attention_segment
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace odyssey {

/// Where the documents of each row of a packed batch begin. starts[b] holds global positions in
/// [0, S) of row b (the whole sequence, the same list on every Ulysses rank), ascending and
/// distinct; positions before the first start continue a document begun in an earlier sequence
/// and form a segment of their own. No rows, or only empty rows: no masking (each row one text).
/// Host memory only: the attention kernels loop over its segments.
struct DocumentSpans {
  std::vector<std::vector<int64_t>> starts;  ///< [B] lists of global positions in [0, S)
  /// True when some row has a start: attention, positions and labels follow the segments.
  bool any() const;
  bool operator==(const DocumentSpans&) const = default;
};

/// One segment of a row: positions [begin, begin + length) attend among themselves only.
struct DocumentSegment {
  int64_t begin = 0;
  int64_t length = 0;
  bool operator==(const DocumentSegment&) const = default;
};

/// Rule: a row's starts lie in [0, seq_len), ascending, without repeats. nullopt when they do,
/// else what is wrong (named by the caller with its row).
std::optional<std::string> document_starts_rule(const std::vector<int64_t>& starts, int64_t seq_len);

/// The segments of a row with `starts` covering [0, seq_len) in order: [0, starts[0]) when
/// starts[0] > 0, then [starts[k], starts[k+1]), the last to seq_len. Empty starts: one segment.
std::vector<DocumentSegment> document_segments(const std::vector<int64_t>& starts, int64_t seq_len);

/// RoPE position of each of the global positions [first, first + count) of a row: its offset in
/// its segment (a document's first token is at 0, as Hugging Face's per-document position ids).
std::vector<int64_t> positions_in_documents(const std::vector<int64_t>& starts, int64_t first, int64_t count);

/// Rows of a step's RoPE positions and tables for `batch` sequences: one row all sequences share,
/// or one per sequence where positions restart in each packed document (`per_document`). The
/// engine's make_positions holds positions [rows, s] int64 and cos and sin [rows, s, hd/2] fp32
/// (kRopeTableBytes an element) for the whole step; the planner charges those (PositionIds,
/// RopeTable).
int64_t rope_position_rows(int64_t batch, bool per_document);
/// Bytes of one element of the RoPE cos and sin tables: fp32 whatever the compute dtype (angles in
/// fp64, rounded once).
constexpr int64_t kRopeTableBytes = 4;

/// True when the label at global input position p (the token at p + 1) begins another document:
/// p + 1 is a start, or p + 1 == seq_len and `next_starts_document` (the token after the sequence
/// begins one). Such a target is never trained: its context is another text.
bool label_crosses_document(const std::vector<int64_t>& starts, bool next_starts_document, int64_t p, int64_t seq_len);

/// How many of a row's S labels cross (label_crosses_document true): the starts in (0, seq_len),
/// and one more when `next_starts_document`.
int64_t crossing_label_count(const std::vector<int64_t>& starts, bool next_starts_document, int64_t seq_len);

/// A dataset's document lengths, sorted, with prefix sums: enough to count the attention pairs of
/// its packed sequences at any sequence length (the planner's step time under document masking).
class DocumentLengthProfile {
 public:
  /// From every document's length (tokens, each >= 1).
  explicit DocumentLengthProfile(std::vector<int64_t> lengths);
  int64_t documents() const { return static_cast<int64_t>(sorted_.size()); }
  /// The longest document's tokens (0 without documents): no attention segment of a packed
  /// sequence is longer than it (nor than the sequence).
  int64_t longest() const { return sorted_.empty() ? 0 : sorted_.back(); }
  /// The causal (query, key) pairs of sequences of `seq_len` packed from these documents, as a
  /// fraction of causal attention over whole sequences: a document of n <= S tokens is one
  /// triangle n (n + 1) / 2, a longer one is split into pieces of S, each S (S + 1) / 2, against
  /// (S + 1) / 2 per token without documents. Where a document meets a sequence's end it is
  /// counted whole (split packing cuts it in two: fewer pairs), so it errs towards more time.
  double attention_fraction(int64_t seq_len) const;

 private:
  std::vector<int64_t> sorted_;
  std::vector<double> prefix_tokens_, prefix_triangles_;  ///< sums of n and n (n + 1) / 2 over sorted_[0, i)
};

/// The longest segment one attention kernel call sees under document masking: a segment lies in one
/// row of seq_len tokens and in one document, so min(longest document, seq_len) when `profile`
/// holds documents, else seq_len (no profile: any document may fill a row). The planner sizes the
/// per-segment kernel results and the CPU kernel's blocks by it.
int64_t longest_attention_segment(const DocumentLengthProfile* profile, int64_t seq_len);

/// The (query, key) pairs causal attention computes over a row: the sum over its segments of
/// n (n + 1) / 2 (seq_len (seq_len + 1) / 2 without documents). Step time counts these.
int64_t causal_attention_pairs(const std::vector<int64_t>& starts, int64_t seq_len);

}  // namespace odyssey
