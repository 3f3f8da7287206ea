// SplitMix64: a tiny, fast, well-mixed pseudo-random generator whose stream is a pure function of
// its seed on every machine (the built-in tasks' data, the tests' deterministic mutants).
// defines: SplitMix
#pragma once

#include <cstdint>

namespace odyssey {

/// Usage: SplitMix rng(seed); uint64_t x = rng.next(); int64_t k = rng.below(10);
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) for n > 0 (0 for n <= 0).
  int64_t below(int64_t n) { return n > 0 ? static_cast<int64_t>(next() % static_cast<uint64_t>(n)) : 0; }

 private:
  uint64_t state_;
};

}  // namespace odyssey
