// Packing a documents file into training sequences (split or refuse, see documents_dataset.h) and
// each sequence's document starts, from the index held in memory (8 bytes a document).
// defines: make_documents_dataset
#include "engine/train/documents_dataset.h"

#include <algorithm>

#include "engine/config/sizes.h"
#include "engine/train/documents_file.h"

namespace odyssey {
namespace {

class DocumentsDataset final : public Dataset {
 public:
  DocumentsDataset(const TrainingConfig& training, const ModelConfig& model)
      : file_(training.dataset_path, model.vocab_size),
        seq_len_(training.seq_len),
        packing_(training.document_packing) {
    const int64_t T = file_.token_count(), S = seq_len_;
    if (T < S + 1)
      throw DataError("documents file '" + file_.path() + "': holds " + std::to_string(T) +
                      " tokens, fewer than training.seq_len + 1 = " + std::to_string(S + 1));
    if (packing_ == DocumentPacking::Split) {
      sequences_ = (T - 1) / S;
      used_tokens_ = sequences_ * S + 1;
      return;
    }
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

  std::string describe() const override {
    return "documents: " + file_.path() + " (" + std::to_string(file_.document_count()) + " documents, " +
           format_size(file_.token_count()) + " tokens, tokenizer vocabulary " + std::to_string(file_.vocab_size()) +
           "; " + std::string(to_string(packing_)) + " packing: " + std::to_string(sequences_) + " sequences of " +
           std::to_string(seq_len_ + 1) + " tokens a pass, the last " +
           std::to_string(file_.token_count() - used_tokens_) + " tokens unused)";
  }

 private:
  /// The stream position of sequence `index`'s first token (a pure function of the index).
  int64_t first_token(int64_t index) const {
    const int64_t k = index % sequences_;
    return packing_ == DocumentPacking::Split ? k * seq_len_ : file_.index()[first_document_[k]];
  }

  DocumentsFile file_;
  int64_t seq_len_;
  DocumentPacking packing_;
  int64_t sequences_ = 0;                // a pass: global sequence i is sequence i mod this
  int64_t used_tokens_ = 0;              // the end of the last sequence of a pass
  std::vector<int64_t> first_document_;  // refuse: the document each sequence begins with
};

}  // namespace

std::unique_ptr<Dataset> make_documents_dataset(const TrainingConfig& training, const ModelConfig& model) {
  return std::make_unique<DocumentsDataset>(training, model);
}

}  // namespace odyssey
