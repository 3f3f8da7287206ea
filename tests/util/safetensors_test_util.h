// Building safetensors files and headers byte by byte for the reader's tests and its fuzzer.
// defines: entry, le64, file_bytes, many_entries
#pragma once

#include <cstdint>
#include <string>

namespace odyssey::test {

/// One header entry: "name":{"dtype":..,"shape":SHAPE,"data_offsets":[begin,end]} (shape as JSON text).
inline std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, int64_t begin,
                         int64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

/// `n` as the format's 8-byte little-endian length.
inline std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out;
}

/// A whole file: the header's length, the header, the data section.
inline std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

/// A header of `n` one-element F32 tensors "t0".."t{n-1}" covering 4n data bytes.
inline std::string many_entries(int n) {
  std::string h = "{";
  h.reserve(static_cast<size_t>(n) * 72);
  for (int i = 0; i < n; ++i)
    h += (i ? "," : "") + entry("t" + std::to_string(i), "F32", "[1]", 4 * int64_t{i}, 4 * int64_t{i} + 4);
  return h + "}";
}

}  // namespace odyssey::test
