// libFuzzer target for the safetensors header reader: any bytes, taken as a whole file, must be
// refused with SafetensorsError or give tensors that tile the data section exactly. Built by
// scripts/fuzz.sh (clang, ASan/UBSan); `make test` runs the deterministic [fuzz] mutants instead.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "engine/util/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace odyssey;
  const std::string path = "fuzz.safetensors";
  try {
    if (size < 8) return 0;
    const int64_t n = safetensors_header_length(data, static_cast<int64_t>(size), path);
    const int64_t data_bytes = static_cast<int64_t>(size) - 8 - n;
    const SafetensorsHeader h = parse_safetensors_header(
        std::string_view(reinterpret_cast<const char*>(data) + 8, static_cast<size_t>(n)), data_bytes, path);
    std::vector<const SafetensorsTensor*> sorted;
    for (const auto& t : h.tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(),
              [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->bytes < b->bytes; });
    int64_t at = 0;
    for (const SafetensorsTensor* t : sorted) {
      if (t->begin != at || t->bytes * 8 != t->numel() * safetensors_element_bits(t->dtype)) std::abort();
      if (h.index.at(t->name) >= h.tensors.size()) std::abort();
      at += t->bytes;
    }
    if (at != data_bytes || h.index.size() != h.tensors.size()) std::abort();
  } catch (const SafetensorsError& e) {
    if (std::string_view(e.what()).rfind("safetensors " + path + ": ", 0) != 0) std::abort();  // names the file
  }
  return 0;
}
