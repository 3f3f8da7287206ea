// safetensors read (mmap, every header field bounded before use) and write (atomic) — see
// safetensors.h. defines: SafetensorsTensor::numel, safetensors_element_bytes, SafetensorsFile,
// write_safetensors
#include "engine/util/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/util/files.h"
#include "engine/util/json_read.h"

namespace odyssey {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit (100 MB)
}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t safetensors_element_bytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},  {"I16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  auto fail = [&](const std::string& why) { return SafetensorsError("safetensors " + path_ + ": " + why); };
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw fail(std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw fail("not a regular file");
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ < 8) {
    ::close(fd);
    throw fail(std::to_string(map_bytes_) + " bytes: shorter than the 8-byte header length (truncated)");
  }
  void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) throw fail(std::string("cannot map (") + std::strerror(errno) + ")");
  map_ = static_cast<const std::byte*>(m);
  try {
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, map_, 8);  // little-endian, as every platform Odyssey runs on
    if (header_bytes > kMaxHeaderBytes || header_bytes > map_bytes_ - 8)
      throw fail("its header claims " + std::to_string(header_bytes) + " bytes but the file holds " +
                 std::to_string(map_bytes_ - 8) + " after the length (truncated or not safetensors)");
    data_start_ = 8 + static_cast<int64_t>(header_bytes);
    std::string parse_error;
    const auto header = parse_json(std::string_view(reinterpret_cast<const char*>(map_) + 8, header_bytes), &parse_error);
    if (!header || !header->is_object()) throw fail("its header is not a JSON object (" + parse_error + ")");
    const int64_t data_bytes = static_cast<int64_t>(map_bytes_) - data_start_;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const auto& [name, entry] : header->items()) {
      if (name == "__metadata__") continue;
      auto bad = [&](const std::string& why) { return fail("tensor '" + name + "': " + why); };
      if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
        throw bad("needs \"dtype\", \"shape\" and \"data_offsets\"");
      SafetensorsTensor t;
      t.name = name;
      if (!entry.at("dtype").is_string()) throw bad("\"dtype\" must be a string");
      t.dtype = entry.at("dtype").get<std::string>();
      const int64_t element = safetensors_element_bytes(t.dtype);
      if (element == 0) throw bad("unknown dtype \"" + t.dtype + "\"");
      const Json& shape = entry.at("shape");
      if (!shape.is_array() || shape.size() > 8) throw bad("\"shape\" must be an array of at most 8 sizes");
      int64_t numel = 1;
      for (const Json& d : shape) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) throw bad("\"shape\" = " + json_value_text(shape) + " holds a size that is not a whole number up to 2^40");
        t.shape.push_back(d.get<int64_t>());
        numel = t.shape.back() == 0 ? 0 : (numel > (int64_t{1} << 42) / std::max<int64_t>(1, t.shape.back()) ? -1 : numel * t.shape.back());
        if (numel < 0) throw bad("\"shape\" = " + json_value_text(shape) + " is larger than any file");
      }
      const Json& offsets = entry.at("data_offsets");
      if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
        throw bad("\"data_offsets\" must be two whole numbers");
      const auto begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
      if (end < begin || end > static_cast<uint64_t>(data_bytes))
        throw bad("\"data_offsets\" = " + json_value_text(offsets) + " lies outside the " + std::to_string(data_bytes) +
                  " data bytes (the file is truncated or corrupt)");
      t.begin = static_cast<int64_t>(begin);
      t.bytes = static_cast<int64_t>(end - begin);
      if (t.bytes != numel * element)
        throw bad("holds " + std::to_string(t.bytes) + " bytes but its shape " + json_value_text(shape) + " of " + t.dtype +
                  " needs " + std::to_string(numel * element));
      if (t.bytes > 0) ranges.emplace_back(t.begin, t.begin + t.bytes);
      tensors_.emplace(name, std::move(t));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second) throw fail("two tensors' data overlap (a corrupt header)");
  } catch (...) {
    ::munmap(const_cast<std::byte*>(map_), map_bytes_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::byte*>(map_), map_bytes_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const std::byte* SafetensorsFile::data(const SafetensorsTensor& t) const { return map_ + data_start_ + t.begin; }

void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  int64_t offset = 0;
  for (const SafetensorsOut& t : tensors) {
    header[t.name] = Json{{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", Json::array({offset, offset + t.bytes})}};
    offset += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t length = text.size();
  AtomicFile file(path);
  file.write(&length, sizeof length);
  file.write(text);
  for (const SafetensorsOut& t : tensors) file.write(t.data, static_cast<size_t>(t.bytes));
  file.commit();
}

}  // namespace odyssey
