// A deterministic mutation fuzzer over safetensors files: truncated files, flipped bytes, extreme
// numbers, duplicate keys, holes, overlaps, trailing bytes, other dtypes and shapes, non-UTF-8
// names, deep nesting, corrupt length fields and headers of many entries. Every mutant must open
// as a file whose tensors tile its data exactly and read back, or be refused with a
// SafetensorsError naming the file; never another exception, a crash or a hang (each under a
// second). defines: test cases [util][safetensors][fuzz]
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "engine/util/safetensors.h"
#include "engine/util/splitmix.h"
#include "safetensors_test_util.h"
#include "test_paths.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

struct Seed {
  std::string header, data;
};

/// Valid files: mixed dtypes with metadata, many small tensors, and the empty file.
std::vector<Seed> seeds() {
  std::vector<Seed> out;
  out.push_back({"{\"__metadata__\":{\"format\":\"pt\"}," + entry("w", "F32", "[2, 3]", 0, 24) + "," +
                     entry("h", "BF16", "[4]", 24, 32) + "," + entry("e", "F16", "[0]", 32, 32) + "," +
                     entry("s", "I64", "[]", 32, 40) + "," + entry("u", "U8", "[3]", 40, 43) + "}",
                 std::string(43, '\x3f')});
  std::string many = "{";
  for (int i = 0; i < 40; ++i)
    many += (i ? "," : "") + entry("layer." + std::to_string(i), "F32", "[1]", 4 * i, 4 * i + 4);
  out.push_back({many + "}", std::string(160, '\0')});
  out.push_back({"{}", ""});
  return out;
}

const char* const kNumbers[] = {"0",
                                "1",
                                "-1",
                                "7",
                                "4294967296",
                                "9223372036854775807",
                                "9223372036854775808",
                                "18446744073709551615",
                                "18446744073709551616",
                                "1e999",
                                "2.5",
                                "-0",
                                "99999999999"};
const char* const kDtypes[] = {"F32",     "BF16", "F16",     "F64", "I64",  "U8", "BOOL", "F4",
                               "F6_E2M3", "C64",  "F8_E4M3", "f32", "F128", "",   "F32 ", "\\u0046\\u0033\\u0032"};

/// Start offsets of every run of digits in `s`.
std::vector<size_t> numbers_in(const std::string& s) {
  std::vector<size_t> at;
  for (size_t i = 0; i < s.size(); ++i)
    if (std::isdigit(static_cast<unsigned char>(s[i])) &&
        (i == 0 || !std::isdigit(static_cast<unsigned char>(s[i - 1]))))
      at.push_back(i);
  return at;
}

size_t digits_at(const std::string& s, size_t i) {
  size_t n = 0;
  while (i + n < s.size() && std::isdigit(static_cast<unsigned char>(s[i + n]))) ++n;
  return n;
}

/// One mutant of `seed` (a whole file's bytes), of kind `kind` (0..13).
std::string mutate(const Seed& seed, int kind, SplitMix& rng) {
  std::string h = seed.header, data = seed.data;
  auto pick = [&](size_t n) { return static_cast<size_t>(rng.below(static_cast<int64_t>(std::max<size_t>(n, 1)))); };
  auto replace_number = [&](const std::string& with) {
    const auto at = numbers_in(h);
    if (!at.empty()) {
      const size_t i = at[pick(at.size())];
      h.replace(i, digits_at(h, i), with);
    }
  };
  switch (kind) {
    case 0: {  // truncated anywhere
      const std::string whole = file_bytes(h, data);
      return whole.substr(0, pick(whole.size() + 1));
    }
    case 1: {  // flipped bytes anywhere
      std::string whole = file_bytes(h, data);
      for (int k = 0; k < 3; ++k) whole[pick(whole.size())] ^= static_cast<char>(1 + rng.below(255));
      return whole;
    }
    case 2:  // flipped bytes in the header
      for (int k = 0; k < 2; ++k) h[pick(h.size())] ^= static_cast<char>(1 << rng.below(8));
      break;
    case 3:  // a number replaced by an extreme (huge counts, negative, fractions)
      replace_number(kNumbers[pick(std::size(kNumbers))]);
      break;
    case 4: {  // a duplicated entry or key
      const size_t q = h.find("\":{\"dtype\"");
      if (q != std::string::npos) {
        const size_t open = h.rfind('"', q - 1), close = h.find('}', q);
        h.insert(close + 1, "," + h.substr(open, close + 1 - open));
      } else {
        h.insert(1, "\"__metadata__\":{},\"__metadata__\":{}" + std::string(h.size() > 2 ? "," : ""));
      }
      break;
    }
    case 5: {  // an offset moved a little: holes and overlaps
      const size_t q = h.find("data_offsets", pick(h.size()));
      const auto at = numbers_in(h.substr(q == std::string::npos ? 0 : q));
      if (q != std::string::npos && !at.empty()) {
        const size_t i = q + at[pick(std::min<size_t>(2, at.size()))];
        const int64_t v = std::stoll(h.substr(i, digits_at(h, i))) + rng.below(9) - 4;
        h.replace(i, digits_at(h, i), std::to_string(std::max<int64_t>(0, v)));
      }
      break;
    }
    case 6:  // trailing or missing data bytes
      if (rng.below(2))
        data += std::string(1 + pick(16), 'x');
      else
        data.resize(data.size() - pick(data.size() + 1));
      break;
    case 7: {  // another dtype, known or not
      const size_t q = h.find("\"dtype\":\"", pick(h.size()));
      if (q != std::string::npos) {
        const size_t v = q + 9;
        h.replace(v, h.find('"', v) - v, kDtypes[pick(std::size(kDtypes))]);
      }
      break;
    }
    case 8: {  // another shape
      const size_t q = h.find("\"shape\":[", pick(h.size()));
      if (q != std::string::npos) {
        const size_t v = q + 9;
        const char* shapes[] = {"",  "0",  "1",   "2, 3",  "3, 2", "1, 1, 1, 1, 1, 1, 1, 1, 1, 1",
                                "6", "-6", "1e1", "\"6\"", "[6]"};
        h.replace(v, h.find(']', v) - v, shapes[pick(std::size(shapes))]);
      }
      break;
    }
    case 9: {  // bytes that are not UTF-8 inside a string
      const char* bad[] = {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\\ud800", "\x01"};
      const size_t q = h.find('"', pick(h.size()));
      h.insert(q == std::string::npos ? 1 : q + 1, bad[pick(std::size(bad))]);
      break;
    }
    case 10: {  // deep nesting in a field the format does not define, or as a tensor
      const size_t depth = 1 + pick(rng.below(2) ? 70 : 5000);
      const std::string nest = std::string(depth, '[') + std::string(depth, ']');
      const size_t q = h.find("\"dtype\"");
      if (q != std::string::npos && rng.below(2))
        h.insert(q, "\"x\":" + nest + ",");
      else
        h.insert(1, "\"deep\":" + nest + (h.size() > 2 ? "," : ""));
      break;
    }
    case 11: {  // a corrupt header length
      std::string whole = file_bytes(h, data);
      const uint64_t lengths[] = {
          0,           1,           h.size() - 1, h.size() + 1, h.size() + data.size(), h.size() + data.size() + 1,
          100'000'000, 100'000'001, ~uint64_t{0}, rng.next()};
      const std::string len = le64(lengths[pick(std::size(lengths))]);
      return len + whole.substr(8);
    }
    case 12: {  // thousands of extra entries, zero-size (valid) or at random offsets
      std::string extra;
      const int n = 1000 + static_cast<int>(pick(4000));
      const bool valid = rng.below(2);
      for (int i = 0; i < n; ++i)
        extra += "," + entry("z" + std::to_string(i), "U8", valid ? "[0]" : "[1]", valid ? 0 : pick(64),
                             valid ? 0 : pick(64));
      if (h.size() > 2)
        h.insert(h.size() - 1, extra);
      else
        h = "{" + extra.substr(1) + "}";
      break;
    }
    default: {  // printable garbage
      h.insert(pick(h.size() + 1), std::string(1 + pick(4), static_cast<char>(33 + rng.below(94))));
      break;
    }
  }
  if (rng.below(4) == 0) h.append(pick(9), ' ');  // the spec's padding, sometimes
  return file_bytes(h, data);
}

/// An accepted file must be what the format says: tensors tiling the data, each readable.
void check_accepted(const SafetensorsFile& f, int64_t data_bytes) {
  std::vector<const SafetensorsTensor*> sorted;
  for (const auto& t : f.tensors()) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->bytes < b->bytes; });
  int64_t at = 0;
  for (const SafetensorsTensor* t : sorted) {
    INFO("tensor " << t->name);
    CHECK(t->begin == at);
    CHECK(t->bytes * 8 == t->numel() * safetensors_element_bits(t->dtype));
    at += t->bytes;
    if (const int64_t element = safetensors_element_bytes(t->dtype)) {
      std::vector<char> buffer(static_cast<size_t>(t->bytes));
      REQUIRE_NOTHROW(f.read_into(*t, 0, t->numel(), buffer.data()));
      CHECK(t->numel() * element == t->bytes);
    }
  }
  CHECK(at == data_bytes);
}

}  // namespace

TEST_CASE("fuzz: 700 mutated safetensors files open cleanly or are refused naming the file, each within a second",
          "[util][safetensors][fuzz]") {
  const std::vector<Seed> pool = seeds();
  const std::string path = std::string(ODYSSEY_BINARY_DIR) + "/safetensors_fuzz.safetensors";
  SplitMix rng(20261201);
  constexpr int kMutants = 700, kKinds = 14;
  int accepted = 0, refused = 0;
  double slowest = 0;
  for (int i = 0; i < kMutants; ++i) {
    const int kind = i % kKinds;
    const std::string bytes = mutate(pool[static_cast<size_t>(i / kKinds) % pool.size()], kind, rng);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    INFO("mutant " << i << " (kind " << kind << "), " << bytes.size() << " bytes: " << bytes.substr(0, 600));
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const SafetensorsFile f(path);
      ++accepted;
      uint64_t n = 0;
      for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(b)]);
      check_accepted(f, static_cast<int64_t>(bytes.size() - 8 - n));
    } catch (const SafetensorsError& e) {
      ++refused;
      CHECK(std::string(e.what()).rfind("safetensors " + path + ": ", 0) == 0);
    }  // any other exception fails the test case here
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    slowest = std::max(slowest, s);
    CHECK(s < 1.0);
  }
  std::printf("safetensors fuzz: %d mutants accepted, %d refused; slowest %.4f s\n", accepted, refused, slowest);
  CHECK(accepted > 20);  // mutants that stay valid reach the reads
  CHECK(refused > 400);
}
