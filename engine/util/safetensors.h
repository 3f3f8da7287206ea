// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, then the raw bytes. Reading memory-maps the
// file (a rank touches only the pages of the elements it copies); writing goes through an
// AtomicFile. defines: SafetensorsError, SafetensorsTensor, SafetensorsFile, SafetensorsOut,
// write_safetensors. No LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace odyssey {

/// A safetensors file that cannot be read as one: the message names the file, the tensor (when
/// one is at fault) and what is wrong. Bad input.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One tensor of a file's header.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;           ///< "F32", "BF16", "F16", ... as the header writes it
  std::vector<int64_t> shape;  ///< [] for a scalar
  int64_t begin = 0;           ///< byte offset of the data, from the start of the data section
  int64_t bytes = 0;
  int64_t numel() const;
};

/// Bytes per element of a safetensors dtype name, 0 for an unknown one.
int64_t safetensors_element_bytes(const std::string& dtype);

/// A safetensors file mapped read-only. Every header entry is checked on open (dtype known,
/// byte range = numel x element size, inside the file, no overlaps), so data() never reads past it.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);  ///< throws SafetensorsError
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  /// The entry `name`, or null.
  const SafetensorsTensor* find(const std::string& name) const;
  /// The first byte of `t`'s data in the mapping (valid while this object lives).
  const std::byte* data(const SafetensorsTensor& t) const;

 private:
  std::string path_;
  const std::byte* map_ = nullptr;
  size_t map_bytes_ = 0;
  int64_t data_start_ = 0;
  std::map<std::string, SafetensorsTensor> tensors_;
};

/// One tensor to write: its header fields and its bytes (row-major, little-endian).
struct SafetensorsOut {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t bytes = 0;
};

/// Writes `tensors` (in the order given) to `path` atomically, with `metadata` as the header's
/// "__metadata__" (string values). Throws FileWriteError when the write fails.
void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace odyssey
