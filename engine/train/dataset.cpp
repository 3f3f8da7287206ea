// The datasets (long-range passkey task, llm.c .bin tokens and raw bytes, read with pread; documents
// in documents_dataset.cpp) and the labels a step trains (see dataset.h). No LibTorch.
// defines: LongRangeLayout::make, make_dataset, trained_labels
#include "engine/train/dataset.h"

#include <algorithm>

#include "engine/config/sizes.h"
#include "engine/layout/documents.h"
#include "engine/train/data_file.h"
#include "engine/train/documents_dataset.h"
#include "engine/util/splitmix.h"

namespace odyssey {
namespace {

// [section] long-range passkey task ------------------------------------------------------------

class LongRangeTask final : public Dataset {
 public:
  LongRangeTask(int64_t seq_len, int64_t vocab, int64_t seed)
      : layout_(LongRangeLayout::make(seq_len, vocab)), seed_(static_cast<uint64_t>(seed)) {}

  // Layout of the S+1 tokens: one filler token everywhere, except
  // - the first half [0, context): `copies` copies of the sequence's passkey (one of
  //   passkey_count symbols), one at a random offset in each equal segment;
  // - the second half [context, S]: pairs of tokens, `queries` of them (chosen at random) a
  //   [QUERY_MARK passkey] pair.
  // Answering the first query needs attention from the second half back to the first: across the
  // sequence, so across Ulysses ranks. The filler is one fixed token, so its loss vanishes and
  // does not drown the answers' gradient in noise; with tied embeddings (as in tiny-cpu.toml)
  // copying a symbol is one map for all symbols, and a tiny model learns the task within a few
  // hundred CPU steps (the curve is in docs/log/2026-11-gpu-and-cpu-measurements.md).
  void sequence(int64_t index, std::vector<int64_t>* tokens, std::vector<uint8_t>* answer) const override {
    const LongRangeLayout& L = layout_;
    SplitMix rng(seed_ * 0x100000001B3ULL ^ (static_cast<uint64_t>(index) + 0x51ED270B27ULL));
    rng.next();
    const int64_t total = L.seq_len + 1;
    tokens->assign(total, L.filler);
    answer->assign(L.seq_len, 0);
    const int64_t passkey = rng.below(L.passkey_count);
    const int64_t segment = L.context / L.copies;  // >= 1 by construction
    for (int64_t c = 0; c < L.copies; ++c) (*tokens)[c * segment + rng.below(segment)] = L.passkey_first + passkey;
    // `queries` distinct pair slots of the second half (partial Fisher-Yates over the slots).
    const int64_t slots = (total - L.context) / 2;
    std::vector<int64_t> slot(slots);
    for (int64_t i = 0; i < slots; ++i) slot[i] = i;
    for (int64_t q = 0; q < L.queries; ++q) {
      std::swap(slot[q], slot[q + rng.below(slots - q)]);
      const int64_t at = L.context + 2 * slot[q];
      (*tokens)[at] = L.query_mark;
      (*tokens)[at + 1] = L.passkey_first + passkey;
      (*answer)[at] = 1;  // label position `at` predicts token at+1, the answer
    }
  }
  bool has_answers() const override { return true; }
  std::string describe() const override {
    return "long-range passkey: " + std::to_string(layout_.copies) + " copies of a passkey (1 of " +
           std::to_string(layout_.passkey_count) + ") in the first " + std::to_string(layout_.context) +
           " tokens, asked " + std::to_string(layout_.queries) + " times in the last " +
           std::to_string(layout_.seq_len + 1 - layout_.context);
  }

 private:
  LongRangeLayout layout_;
  uint64_t seed_;
};

// [section] token files -------------------------------------------------------------------------

// Sequence i is the window [i*S mod (count - S), + S + 1) of the token stream.
class TokenStream : public Dataset {
 public:
  TokenStream(std::string path, int64_t seq_len) : path_(std::move(path)), seq_len_(seq_len) {}
  void sequence(int64_t index, std::vector<int64_t>* tokens, std::vector<uint8_t>* answer) const override {
    const int64_t windows = count_ - seq_len_;  // >= 1 (checked at open)
    const int64_t start = (index % windows) * seq_len_ % windows;
    tokens->resize(seq_len_ + 1);
    read_tokens(start, seq_len_ + 1, tokens->data());  // one read per sequence
    answer->clear();
  }

 protected:
  /// Tokens [first, first + n) of the stream into out.
  virtual void read_tokens(int64_t first, int64_t n, int64_t* out) const = 0;
  void check_length(const std::string& kind) const {
    if (count_ < seq_len_ + 1)
      throw DataError("data file '" + path_ + "': " + kind + " holds " + std::to_string(count_) +
                      " tokens, fewer than training.seq_len + 1 = " + std::to_string(seq_len_ + 1));
  }
  std::string path_;
  int64_t seq_len_;
  int64_t count_ = 0;
};

constexpr int32_t kLlmcMagic = 20240520;
constexpr int64_t kLlmcHeaderInts = 256;
// Memory: the open-time vocabulary scan reads the file in chunks of this many tokens (1 MiB), so
// checking a 100 GB token file costs 1 MiB of host memory.
constexpr int64_t kScanTokens = int64_t{1} << 19;

class LlmcTokenFile final : public TokenStream {
 public:
  LlmcTokenFile(const std::string& path, int64_t seq_len, int64_t vocab)
      : TokenStream(path, seq_len), file_(path), vocab_(vocab) {
    const int64_t header_bytes = kLlmcHeaderInts * 4;
    const int64_t have = file_.size();
    if (have < header_bytes)
      throw DataError("data file '" + path + "': truncated: " + std::to_string(have) +
                      " bytes, shorter than the 1024-byte llm.c header");
    int32_t header[3];
    file_.read(0, sizeof(header), header);
    if (header[0] != kLlmcMagic)
      throw DataError("data file '" + path + "': wrong magic " + std::to_string(header[0]) + " (an llm.c .bin has " +
                      std::to_string(kLlmcMagic) + "; use dataset = \"bytes\" for other files)");
    if (header[1] != 1)
      throw DataError("data file '" + path + "': unsupported version " + std::to_string(header[1]) +
                      " (expected 1: uint16 tokens)");
    count_ = header[2];
    if (count_ < 0)
      throw DataError("data file '" + path + "': the header's token count = " + std::to_string(count_) +
                      " is invalid: a count of tokens is 0 or more (header int 2 of an llm.c .bin)");
    const int64_t need = header_bytes + 2 * count_;
    if (have < need)
      throw DataError("data file '" + path + "': truncated: the header says " + std::to_string(count_) + " tokens (" +
                      std::to_string(need) + " bytes) but the file has " + std::to_string(have) + " bytes");
    // An llm.c file is exactly its header and its tokens; more bytes mean a wrong count or a file
    // joined to another, and training on part of it would pass unnoticed.
    if (have > need)
      throw DataError("data file '" + path + "': the header says " + std::to_string(count_) + " tokens (" +
                      std::to_string(need) + " bytes with the header) but the file has " + std::to_string(have) +
                      " bytes: " + std::to_string(have - need) + " bytes would be ignored" +
                      ((have - header_bytes) % 2 == 0
                           ? " (the body holds " + std::to_string((have - header_bytes) / 2) + " tokens)"
                           : " (the body is not a whole number of uint16 tokens)"));
    check_length("the llm.c file");
    std::vector<uint16_t> chunk(static_cast<size_t>(std::min(count_, kScanTokens)));
    for (int64_t first = 0; first < count_; first += kScanTokens) {
      const int64_t n = std::min(kScanTokens, count_ - first);
      file_.read(header_bytes + 2 * first, 2 * n, chunk.data());
      for (int64_t i = 0; i < n; ++i)
        if (chunk[i] >= vocab)
          throw DataError("data file '" + path + "': token " + std::to_string(chunk[i]) + " at index " +
                          std::to_string(first + i) + " is >= model.vocab_size = " + std::to_string(vocab));
    }
  }
  std::string describe() const override {
    return "tokens: " + path_ + " (" + format_size(count_) + " tokens, llm.c .bin)";
  }

 private:
  void read_tokens(int64_t first, int64_t n, int64_t* out) const override {
    std::vector<uint16_t> raw(static_cast<size_t>(n));
    file_.read(kLlmcHeaderInts * 4 + 2 * first, 2 * n, raw.data());
    for (int64_t i = 0; i < n; ++i) {
      // Every token was below the vocabulary at open: one that is not was written since.
      if (raw[i] >= vocab_)
        throw DataChangedError("data file '" + path_ + "': token " + std::to_string(raw[i]) + " at index " +
                               std::to_string(first + i) + " is >= model.vocab_size = " + std::to_string(vocab_) +
                               ", and none was when the run began: the file changed during the run");
      out[i] = raw[i];
    }
  }
  DataFile file_;
  int64_t vocab_;
};

class ByteFile final : public TokenStream {
 public:
  ByteFile(const std::string& path, int64_t seq_len, int64_t vocab) : TokenStream(path, seq_len), file_(path) {
    if (vocab < 256)
      throw DataError("data file '" + path + "': the bytes dataset needs model.vocab_size >= 256, got " +
                      std::to_string(vocab));
    count_ = file_.size();
    check_length("the file");
  }
  std::string describe() const override { return "bytes: " + path_ + " (" + format_size(count_) + " bytes)"; }

 private:
  void read_tokens(int64_t first, int64_t n, int64_t* out) const override {
    std::vector<uint8_t> raw(static_cast<size_t>(n));
    file_.read(first, n, raw.data());
    for (int64_t i = 0; i < n; ++i) out[i] = raw[i];
  }
  DataFile file_;
};

}  // namespace

LongRangeLayout LongRangeLayout::make(int64_t seq_len, int64_t vocab) {
  if (seq_len < 32)
    throw DataError("long-range task: training.seq_len = " + std::to_string(seq_len) + " must be >= 32");
  if (vocab < 32) throw DataError("long-range task: model.vocab_size = " + std::to_string(vocab) + " must be >= 32");
  LongRangeLayout L;
  L.seq_len = seq_len;
  L.vocab = vocab;
  L.context = seq_len / 2;
  // One copy per 64 tokens: the passkey's share of the first half (1/32) stays the same at every
  // length, so is the answer's signal through attention that starts out uniform.
  L.copies = std::max<int64_t>(1, seq_len / 64);
  L.queries = (seq_len + 1 - L.context) / 2 / 2;  // half of the second half's pair slots
  return L;
}

std::unique_ptr<Dataset> make_dataset(const TrainingConfig& training, const ModelConfig& model) {
  switch (training.dataset) {
    case DatasetKind::LongRange:
      return std::make_unique<LongRangeTask>(training.seq_len, model.vocab_size, training.seed);
    case DatasetKind::Tokens:
      return std::make_unique<LlmcTokenFile>(training.dataset_path, training.seq_len, model.vocab_size);
    case DatasetKind::Bytes:
      return std::make_unique<ByteFile>(training.dataset_path, training.seq_len, model.vocab_size);
    case DatasetKind::Documents:
      return make_documents_dataset(training, model);
  }
  throw DataError("unknown dataset kind");
}

int64_t trained_labels(const Dataset& data, int64_t step, const TrainingConfig& training, int64_t dp_size) {
  const int64_t B = training.batch_size, S = training.seq_len;
  int64_t trained = 0;
  std::vector<int64_t> starts;
  for (int64_t i = step * B * dp_size; i < (step + 1) * B * dp_size; ++i) {
    data.document_starts(i, &starts);  // positions in [0, S]: S begins the token after the sequence
    const bool next_starts_document = !starts.empty() && starts.back() == S;
    if (next_starts_document) starts.pop_back();
    trained += S - crossing_label_count(starts, next_starts_document, S);
  }
  return trained;
}

}  // namespace odyssey
