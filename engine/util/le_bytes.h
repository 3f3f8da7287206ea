// Fixed-width little-endian values at unaligned byte positions: file headers (the documents file)
// and the records of a pipe (odyssey prepare's tokenizer process). defines: load_le, store_le
#pragma once

#include <bit>
#include <cstring>

namespace odyssey {

static_assert(std::endian::native == std::endian::little,
              "load_le/store_le copy bytes as they are: a big-endian host needs byte swaps here");

/// The value of type T whose bytes begin at `at` (any alignment). Usage: load_le<uint64_t>(header + 16)
template <typename T>
T load_le(const char* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

/// Writes v's bytes at `at` (any alignment). Usage: store_le<uint32_t>(header + 8, 1)
template <typename T>
void store_le(char* at, T v) {
  std::memcpy(at, &v, sizeof v);
}

}  // namespace odyssey
