// Datasets: the long-range task's layout and determinism, llm.c .bin and raw-byte files, every bad
// file named with its problem, and rank batch selection (sequence shards with global positions).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "../common/engine_test_util.h"
#include "engine/train/data.h"
#include "engine/util/files.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::string temp_path(const std::string& name) { return "/tmp/odyssey_data_test_" + name; }

void write_llmc(const std::string& path, int32_t magic, int32_t version, int32_t count,
                const std::vector<uint16_t>& tokens) {
  std::ofstream f(path, std::ios::binary);
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

std::string error_of(const TrainingConfig& t, const ModelConfig& m) {
  try {
    make_dataset(t, m);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("data: long-range passkey task layout, answers and determinism", "[engine][data]") {
  for (int64_t seq : {32, 64, 512, 4096}) {
    for (int64_t vocab : {32, 256}) {
      const LongRangeLayout L = LongRangeLayout::make(seq, vocab);
      CHECK(L.context == seq / 2);
      CHECK(L.copies == std::max<int64_t>(1, seq / 64));
      CHECK(L.queries == (seq + 1 - seq / 2) / 4);
      TrainingConfig t;
      t.seq_len = seq;
      t.seed = 3;
      ModelConfig m;
      m.vocab_size = vocab;
      auto data = make_dataset(t, m);
      std::vector<int64_t> tokens, again;
      std::vector<uint8_t> answer, answer_again;
      data->sequence(5, &tokens, &answer);
      data->sequence(5, &again, &answer_again);
      REQUIRE(tokens.size() == static_cast<size_t>(seq + 1));
      REQUIRE(answer.size() == static_cast<size_t>(seq));
      CHECK(tokens == again);
      CHECK(answer == answer_again);
      // The first half: filler and `copies` copies of one passkey symbol, one per segment.
      int64_t symbol = -1, copies = 0;
      for (int64_t i = 0; i < L.context; ++i) {
        if (tokens[i] == L.filler) continue;
        CHECK(tokens[i] >= L.passkey_first);
        CHECK(tokens[i] < L.passkey_first + L.passkey_count);
        if (symbol < 0) symbol = tokens[i];
        CHECK(tokens[i] == symbol);
        ++copies;
      }
      CHECK(copies == L.copies);
      // The second half: filler and [QUERY_MARK passkey] pairs; each answer position is a query
      // mark whose label (the next token) is the passkey.
      int64_t answers = 0;
      for (int64_t i = L.context; i <= seq; ++i) {
        CHECK(tokens[i] < vocab);
        if (i < seq && answer[i]) {
          ++answers;
          CHECK(tokens[i] == L.query_mark);
          CHECK(tokens[i + 1] == symbol);
        } else if (tokens[i] != L.filler) {
          // Every query mark is an answer position, so anything else is the passkey after one.
          CHECK(tokens[i] == symbol);
          CHECK(answer[i - 1] == 1);
        }
      }
      for (int64_t i = 0; i < L.context; ++i) CHECK(answer[i] == 0);
      CHECK(answers == L.queries);
      data->sequence(6, &again, &answer_again);
      CHECK(tokens != again);
    }
  }
  // Every symbol is a passkey about equally often: 800 sequences, 100 expected per symbol; a
  // binomial(800, 1/8) stays within 100 +- 45 (5 sigma) for a fair generator.
  TrainingConfig t;
  t.seq_len = 64;
  ModelConfig m;
  m.vocab_size = 32;
  const LongRangeLayout L = LongRangeLayout::make(64, 32);
  auto data = make_dataset(t, m);
  std::vector<int64_t> count(L.passkey_count, 0), tokens;
  std::vector<uint8_t> answer;
  for (int64_t index = 0; index < 800; ++index) {
    data->sequence(index, &tokens, &answer);
    for (int64_t i = 0; i < 64; ++i)
      if (answer[i]) {
        ++count[tokens[i + 1] - L.passkey_first];
        break;
      }
  }
  for (int64_t c : count) CHECK(std::abs(c - 100) <= 45);
  CHECK_THROWS_AS(LongRangeLayout::make(16, 256), DataError);
  CHECK_THROWS_AS(LongRangeLayout::make(64, 16), DataError);
}

TEST_CASE("data: llm.c .bin and raw bytes read back, bad files are named errors", "[engine][data]") {
  ModelConfig m;
  m.vocab_size = 256;
  TrainingConfig t;
  t.seq_len = 8;
  t.dataset = DatasetKind::Tokens;
  std::vector<uint16_t> tokens(40);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 3 % 200);

  t.dataset_path = temp_path("good.bin");
  write_llmc(t.dataset_path, 20240520, 1, 40, tokens);
  auto data = make_dataset(t, m);
  std::vector<int64_t> seq;
  std::vector<uint8_t> answer;
  data->sequence(1, &seq, &answer);
  REQUIRE(seq.size() == 9);
  CHECK(seq[0] == tokens[8]);
  CHECK(seq[8] == tokens[16]);

  t.dataset_path = temp_path("missing.bin");
  remove_tree(t.dataset_path);
  CHECK_THAT(error_of(t, m), Catch::Contains("missing.bin") && Catch::Contains("cannot open"));

  t.dataset_path = temp_path("magic.bin");
  write_llmc(t.dataset_path, 12345, 1, 40, tokens);
  CHECK_THAT(error_of(t, m), Catch::Contains("magic.bin") && Catch::Contains("wrong magic 12345"));

  t.dataset_path = temp_path("version.bin");
  write_llmc(t.dataset_path, 20240520, 2, 40, tokens);
  CHECK_THAT(error_of(t, m), Catch::Contains("unsupported version 2"));

  t.dataset_path = temp_path("truncated.bin");
  write_llmc(t.dataset_path, 20240520, 1, 1000, tokens);
  CHECK_THAT(error_of(t, m),
             Catch::Contains("truncated.bin") && Catch::Contains("truncated") && Catch::Contains("1000 tokens"));

  // A negative count is no count at all: said so, not "truncated".
  t.dataset_path = temp_path("negative.bin");
  write_llmc(t.dataset_path, 20240520, 1, -1, tokens);
  CHECK_THAT(error_of(t, m), Catch::Contains("negative.bin") &&
                                 Catch::Contains("the header's token count = -1 is invalid") &&
                                 !Catch::Contains("truncated"));

  t.dataset_path = temp_path("header.bin");
  {
    std::ofstream f(t.dataset_path, std::ios::binary);
    f << "short";
  }
  CHECK_THAT(error_of(t, m), Catch::Contains("header.bin") && Catch::Contains("shorter than the 1024-byte"));

  t.dataset_path = temp_path("vocab.bin");
  tokens[17] = 300;
  write_llmc(t.dataset_path, 20240520, 1, 40, tokens);
  CHECK_THAT(error_of(t, m), Catch::Contains("vocab.bin") && Catch::Contains("token 300 at index 17") &&
                                 Catch::Contains("vocab_size = 256"));

  t.dataset_path = temp_path("few.bin");
  write_llmc(t.dataset_path, 20240520, 1, 5, std::vector<uint16_t>(tokens.begin(), tokens.begin() + 5));
  CHECK_THAT(error_of(t, m), Catch::Contains("few.bin") && Catch::Contains("fewer than training.seq_len + 1"));

  // A header count smaller than the body: the rest would be ignored without a word.
  tokens[17] = 3;
  t.dataset_path = temp_path("trailing.bin");
  write_llmc(t.dataset_path, 20240520, 1, 20, tokens);
  CHECK_THAT(error_of(t, m), Catch::Contains("trailing.bin") && Catch::Contains("the header says 20 tokens") &&
                                 Catch::Contains("40 bytes would be ignored (the body holds 40 tokens)"));
  write_llmc(t.dataset_path, 20240520, 1, 40, tokens);
  { std::ofstream(t.dataset_path, std::ios::binary | std::ios::app) << 'x'; }  // and one odd byte
  CHECK_THAT(error_of(t, m),
             Catch::Contains("1 bytes would be ignored (the body is not a whole number of uint16 tokens)"));

  // A FIFO would block open() until a writer came: refused at once, as any file that is not one.
  t.dataset_path = temp_path("fifo");
  remove_tree(t.dataset_path);
  REQUIRE(::mkfifo(t.dataset_path.c_str(), 0644) == 0);
  CHECK_THAT(error_of(t, m), Catch::Contains("fifo") && Catch::Contains("not a regular file"));
  t.dataset_path = "/tmp";
  CHECK_THAT(error_of(t, m), Catch::Contains("not a regular file"));

  t.dataset = DatasetKind::Bytes;
  t.dataset_path = temp_path("bytes.txt");
  {
    std::ofstream f(t.dataset_path, std::ios::binary);
    f << "hello odyssey, long context!";
  }
  data = make_dataset(t, m);
  data->sequence(0, &seq, &answer);
  CHECK(seq[0] == 'h');
  CHECK(seq[4] == 'o');
  {
    std::ofstream f(t.dataset_path, std::ios::binary);
    f << "tiny";
  }
  CHECK_THAT(error_of(t, m), Catch::Contains("bytes.txt") && Catch::Contains("fewer than"));
  m.vocab_size = 128;
  CHECK_THAT(error_of(t, m), Catch::Contains("vocab_size >= 256"));
}

TEST_CASE("data: a token file that shrinks or changes after it was opened is a runtime error naming it, never SIGBUS",
          "[engine][data]") {
  // Memory-mapped, a read past the new end of a file that shrank killed the run with SIGBUS (no
  // summary.json, a 0-byte trace). Read with pread, it is DataChangedError: a runtime failure
  // (exit 1), not bad input (DataError, exit 2), since the file was valid when the run began.
  ModelConfig m;
  m.vocab_size = 256;
  TrainingConfig t;
  t.seq_len = 64;
  t.dataset = DatasetKind::Bytes;
  t.dataset_path = temp_path("shrinks.txt");
  { std::ofstream(t.dataset_path, std::ios::binary) << std::string(1 << 20, 'a'); }  // 256 pages
  auto data = make_dataset(t, m);
  std::vector<int64_t> seq;
  std::vector<uint8_t> answer;
  data->sequence(5000, &seq, &answer);  // far into the file
  REQUIRE(::truncate(t.dataset_path.c_str(), 100) == 0);
  std::string why;
  try {
    data->sequence(5000, &seq, &answer);
  } catch (const DataChangedError& e) {
    why = e.what();
  }
  CHECK_THAT(why, Catch::Contains("shrinks.txt") && Catch::Contains("changed size during the run") &&
                      Catch::Contains("it holds 100 bytes now and held 1048576 when the run began"));

  // An llm.c file rewritten in place with a token the open-time scan did not see.
  m.vocab_size = 200;
  t.dataset = DatasetKind::Tokens;
  t.dataset_path = temp_path("rewritten.bin");
  std::vector<uint16_t> tokens(1000, 7);
  write_llmc(t.dataset_path, 20240520, 1, 1000, tokens);
  data = make_dataset(t, m);
  tokens[3] = 250;
  write_llmc(t.dataset_path, 20240520, 1, 1000, tokens);
  why.clear();
  try {
    data->sequence(0, &seq, &answer);
  } catch (const DataChangedError& e) {
    why = e.what();
  }
  CHECK_THAT(why, Catch::Contains("rewritten.bin") && Catch::Contains("token 250 at index 3") &&
                      Catch::Contains("the file changed during the run"));
}

TEST_CASE("data: a rank's batch is its replica's sequences, its shard, global positions", "[engine][data]") {
  RunConfig cfg = tiny_config(2, 64);
  cfg.training.batch_size = 2;
  auto data = make_dataset(cfg.training, cfg.model);
  RankContext solo;
  const RankBatch whole = make_rank_batch(*data, 3, cfg.training, solo, at::kCPU);
  CHECK(whole.ids.sizes() == at::IntArrayRef({2, 64}));
  CHECK(whole.global_tokens == 128);
  // Labels are the inputs shifted by one.
  CHECK(whole.labels.narrow(1, 0, 63).equal(whole.ids.narrow(1, 1, 63)));
  CHECK(whole.answer_mask.sum().item<int64_t>() == 2 * LongRangeLayout::make(64, 64).queries);

  // Ulysses rank 1 of 2 in replica 0 of 1: the second half, positions from 32.
  RankContext sp;
  sp.world_size = 2;
  sp.sp_size = 2;
  sp.sp_rank = 1;
  const RankBatch half = make_rank_batch(*data, 3, cfg.training, sp, at::kCPU);
  CHECK(half.first_position == 32);
  CHECK(half.ids.equal(whole.ids.narrow(1, 32, 32)));
  CHECK(half.labels.equal(whole.labels.narrow(1, 32, 32)));

  // Data-parallel replica 1 of 2 trains on the next two sequences of the step.
  RankContext dp;
  dp.world_size = 2;
  dp.dp_size = 2;
  dp.dp_rank = 1;
  const RankBatch replica = make_rank_batch(*data, 3, cfg.training, dp, at::kCPU);
  CHECK(replica.global_tokens == 256);
  std::vector<int64_t> seq;
  std::vector<uint8_t> answer;
  data->sequence(3 * 4 + 2, &seq, &answer);
  CHECK(replica.ids[0][0].item<int64_t>() == seq[0]);
  CHECK(replica.ids[0][63].item<int64_t>() == seq[63]);
}
