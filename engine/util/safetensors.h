// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range, then the raw bytes. Reading checks the whole
// format before any data is used and reads data with pread (no memory map: a file that shrinks
// while it is read is an error, never SIGBUS); writing goes through an AtomicFile.
// defines: SafetensorsError, SafetensorsReadError, SafetensorsTensor, SafetensorsHeader,
// safetensors_element_bits, safetensors_header_length, parse_safetensors_header, SafetensorsFile,
// SafetensorsOut, write_safetensors. No LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace odyssey {

/// A safetensors file that is not one, as the format's specification states it: the message
/// names the file, the tensor (when one is at fault), the value and the rule. Bad input.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Reading a checked file's data failed: it changed (shrank) while it was read, or the system
/// reported an I/O error. A runtime failure (exit 1), not bad input: the file was valid when opened.
class SafetensorsReadError : public std::runtime_error {
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
  int64_t elements = 0;  ///< the product of shape (overflow-checked on open)
  int64_t numel() const { return elements; }
};

/// Bits per element of a dtype of the specification (BOOL, F4, F6_E2M3, F6_E3M2, U8, I8,
/// F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, I16, U16, F16, BF16, I32, U32, F32, C64,
/// F64, I64, U64), 0 for any other name.
int64_t safetensors_element_bits(std::string_view dtype);
/// Whole bytes per element, 0 for an unknown dtype or one narrower than a byte (F4, F6_*).
int64_t safetensors_element_bytes(std::string_view dtype);

/// The format's limit on the header (the reference implementation's MAX_HEADER_SIZE).
constexpr int64_t kSafetensorsMaxHeaderBytes = 100'000'000;

/// A parsed, checked header: tensors in the header's order, each name once.
struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;
  std::unordered_map<std::string, size_t> index;  ///< name -> position in tensors
  std::map<std::string, std::string> metadata;    ///< "__metadata__" (string -> string)
};

/// The header length N from a file's first 8 bytes (little-endian), checked against the format's
/// limit and the file's size (N <= 100 MB and N <= file_bytes - 8). Throws SafetensorsError naming
/// `path`. Usage: n = safetensors_header_length(first8, st.st_size, path).
int64_t safetensors_header_length(const unsigned char first8[8], int64_t file_bytes, const std::string& path);

/// Parses and checks the N header bytes of `path` against a data section of `data_bytes` (file
/// size - 8 - N), in time linear in N (a SAX parse, names kept in a hash map): UTF-8 JSON that
/// begins with '{' (trailing spaces allowed); an object whose keys are unique; "__metadata__" a
/// string -> string object; every other value an entry with "dtype" (a dtype of the spec),
/// "shape" (whole numbers) and "data_offsets" ([BEGIN, END], END >= BEGIN), each exactly once
/// (other fields are ignored, as the reference crate's serde does); END - BEGIN = the shape's
/// elements x the dtype's size (overflow-checked, whole bytes); and, sorted by offset, the
/// tensors cover the data section exactly: the first begins at 0, each where the previous ended,
/// the last at data_bytes. Throws SafetensorsError naming the file, the tensor, the value and the rule.
SafetensorsHeader parse_safetensors_header(std::string_view header, int64_t data_bytes, const std::string& path);

/// A safetensors file, opened and checked in full (parse_safetensors_header); data is read on
/// demand with pread, so a rank touches only the bytes of the elements it copies.
/// Usage: SafetensorsFile f(path); f.read_into(*f.find("w"), 0, n, buffer);
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);  ///< throws SafetensorsError
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  /// Every tensor, in the header's order.
  const std::vector<SafetensorsTensor>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  /// The entry `name`, or null.
  const SafetensorsTensor* find(const std::string& name) const;
  /// Copies elements [first, first + count) of `t` (whole-byte dtypes only) into `dst`, which holds
  /// count x element bytes. A range outside the tensor throws std::out_of_range; a file that ends
  /// early (it shrank after it was opened) or an I/O error throws SafetensorsReadError naming the
  /// file and the tensor ("changed while it was read").
  void read_into(const SafetensorsTensor& t, int64_t first, int64_t count, void* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t data_start_ = 0;  ///< 8 + N
  SafetensorsHeader header_;
};

/// One tensor to write: its header fields and its bytes (row-major, little-endian).
struct SafetensorsOut {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t bytes = 0;
};

/// Writes `tensors` (in the order given, the header streamed in linear time) to `path`
/// atomically, with `metadata` as the header's "__metadata__" (string values). Throws
/// FileWriteError when the write fails.
void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace odyssey
