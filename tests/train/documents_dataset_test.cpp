// The documents file of `odyssey prepare` and the documents dataset: a write/read round trip, every
// malformed file refused with the file named, split and refuse packing with each sequence's exact
// document starts, a sequence without a target under document masking (refused by training,
// skipped by eval), and make_rank_batch's starts on Ulysses shards and data-parallel replicas.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "../common/engine_test_util.h"
#include "engine/train/data.h"
#include "engine/train/documents_dataset.h"
#include "engine/train/documents_file.h"
#include "engine/util/files.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/odyssey_documents_test_" + std::to_string(::getpid()) + "_" + name;
}

/// A documents file of documents with these lengths; token i of the stream is i % vocab, so a
/// sequence's tokens tell where in the stream it begins.
std::string write_documents(const std::string& name, const std::vector<int64_t>& lengths, int64_t vocab = 64) {
  const std::string path = temp_path(name);
  remove_tree(path);
  DocumentsFileWriter w(path);
  int64_t next = 0;
  for (int64_t n : lengths) {
    std::vector<uint32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = static_cast<uint32_t>(next++ % vocab);
    w.add_document(ids.data(), n);
  }
  w.commit(vocab, false);
  return path;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void put_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename T>
void poke(std::string& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

/// The DataError of opening `path` (model vocabulary `model_vocab`), or "" when it opens.
std::string refusal(const std::string& path, int64_t model_vocab = 64) {
  try {
    DocumentsFile f(path, model_vocab);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TrainingConfig documents_training(const std::string& path, int64_t seq_len, DocumentPacking packing) {
  TrainingConfig t;
  t.seq_len = seq_len;
  t.batch_size = 1;
  t.dataset = DatasetKind::Documents;
  t.dataset_path = path;
  t.document_packing = packing;
  return t;
}

ModelConfig vocab_model(int64_t vocab = 64) {
  ModelConfig m;
  m.vocab_size = vocab;
  return m;
}

struct Packed {
  std::vector<int64_t> tokens, starts;
};

Packed packed(const Dataset& data, int64_t index) {
  Packed p;
  std::vector<uint8_t> answer;
  data.sequence(index, &p.tokens, &answer);
  data.document_starts(index, &p.starts);
  return p;
}

std::vector<int64_t> iota_tokens(int64_t first, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

using Starts = std::vector<int64_t>;

}  // namespace

TEST_CASE("documents file: what the writer commits reads back token for token, index for index", "[engine][data]") {
  const std::vector<int64_t> lengths = {3, 1, 4, 2, 6, 1, 3};
  const std::string path = write_documents("roundtrip.odoc", lengths, 50);
  // 64-byte header, 8 bytes per index entry (D + 1 of them), 4 per token.
  CHECK(bytes_of(path).size() == 64 + 8 * 8 + 4 * 20);
  CHECK(bytes_of(path).substr(0, 8) == std::string("ODYDOCS\0", 8));
  DocumentsFile f(path, 64);
  CHECK(f.document_count() == 7);
  CHECK(f.token_count() == 20);
  CHECK(f.vocab_size() == 50);
  CHECK(f.index() == std::vector<int64_t>{0, 3, 4, 8, 10, 16, 17, 20});
  CHECK(f.document_length(4) == 6);
  std::vector<int64_t> tokens(20);
  f.read_tokens(0, 20, tokens.data());
  CHECK(tokens == iota_tokens(0, 20));

  SECTION("an existing file is kept unless replace is asked, and nothing is left beside it") {
    const std::string before = bytes_of(path);
    {
      DocumentsFileWriter again(path);
      const uint32_t one = 1;
      again.add_document(&one, 1);
      CHECK_THROWS_AS(again.commit(50, false), FileWriteError);
    }
    CHECK(bytes_of(path) == before);
    {
      DocumentsFileWriter again(path);
      const uint32_t two[2] = {7, 9};
      again.add_document(two, 2);
      again.commit(50, true);
    }
    DocumentsFile replaced(path, 64);
    CHECK(replaced.index() == std::vector<int64_t>{0, 2});
    // No temporary (.NAME.XXXXXX.tokens / .partial) is left in the folder.
    const std::string prefix = "." + path.substr(path.rfind('/') + 1) + ".";
    for (const auto& name : list_dir("/tmp")) CHECK(name.rfind(prefix, 0) != 0);
  }
  SECTION("the writer refuses an empty document and a token past the vocabulary") {
    DocumentsFileWriter w(temp_path("refused.odoc"));
    const uint32_t big = 50;
    CHECK_THROWS_AS(w.add_document(&big, 0), std::invalid_argument);
    w.add_document(&big, 1);
    CHECK_THROWS_WITH(w.commit(50, false), Catch::Contains("token 50 is >= vocab_size = 50"));
    CHECK_FALSE(path_exists(temp_path("refused.odoc")));
  }
}

TEST_CASE("documents file: every malformed file is refused, naming the file and the field", "[engine][data]") {
  const std::string good = write_documents("good.odoc", {3, 1, 4, 2, 6, 1, 3});  // D = 7, T = 20
  const std::string bytes = bytes_of(good);
  REQUIRE(refusal(good).empty());
  const std::string path = temp_path("bad.odoc");
  const size_t index_at = 64, tokens_at = 64 + 8 * 8;
  auto refused = [&](std::string b) {
    put_bytes(path, b);
    return refusal(path);
  };
  const auto names_file = Catch::Contains("documents file '" + path + "'");

  CHECK_THAT(refused(bytes.substr(0, 40)),
             names_file && Catch::Contains("truncated: 40 bytes, shorter than the 64-byte header"));
  CHECK_THAT(refused(bytes.substr(0, bytes.size() - 1)),
             names_file && Catch::Contains("file size = 207 bytes") && Catch::Contains("make 208 bytes (truncated)"));
  CHECK_THAT(refused(bytes + "x"), names_file && Catch::Contains("make 208 bytes (bytes follow the tokens)"));

  std::string b = bytes;
  b[0] = 'X';
  CHECK_THAT(refused(b), names_file && Catch::Contains("magic = \"XDYDOCS\\x00\": not a documents file"));
  b = bytes;
  b[1] = '"';  // a quote (and a backslash) inside the quoted value is escaped: the value reads back
  b[2] = '\\';
  CHECK_THAT(refused(b), names_file && Catch::Contains("magic = \"O\\\"\\\\DOCS\\x00\": not a documents file"));
  b = bytes;
  poke<uint32_t>(b, 8, 2);
  CHECK_THAT(refused(b), names_file && Catch::Contains("version = 2: unsupported (this build reads version 1)"));
  b = bytes;
  poke<uint32_t>(b, 12, 2);
  CHECK_THAT(refused(b), names_file && Catch::Contains("token_dtype = 2: unsupported"));
  b = bytes;
  b[50] = 1;
  CHECK_THAT(refused(b), names_file && Catch::Contains("reserved header byte 50 = 1"));
  b = bytes;
  poke<uint64_t>(b, 24, 0);
  CHECK_THAT(refused(b), names_file && Catch::Contains("document_count = 0"));
  b = bytes;
  poke<uint64_t>(b, 16, uint64_t{1} << 62);  // a flipped bit: refused before any product or allocation
  CHECK_THAT(refused(b), names_file && Catch::Contains("make more bytes than any file"));
  b = bytes;
  poke<uint64_t>(b, 24, 19);  // 19 documents of 20 tokens need a 160-byte index: the file has 144 bytes
  CHECK_THAT(refused(b),
             names_file && Catch::Contains("document_count = 19 needs a 160-byte index, and the file has 144 "
                                           "bytes after the header"));

  // The index: not ascending (an empty document), past the token count, not starting at 0, not
  // ending at the token count.
  b = bytes;
  poke<uint64_t>(b, index_at + 8 * 2, 3);  // index[2] = index[1] = 3
  CHECK_THAT(refused(b), names_file && Catch::Contains("document index[2] = 3 is not greater than index[1] = 3"));
  b = bytes;
  poke<uint64_t>(b, index_at + 8 * 6, 25);
  CHECK_THAT(refused(b), names_file && Catch::Contains("document index[6] = 25 is past token_count = 20"));
  b = bytes;
  poke<uint64_t>(b, index_at, 1);
  CHECK_THAT(refused(b), names_file && Catch::Contains("document index[0] = 1: must be 0"));
  b = bytes;
  poke<uint64_t>(b, index_at + 8 * 7, 19);
  CHECK_THAT(refused(b),
             names_file && Catch::Contains("document index[7] = 19: the last entry must equal token_count = 20"));

  // Tokens: one at or past the header's vocabulary, and a vocabulary past the model's.
  b = bytes;
  poke<uint32_t>(b, tokens_at + 4 * 5, 64);
  CHECK_THAT(refused(b), names_file && Catch::Contains("token 64 at position 5 (document 2, its token 1) is >= "
                                                       "vocab_size = 64 of the header (model.vocab_size = 64)"));
  CHECK_THAT(refusal(good, 32), Catch::Contains("documents file '" + good + "'") &&
                                    Catch::Contains("vocab_size = 64 (the tokenizer's vocabulary) is larger than "
                                                    "model.vocab_size = 32"));
  // Not a file at all.
  CHECK_THAT(refusal(temp_path("missing.odoc")), Catch::Contains("missing.odoc") && Catch::Contains("cannot open"));
}

TEST_CASE("documents dataset: split packing fills sequences in file order, starts exact", "[engine][data]") {
  // Documents of 3, 1, 4, 2, 6, 1, 3 tokens: they begin at 0, 3, 4, 8, 10, 16, 17 (20 tokens).
  const std::string path = write_documents("split.odoc", {3, 1, 4, 2, 6, 1, 3});
  const auto data = make_dataset(documents_training(path, 4, DocumentPacking::Split), vocab_model());
  REQUIRE(data->has_documents());
  CHECK_FALSE(data->has_answers());
  // Sequence k is tokens [4k, 4k + 5): (20 - 1) / 4 = 4 sequences a pass, tokens 17..19 unused.
  const Packed s0 = packed(*data, 0), s1 = packed(*data, 1), s2 = packed(*data, 2), s3 = packed(*data, 3);
  CHECK(s0.tokens == iota_tokens(0, 5));
  CHECK(s3.tokens == iota_tokens(12, 5));
  // A document (1 token at 3) ending exactly at the sequence's end: the next begins at S = 4, the
  // last label.
  CHECK(s0.starts == Starts{0, 3, 4});
  CHECK(s1.starts == Starts{0, 4});
  // The 6-token document at 10 crosses the sequence's end (10..12 here, 13..15 in the next).
  CHECK(s2.starts == Starts{0, 2});
  // Inside that document until its end: the next begins at the last label only.
  CHECK(s3.starts == Starts{4});
  // The pass repeats: sequence 4 is sequence 0.
  CHECK(packed(*data, 4).tokens == s0.tokens);
  CHECK(packed(*data, 4).starts == s0.starts);
  CHECK_THAT(data->describe(),
             Catch::Contains("7 documents") && Catch::Contains("split packing: 4 sequences of 5 "
                                                               "tokens a pass, the last 3 tokens unused"));
}

TEST_CASE("documents dataset: refuse packing begins every sequence at a document, refuses a longer one",
          "[engine][data]") {
  // Documents of 3, 1, 4, 2, 5, 1, 3 tokens beginning at 0, 3, 4, 8, 10, 15, 16 (19 tokens).
  const std::string path = write_documents("refuse.odoc", {3, 1, 4, 2, 5, 1, 3});
  const auto data = make_dataset(documents_training(path, 4, DocumentPacking::Refuse), vocab_model());
  // Each sequence begins at the first document the one before did not hold whole.
  const Packed s0 = packed(*data, 0), s1 = packed(*data, 1), s2 = packed(*data, 2), s3 = packed(*data, 3);
  CHECK(s0.tokens == iota_tokens(0, 5));   // documents 0, 1 whole; document 2's first token as the last label
  CHECK(s1.tokens == iota_tokens(4, 5));   // document 2 whole (ends at the sequence's end), document 3's first
  CHECK(s2.tokens == iota_tokens(8, 5));   // document 3 whole, then document 4's beginning
  CHECK(s3.tokens == iota_tokens(10, 5));  // document 4 is exactly S + 1 = 5 tokens
  CHECK(s0.starts == Starts{0, 3, 4});
  CHECK(s1.starts == Starts{0, 4});
  CHECK(s2.starts == Starts{0, 2});
  CHECK(s3.starts == Starts{0});
  // Document 5 at 15 would need tokens up to 20: the pass is 4 sequences.
  CHECK(packed(*data, 4).tokens == s0.tokens);
  CHECK_THAT(data->describe(), Catch::Contains("refuse packing: 4 sequences"));

  // A document longer than a sequence (6 tokens > S + 1 = 5) is bad input: file, number, length.
  const std::string long_path = write_documents("refuse_long.odoc", {3, 1, 4, 2, 6, 1, 3});
  CHECK_THROWS_WITH(make_dataset(documents_training(long_path, 4, DocumentPacking::Refuse), vocab_model()),
                    Catch::Contains("documents file '" + long_path + "'") &&
                        Catch::Contains("document 4 holds 6 tokens, more than training.seq_len + 1 = 5") &&
                        Catch::Contains("document_packing = \"refuse\""));
  // Split takes the same file; a file shorter than one sequence is refused by both.
  CHECK_NOTHROW(make_dataset(documents_training(long_path, 4, DocumentPacking::Split), vocab_model()));
  CHECK_THROWS_WITH(make_dataset(documents_training(long_path, 32, DocumentPacking::Split), vocab_model()),
                    Catch::Contains("holds 20 tokens, fewer than training.seq_len + 1 = 33"));
}

TEST_CASE("documents dataset: under document_mask a sequence without a target is refused by training, skipped by eval",
          "[engine][data]") {
  // Documents of 4, 1, 1, 1, 1, 4, 4 tokens begin at 0, 4, 5, 6, 7, 8, 12 (16 tokens). Split at
  // S = 4: sequence 1 is tokens [4, 9), whose labels (tokens 5..8) each begin a document: no target.
  const std::string path = write_documents("untargeted.odoc", {4, 1, 1, 1, 1, 4, 4});
  TrainingConfig t = documents_training(path, 4, DocumentPacking::Split);
  CHECK_NOTHROW(make_dataset(t, vocab_model()));  // without the mask every label is a target
  t.document_mask = true;
  CHECK_THROWS_WITH(make_dataset(t, vocab_model()),
                    Catch::Contains("documents file '" + path + "'") &&
                        Catch::Contains("sequence 1 (tokens [4, 9) of the stream) holds no target inside a document") &&
                        Catch::Contains("a document of 2 tokens or more") &&
                        Catch::Contains("1 of the 3 sequences hold none"));
  // Eval's policy: the sequence is left out of the pass; the others keep their order and tokens.
  const auto skipping = make_documents_dataset(t, vocab_model(), UntargetedSequences::Skip);
  CHECK(skipping->sequences() == 2);
  CHECK(skipping->skipped() == 1);
  CHECK(skipping->unused_tokens() == 3);
  CHECK(packed(*skipping, 0).tokens == iota_tokens(0, 5));
  CHECK(packed(*skipping, 1).tokens == iota_tokens(8, 5));
  CHECK(packed(*skipping, 1).starts == Starts{0, 4});
  CHECK(packed(*skipping, 2).tokens == iota_tokens(0, 5));  // the pass wraps over the kept ones
  for (int64_t step = 0; step < 2; ++step) CHECK(trained_labels(*skipping, step, t, 1) > 0);
  CHECK_THAT(skipping->describe(), Catch::Contains("1 without a target inside a document skipped"));
  // make_dataset (the trainer's) takes the thread's policy while a scope holds it, and only then.
  {
    const UntargetedSequencesScope scope(UntargetedSequences::Skip);
    CHECK(dynamic_cast<const DocumentsDataset&>(*make_dataset(t, vocab_model())).skipped() == 1);
  }
  CHECK_THROWS_AS(make_dataset(t, vocab_model()), DataError);

  // Refuse packing: sequence 1 begins at document 2 (token 5); tokens 6..9 each begin a document.
  const std::string refuse_path = write_documents("untargeted_refuse.odoc", {4, 1, 1, 1, 1, 1, 4});
  TrainingConfig r = documents_training(refuse_path, 4, DocumentPacking::Refuse);
  r.document_mask = true;
  CHECK_THROWS_WITH(make_dataset(r, vocab_model()), Catch::Contains("sequence 1 (tokens [5, 10) of the stream)"));

  // Nothing but one-token documents: no sequence holds a target, refused under either policy.
  const std::string ones = write_documents("ones.odoc", std::vector<int64_t>(20, 1));
  TrainingConfig o = documents_training(ones, 4, DocumentPacking::Split);
  o.document_mask = true;
  CHECK_THROWS_WITH(make_dataset(o, vocab_model()), Catch::Contains("4 of the 4 sequences hold none"));
  CHECK_THROWS_WITH(make_documents_dataset(o, vocab_model(), UntargetedSequences::Skip),
                    Catch::Contains("none of its 4 sequences of 5 tokens holds a target inside a document"));
}

TEST_CASE("data: a rank's batch carries its sequences' whole document starts on every shard and replica",
          "[engine][data]") {
  const std::string path = write_documents("batch.odoc", {3, 1, 4, 2, 6, 1, 3});
  TrainingConfig t = documents_training(path, 4, DocumentPacking::Split);
  t.batch_size = 2;
  const auto data = make_dataset(t, vocab_model());
  // Two replicas of two Ulysses ranks: at step 0, replica 0 trains sequences 0 and 1, replica 1
  // sequences 2 and 3; sequence shard r holds positions [2r, 2r + 2).
  auto two_by_two = [](int dp_rank, int sp_rank) {
    RankContext ctx;
    ctx.world_size = 4;
    ctx.dp_size = 2;
    ctx.dp_rank = dp_rank;
    ctx.sp_size = 2;
    ctx.sp_rank = sp_rank;
    ctx.rank = dp_rank * 2 + sp_rank;
    return ctx;
  };
  for (int dp_rank = 0; dp_rank < 2; ++dp_rank) {
    for (int sp_rank = 0; sp_rank < 2; ++sp_rank) {
      INFO("dp_rank " << dp_rank << ", sp_rank " << sp_rank);
      const RankContext ctx = two_by_two(dp_rank, sp_rank);
      const RankBatch batch = make_rank_batch(*data, 0, t, ctx, at::kCPU);
      REQUIRE(batch.document_starts.size() == 2);
      REQUIRE(batch.last_label_starts_document.size() == 2);
      CHECK(batch.first_position == 2 * sp_rank);
      // Whole-sequence positions in [0, S), the same on both shards; a start at S = 4 is the
      // last label's and goes to last_label_starts_document.
      if (dp_rank == 0) {
        CHECK(batch.document_starts[0] == Starts{0, 3});
        CHECK(batch.document_starts[1] == Starts{0});
        CHECK(batch.last_label_starts_document == std::vector<uint8_t>{1, 1});
      } else {
        CHECK(batch.document_starts[0] == Starts{0, 2});
        CHECK(batch.document_starts[1] == Starts{});
        CHECK(batch.last_label_starts_document == std::vector<uint8_t>{0, 1});
      }
      // The tokens are the shard's: sequence 2 * dp_rank + b begins at token 4 (2 * dp_rank + b).
      for (int64_t b = 0; b < 2; ++b) {
        const int64_t first = 4 * (2 * dp_rank + b) + 2 * sp_rank;
        CHECK(batch.ids[b][0].item<int64_t>() == first);
        CHECK(batch.ids[b][1].item<int64_t>() == first + 1);
        CHECK(batch.labels[b][1].item<int64_t>() == first + 2);
      }
    }
  }
  // Step 1 wraps to the pass's beginning (4 sequences a pass, 4 a step).
  RankContext replica0;
  replica0.world_size = 2;
  replica0.dp_size = 2;
  const RankBatch next = make_rank_batch(*data, 1, t, replica0, at::kCPU);
  CHECK(next.document_starts[0] == Starts{0, 3});
  CHECK(next.last_label_starts_document == std::vector<uint8_t>{1, 1});

  // Under document masking the replicas hold different numbers of targets: sequences 0 and 1
  // (replica 0) 2 + 3, sequences 2 and 3 (replica 1) 3 + 3, a label crossing into the next
  // document not one (tokens 3, 4, 8, 10, 16 begin documents). Every rank divides by the world's
  // 11, never by its replica's own count (5 or 6), so the replicas' summed gradients are the
  // global batch's mean whatever each replica holds.
  TrainingConfig masked = t;
  masked.document_mask = true;
  const auto masked_data = make_dataset(masked, vocab_model());
  CHECK(trained_labels(*masked_data, 0, masked, 2) == 11);
  // The -100 labels of each (replica, shard): [dp_rank][sp_rank] lists (row, column) pairs.
  const std::vector<std::vector<std::vector<std::pair<int64_t, int64_t>>>> crossing = {
      {{}, {{0, 0}, {0, 1}, {1, 1}}},  // sequence 0: inputs 2, 3; sequence 1: input 3
      {{{0, 1}}, {{1, 1}}},            // sequence 2: input 1; sequence 3: input 3
  };
  for (int dp_rank = 0; dp_rank < 2; ++dp_rank) {
    for (int sp_rank = 0; sp_rank < 2; ++sp_rank) {
      INFO("masked: dp_rank " << dp_rank << ", sp_rank " << sp_rank);
      const RankContext ctx = two_by_two(dp_rank, sp_rank);
      const RankBatch batch = make_rank_batch(*masked_data, 0, masked, ctx, at::kCPU);
      CHECK(batch.global_tokens == 11);
      std::vector<std::pair<int64_t, int64_t>> ignored;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t c = 0; c < 2; ++c)
          if (batch.labels[b][c].item<int64_t>() == -100) ignored.emplace_back(b, c);
      CHECK(ignored == crossing[dp_rank][sp_rank]);
    }
  }

  // Datasets without documents: one empty list and a 0 per row.
  RunConfig plain = tiny_config(2, 64);
  plain.training.batch_size = 3;
  const auto task = make_dataset(plain.training, plain.model);
  CHECK_FALSE(task->has_documents());
  const RankBatch none = make_rank_batch(*task, 0, plain.training, RankContext{}, at::kCPU);
  CHECK(none.document_starts == std::vector<std::vector<int64_t>>(3));
  CHECK(none.last_label_starts_document == std::vector<uint8_t>{0, 0, 0});
}
