// A deterministic mutation fuzzer over token files, through make_dataset as a run opens them:
// llm.c .bin files with corrupt magic, version and counts (negative, huge, off by one), truncated,
// extended, flipped bytes and tokens beyond the vocabulary; byte files of every short length.
// Each must open and serve sequences of in-vocabulary tokens, or be refused with a DataError
// naming the file; never another exception, a crash or a hang (each under a second).
// defines: test cases [engine][data][fuzz]
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/train/data.h"
#include "engine/util/splitmix.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

std::string llmc(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string out(reinterpret_cast<const char*>(header.data()), 1024);
  out.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return out;
}

/// One mutant of a valid llm.c file of `n` tokens below 100 (kind 0..9).
std::string mutate(int kind, int64_t n, SplitMix& rng) {
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<uint16_t>(rng.below(100));
  std::string file = llmc(20240520, 1, static_cast<int32_t>(n), tokens);
  auto pick = [&](size_t k) { return static_cast<size_t>(rng.below(static_cast<int64_t>(std::max<size_t>(k, 1)))); };
  const int32_t extremes[] = {
      0, -1, 1, 2, INT32_MAX, INT32_MIN, static_cast<int32_t>(n) - 1, static_cast<int32_t>(n) + 1, 65, 64};
  switch (kind) {
    case 0:
      return file.substr(0, pick(file.size() + 1));  // truncated anywhere
    case 1:
      file += std::string(1 + pick(5), '\x01');
      return file;  // trailing bytes
    case 2: {       // a header field replaced
      const int32_t v = extremes[pick(std::size(extremes))];
      std::memcpy(file.data() + 4 * pick(3), &v, 4);
      return file;
    }
    case 3:  // flipped bytes anywhere
      for (int k = 0; k < 3; ++k) file[pick(file.size())] ^= static_cast<char>(1 + rng.below(255));
      return file;
    case 4: {  // tokens beyond the vocabulary
      const uint16_t big[] = {100, 101, 255, 256, 65535};
      const uint16_t v = big[pick(std::size(big))];
      std::memcpy(file.data() + 1024 + 2 * pick(static_cast<size_t>(n)), &v, 2);
      return file;
    }
    case 5:
      return std::string(pick(2048), static_cast<char>(rng.below(256)));  // not an llm.c file at all
    case 6:
      file.resize(1024 + 2 * pick(static_cast<size_t>(n)));
      return file;  // whole tokens cut off
    case 7: {       // the header of a huge count alone
      const int32_t v = static_cast<int32_t>(1 << (20 + pick(10)));
      std::memcpy(file.data() + 8, &v, 4);
      return file.substr(0, 1024 + pick(64));
    }
    case 8:
      file[pick(1024)] = static_cast<char>(rng.below(256));
      return file;  // a header byte changed
    default:
      return "";  // empty
  }
}

}  // namespace

TEST_CASE(
    "fuzz: 500 mutated token files open and serve in-vocabulary sequences or are refused naming the file, "
    "each within a second",
    "[engine][data][fuzz]") {
  const std::string path = std::string(ODYSSEY_BINARY_DIR) + "/data_fuzz.bin";
  ModelConfig m;
  m.vocab_size = 100;
  TrainingConfig t;
  t.seq_len = 64;
  t.dataset_path = path;
  SplitMix rng(20261202);
  constexpr int kMutants = 500;
  int opened = 0, refused = 0;
  double slowest = 0;
  for (int i = 0; i < kMutants; ++i) {
    const int kind = i % 10;
    // Half llm.c files, a quarter of them read again as raw bytes (vocabulary 256).
    const bool bytes = i % 4 == 3;
    t.dataset = bytes ? DatasetKind::Bytes : DatasetKind::Tokens;
    m.vocab_size = bytes ? 256 : 100;
    const std::string file = mutate(kind, 65 + rng.below(200), rng);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << file;
    INFO("mutant " << i << " (kind " << kind << (bytes ? ", as bytes" : "") << "), " << file.size() << " bytes");
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const auto data = make_dataset(t, m);
      ++opened;
      std::vector<int64_t> seq;
      std::vector<uint8_t> answer;
      for (int64_t index : {0, 1, 7, 1000003}) {
        data->sequence(index, &seq, &answer);
        REQUIRE(seq.size() == 65);
        for (int64_t token : seq) REQUIRE((token >= 0 && token < m.vocab_size));
      }
    } catch (const DataError& e) {
      ++refused;
      CHECK_THAT(e.what(), Catch::Contains(path));
    }  // any other exception fails the test case here
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    slowest = std::max(slowest, s);
    CHECK(s < 1.0);
  }
  std::printf("token file fuzz: %d mutants opened, %d refused; slowest %.4f s\n", opened, refused, slowest);
  CHECK(opened > 50);
  CHECK(refused > 200);
}
