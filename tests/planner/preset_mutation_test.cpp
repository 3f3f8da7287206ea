// A deterministic mutation fuzzer over the shipped presets and the bad-preset fixtures: deleted,
// duplicated and swapped lines, swapped value types, extreme numbers, NUL and control bytes, long
// strings, truncation, flipped bytes and keys or values nested thousands deep. Every mutant must do what `odyssey check` and `odyssey
// plan` do with it (load, validate, plan and advise when it loads) without throwing, and each
// within a second; a mutant that loads must also plan to sane, non-negative numbers.
// defines: test cases [fuzz]
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/preset.h"
#include "engine/planner/planner.h"
#include "engine/util/splitmix.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

/// The same mutants on every machine and every run.
class Rng {
 public:
  explicit Rng(uint64_t seed) : mix_(seed) {}
  size_t below(size_t n) { return static_cast<size_t>(mix_.below(static_cast<int64_t>(n))); }
  uint64_t next() { return mix_.next(); }

 private:
  SplitMix mix_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

/// Values no preset should hold, as TOML literals.
const char* const kExtremes[] = {"0",
                                 "-1",
                                 "1e308",
                                 "-1e308",
                                 "nan",
                                 "inf",
                                 "-inf",
                                 "9223372036854775807",
                                 "-9223372036854775808",
                                 "1e-308",
                                 "18446744073709551616",
                                 "\"16G\"",
                                 "\"9999999G\"",
                                 "\"-3M\"",
                                 "1099511627776",
                                 "0.5",
                                 "true",
                                 "\"\"",
                                 "[1, 2]",
                                 "{ a = 1 }",
                                 "\"nan\"",
                                 "65537",
                                 "4097",
                                 "1e10"};

/// One mutant of `text`, of kind `kind` (0..10).
std::string mutate(const std::string& text, int kind, Rng& rng) {
  std::vector<std::string> lines = lines_of(text);
  if (lines.empty()) lines.push_back("");
  const size_t at = rng.below(lines.size());
  switch (kind) {
    case 0:  // delete a line
      lines.erase(lines.begin() + static_cast<long>(at));
      return join(lines);
    case 1:  // duplicate a line (a duplicated key or table)
      lines.insert(lines.begin() + static_cast<long>(at), lines[at]);
      return join(lines);
    case 2: {  // swap two lines (keys move to other tables)
      std::swap(lines[at], lines[rng.below(lines.size())]);
      return join(lines);
    }
    case 3:
    case 4: {  // an assignment's value replaced by an extreme or another type
      for (size_t tries = 0; tries < lines.size(); ++tries) {
        std::string& l = lines[(at + tries) % lines.size()];
        const size_t eq = l.find('=');
        if (eq == std::string::npos || l[0] == '#') continue;
        l = l.substr(0, eq + 1) + " " + kExtremes[rng.below(std::size(kExtremes))];
        break;
      }
      return join(lines);
    }
    case 5: {  // NUL and control bytes
      std::string s = text;
      for (int k = 0; k < 3; ++k) s.insert(rng.below(s.size() + 1), 1, static_cast<char>(rng.below(32)));
      return s;
    }
    case 6: {  // a long string value or key
      const std::string big(50000 + rng.below(50000), static_cast<char>('a' + rng.below(26)));
      lines.insert(lines.begin() + static_cast<long>(at),
                   rng.below(2) ? "description = \"" + big + "\"" : big + " = 1");
      return join(lines);
    }
    case 7:  // truncated
      return text.substr(0, rng.below(text.size() + 1));
    case 8: {  // flipped bytes
      std::string s = text;
      for (int k = 0; k < 4 && !s.empty(); ++k) s[rng.below(s.size())] ^= static_cast<char>(1 + rng.below(255));
      return s;
    }
    case 10: {  // a key of thousands of dotted parts, or values nested thousands deep (toml++ recursed)
      const size_t depth = 1000 + rng.below(150000);
      std::string deep;
      switch (rng.below(3)) {
        case 0:
          for (size_t k = 0; k < depth; ++k) deep += "k.";
          deep += "v = 1";
          break;
        case 1:
          deep = "v = " + std::string(depth, '[') + std::string(depth, ']');
          break;
        default:
          deep = "v = " + std::string(depth, '{');
          break;
      }
      lines.insert(lines.begin() + static_cast<long>(at), deep);
      return join(lines);
    }
    default: {  // a section header, a key or a value with random printable garbage
      std::string& l = lines[at];
      l.insert(rng.below(l.size() + 1), std::string(1 + rng.below(6), static_cast<char>(33 + rng.below(94))));
      return join(lines);
    }
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("fuzz: 660 mutated presets and fixtures load, validate and plan without throwing, each within a second",
          "[planner][fuzz]") {
  // Half the mutants start from a shipped preset (they reach the planner), half from a fixture
  // (already broken one way, now two).
  std::vector<std::string> seeds[2];
  int index = 0;
  for (const char* dir : {"presets", "tests/fixtures"}) {
    for (const auto& entry : std::filesystem::directory_iterator(std::string(ODYSSEY_SOURCE_DIR) + "/" + dir))
      if (entry.path().extension() == ".toml") seeds[index].push_back(read_text(entry.path().string()));
    ++index;
  }
  REQUIRE(seeds[0].size() >= 5);
  REQUIRE(seeds[1].size() >= 30);
  Rng rng(20261123);
  constexpr int kMutants = 660;
  int loaded = 0, refused = 0;
  double slowest = 0;
  for (int i = 0; i < kMutants; ++i) {
    const int kind = i % 11;
    const auto& pool = seeds[(i / 11) % 2];
    const std::string text = mutate(pool[rng.below(pool.size())], kind, rng);
    INFO("mutant " << i << " (kind " << kind << "):\n" << text.substr(0, 2000));
    const auto t0 = std::chrono::steady_clock::now();
    LoadedPreset p;
    REQUIRE_NOTHROW(p = load_preset_text(text, "mutant.toml"));  // `odyssey check`
    for (const auto& issue : p.issues) CHECK(issue.format().rfind("mutant.toml", 0) == 0);
    if (p.ok()) {
      ++loaded;
      MemoryPlan plan;
      REQUIRE_NOTHROW(plan = plan_memory(p.config));  // `odyssey plan`
      CHECK(plan.peak_bytes >= 0);
      CHECK(plan.host_bytes >= 0);
      for (const auto& term : plan.terms) CHECK(term.bytes >= 0);
      // `odyssey train`'s refusal of an unfit run (the advisor's fixes in its message)
      if (!plan.fits()) CHECK_FALSE(planned_out_of_memory(p.config, 1).empty());
    } else {
      ++refused;
    }
    const double s = seconds(t0);
    slowest = std::max(slowest, s);
    CHECK(s < 1.0);
  }
  std::printf("fuzz: %d mutants loaded and planned, %d refused; slowest %.4f s\n", loaded, refused, slowest);
  CHECK(loaded > 40);  // the mutants reach the planner, not only the parser
  CHECK(refused > 300);
}
