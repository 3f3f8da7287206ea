// Packing a documents file into training sequences (split or refuse, see documents_dataset.h) and
// each sequence's document starts, from the index held in memory (8 bytes a document); under
// document masking the sequences without a target refused or skipped. defines: make_documents_dataset,
// UntargetedSequencesScope
#include "engine/train/documents_dataset.h"

#include <algorithm>
#include <optional>
#include <string>

#include "engine/config/sizes.h"
#include "engine/train/documents_file.h"
#include "engine/train/tokenizer_vocabulary.h"

namespace odyssey {
namespace {

thread_local UntargetedSequences t_untargeted = UntargetedSequences::Refuse;

class PackedDocuments final : public DocumentsDataset {
 public:
  PackedDocuments(const TrainingConfig& training, const ModelConfig& model, UntargetedSequences untargeted)
      : file_(training.dataset_path, model.vocab_size),
        seq_len_(training.seq_len),
        packing_(training.document_packing) {
    check_model_tokenizer(model.hf_path);
    const int64_t T = file_.token_count(), S = seq_len_;
    if (T < S + 1)
      throw DataError("documents file '" + file_.path() + "': holds " + std::to_string(T) +
                      " tokens, fewer than training.seq_len + 1 = " + std::to_string(S + 1));
    if (packing_ == DocumentPacking::Split) {
      sequences_ = (T - 1) / S;
      used_tokens_ = sequences_ * S + 1;
    } else {
      pack_refusing();
    }
    if (training.document_mask) find_untargeted(untargeted);
  }

  void sequence(int64_t index, std::vector<int64_t>* tokens, std::vector<uint8_t>* answer) const override {
    tokens->resize(seq_len_ + 1);
    file_.read_tokens(first_token(index), seq_len_ + 1, tokens->data());  // one read per sequence
    answer->clear();
  }

  void document_starts(int64_t index, std::vector<int64_t>* starts) const override {
    const auto& offsets = file_.index();
    const int64_t first = first_token(index);
    starts->clear();
    // Document d begins at offsets[d] (d < D); those in [first, first + S] fall in this sequence.
    auto it = std::lower_bound(offsets.begin(), offsets.end() - 1, first);
    for (; it != offsets.end() - 1 && *it <= first + seq_len_; ++it) starts->push_back(*it - first);
  }

  bool has_documents() const override { return true; }
  int64_t sequences() const override { return kept_.empty() ? sequences_ : static_cast<int64_t>(kept_.size()); }
  int64_t skipped() const override { return skipped_; }
  int64_t unused_tokens() const override { return file_.token_count() - used_tokens_; }

  std::string describe() const override {
    return "documents: " + file_.path() + " (" + std::to_string(file_.document_count()) + " documents, " +
           format_size(file_.token_count()) + " tokens, tokenizer vocabulary " + std::to_string(file_.vocab_size()) +
           "; " + std::string(to_string(packing_)) + " packing: " + std::to_string(sequences()) + " sequences of " +
           std::to_string(seq_len_ + 1) + " tokens a pass, the last " + std::to_string(unused_tokens()) +
           " tokens unused" +
           (skipped_ > 0 ? ", " + std::to_string(skipped_) + " without a target inside a document skipped" : "") + ")";
  }

 private:
  /// A file prepared with another tokenizer than model.hf_path's (when that directory holds a
  /// tokenizer.json) holds ids that are not this model's tokens: refused, both vocabularies named.
  void check_model_tokenizer(const std::string& hf_path) const {
    std::optional<int64_t> model_vocabulary;
    try {
      model_vocabulary = model_tokenizer_vocabulary(hf_path);
    } catch (const std::exception& e) {
      throw DataError(std::string("model.hf_path's ") + e.what());
    }
    if (model_vocabulary && *model_vocabulary != file_.vocab_size())
      throw DataError("documents file '" + file_.path() + "': prepared with a tokenizer of " +
                      std::to_string(file_.vocab_size()) + " tokens, and model.hf_path " + hf_path +
                      " holds a tokenizer.json of " + std::to_string(*model_vocabulary) +
                      ": its ids are another tokenizer's, not this model's tokens (prepare it with "
                      "`odyssey prepare --preset` or `--tokenizer " +
                      hf_path + "`)");
  }

  /// Refuse packing: every sequence begins at a document (documents_dataset.h).
  void pack_refusing() {
    const int64_t T = file_.token_count(), S = seq_len_;
    const auto& index = file_.index();
    for (int64_t d = 0; d < file_.document_count(); ++d)
      if (file_.document_length(d) > S + 1)
        throw DataError("documents file '" + file_.path() + "': document " + std::to_string(d) + " holds " +
                        std::to_string(file_.document_length(d)) +
                        " tokens, more than training.seq_len + 1 = " + std::to_string(S + 1) +
                        ", and training.document_packing = \"refuse\" never splits one "
                        "(use \"split\", or a longer seq_len)");
    // f(0) = 0; f(k+1) = the first document whose end passes sequence k's end: the one cut there,
    // or the one beginning exactly at it. Every document is at most S + 1 tokens, so f increases.
    for (int64_t first = 0; first < file_.document_count();) {
      const int64_t end = index[first] + S + 1;
      if (end > T) break;
      first_document_.push_back(first);
      used_tokens_ = end;
      first = (std::upper_bound(index.begin(), index.end(), end) - index.begin()) - 1;
    }
    sequences_ = static_cast<int64_t>(first_document_.size());
  }

  /// Under document masking the label at input position p is ignored when p + 1 begins a
  /// document, so a sequence from stream position f holds no target when every one of f + 1 ..
  /// f + S does: S starts in (f, f + S]. Two cursors over the index as f grows: O(sequences + D).
  void find_untargeted(UntargetedSequences untargeted) {
    const auto& index = file_.index();
    const int64_t D = file_.document_count(), S = seq_len_;
    std::vector<int64_t> without;  // packed sequences without a target
    int64_t a = 0, b = 0;          // the first starts past f and past f + S
    for (int64_t k = 0; k < sequences_; ++k) {
      const int64_t f = packed_first_token(k);
      while (a < D && index[a] <= f) ++a;
      while (b < D && index[b] <= f + S) ++b;
      if (b - a == S) without.push_back(k);
    }
    if (without.empty()) return;
    const int64_t k = without.front(), f = packed_first_token(k);
    const std::string which = "sequence " + std::to_string(k) + " (tokens [" + std::to_string(f) + ", " +
                              std::to_string(f + S + 1) + ") of the stream)";
    const std::string rule =
        "under document masking (training.document_mask, and every evaluation) a label that is the next "
        "document's first token is not a target, "
        "and every sequence needs at least one target inside a document (a document of 2 tokens or more "
        "within it), or its loss is 0 / 0";
    if (untargeted == UntargetedSequences::Refuse)
      throw DataError("documents file '" + file_.path() + "': " + which +
                      " holds no target inside a document: each of its " + std::to_string(S) +
                      " labels is the first token of a document (one-token documents in a row); " + rule + ". " +
                      std::to_string(without.size()) + " of the " + std::to_string(sequences_) +
                      " sequences hold none (prepare the file without one-token documents, e.g. with "
                      "--append-eos, or train without training.document_mask)");
    if (static_cast<int64_t>(without.size()) == sequences_)
      throw DataError("documents file '" + file_.path() + "': none of its " + std::to_string(sequences_) +
                      " sequences of " + std::to_string(S + 1) + " tokens holds a target inside a document (" + which +
                      " is the first); " + rule);
    skipped_ = static_cast<int64_t>(without.size());
    kept_.reserve(static_cast<size_t>(sequences_ - skipped_));
    for (int64_t j = 0, w = 0; j < sequences_; ++j) {
      if (w < skipped_ && without[static_cast<size_t>(w)] == j) {
        ++w;
        continue;
      }
      kept_.push_back(j);
    }
  }

  /// The stream position of the packing's sequence k (k < sequences_).
  int64_t packed_first_token(int64_t k) const {
    return packing_ == DocumentPacking::Split ? k * seq_len_ : file_.index()[first_document_[k]];
  }

  /// The stream position of sequence `index`'s first token (a pure function of the index).
  int64_t first_token(int64_t index) const {
    const int64_t k = index % sequences();
    return packed_first_token(kept_.empty() ? k : kept_[static_cast<size_t>(k)]);
  }

  DocumentsFile file_;
  int64_t seq_len_;
  DocumentPacking packing_;
  int64_t sequences_ = 0;                // the packing's sequences (skipped ones included)
  int64_t used_tokens_ = 0;              // the end of the packing's last sequence
  std::vector<int64_t> first_document_;  // refuse: the document each sequence begins with
  int64_t skipped_ = 0;                  // sequences without a target left out (Skip)
  std::vector<int64_t> kept_;            // with skipped_ > 0: the packing's sequences of the pass, in order
};

}  // namespace

UntargetedSequencesScope::UntargetedSequencesScope(UntargetedSequences policy) : previous_(t_untargeted) {
  t_untargeted = policy;
}

UntargetedSequencesScope::~UntargetedSequencesScope() { t_untargeted = previous_; }

std::unique_ptr<DocumentsDataset> make_documents_dataset(const TrainingConfig& training, const ModelConfig& model,
                                                         UntargetedSequences untargeted) {
  return std::make_unique<PackedDocuments>(training, model, untargeted);
}

std::unique_ptr<Dataset> make_documents_dataset(const TrainingConfig& training, const ModelConfig& model) {
  return make_documents_dataset(training, model, t_untargeted);
}

}  // namespace odyssey
