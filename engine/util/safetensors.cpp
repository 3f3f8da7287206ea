// safetensors read (the whole format checked on open by a SAX parse linear in the header's size;
// data read with pread) and write (streamed header, atomic file) — see safetensors.h.
// defines: safetensors_element_bits, safetensors_element_bytes, safetensors_header_length,
// parse_safetensors_header, SafetensorsFile, write_safetensors
//
// [SECTION] messages  [SECTION] header SAX handler  [SECTION] coverage  [SECTION] file  [SECTION] write
#include "engine/util/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/util/files.h"
#include "engine/util/json.h"

namespace odyssey {

namespace {

// [SECTION] messages ------------------------------------------------------------------------------

/// Text from a hostile file, fit for a one-line message: control bytes (and, when `ascii`, every
/// byte above 0x7F) as \xNN, at most `shown` bytes of it (a name may be megabytes long).
std::string printable(std::string_view text, bool ascii = false, size_t shown = 120) {
  const size_t kShown = shown;
  std::string out;
  for (size_t i = 0; i < text.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7F || (ascii && c >= 0x80)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > kShown) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string quote_name(std::string_view text) { return "\"" + printable(text) + "\""; }

// [SECTION] header SAX handler --------------------------------------------------------------------

constexpr int kMaxIgnoredDepth = 64;  // nesting allowed inside a field the format does not define

/// Builds the tensor table straight from the parser's events: no document tree, each name looked
/// up once in a hash map, so the parse is linear in the header's size. Throws SafetensorsError
/// at the first violation (nlohmann's parser unwinds cleanly).
class HeaderHandler {
 public:
  using Json = nlohmann::json;
  HeaderHandler(const std::string& path, int64_t data_bytes, SafetensorsHeader& out)
      : path_(path), data_bytes_(data_bytes), out_(out) {}

  bool null() { return scalar("null"); }
  bool boolean(bool v) { return scalar(v ? "true" : "false"); }
  bool number_integer(Json::number_integer_t v) { return scalar(std::to_string(v), Number::Negative); }
  bool number_unsigned(Json::number_unsigned_t v) { return scalar(std::to_string(v), Number::Whole, v); }
  bool number_float(Json::number_float_t, const Json::string_t& text) { return scalar(text, Number::Fraction); }
  bool string(Json::string_t& v) {
    if (mode_ == Mode::Entry && field_ == Field::Dtype) {
      dtype_ = v;
      if (safetensors_element_bits(v) == 0)
        throw fail_tensor("\"dtype\" = " + quote_name(v) +
                          ": not a dtype of the safetensors specification (BOOL, U8, I8, "
                          "I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, C64, F4, F6_E2M3, F6_E3M2, F8_E5M2, "
                          "F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ)");
      return true;
    }
    if (mode_ == Mode::Metadata) {
      out_.metadata[meta_key_] = std::move(v);
      return true;
    }
    return scalar("\"" + printable(v) + "\"");
  }
  bool binary(Json::binary_t&) { return scalar("(binary)"); }

  bool start_object(std::size_t) {
    switch (mode_) {
      case Mode::Start:
        mode_ = Mode::Top;
        return true;
      case Mode::Top:
        if (name_ == "__metadata__") {
          mode_ = Mode::Metadata;
        } else {
          mode_ = Mode::Entry;
          have_ = 0;
          dtype_.clear();
          shape_.clear();
          offsets_.clear();
        }
        return true;
      default:
        return container("{...}");
    }
  }
  bool start_array(std::size_t) {
    if (mode_ == Mode::Entry && field_ == Field::Shape) {
      mode_ = Mode::Shape;
      return true;
    }
    if (mode_ == Mode::Entry && field_ == Field::Offsets) {
      mode_ = Mode::Offsets;
      return true;
    }
    if (mode_ == Mode::Start) throw fail("the header must be a JSON object, not an array");
    return container("[...]");
  }
  bool end_array() {
    if (mode_ == Mode::Skip) return leave_ignored();
    if (mode_ == Mode::Offsets && offsets_.size() != 2)
      throw fail_tensor("\"data_offsets\" holds " + std::to_string(offsets_.size()) +
                        " numbers: it must be [BEGIN, END]");
    mode_ = Mode::Entry;
    return true;
  }
  bool end_object() {
    switch (mode_) {
      case Mode::Skip:
        return leave_ignored();
      case Mode::Metadata:
        mode_ = Mode::Top;
        return true;
      case Mode::Entry:
        finish_entry();
        mode_ = Mode::Top;
        return true;
      default:
        mode_ = Mode::Done;
        return true;  // the top object
    }
  }
  bool key(Json::string_t& k) {
    switch (mode_) {
      case Mode::Top:
        if (k == "__metadata__") {
          if (seen_metadata_) throw fail("the key \"__metadata__\" appears twice (duplicate keys are not allowed)");
          seen_metadata_ = true;
        } else if (!out_.index.emplace(k, out_.tensors.size()).second) {  // the position finish_entry gives it
          throw fail("tensor " + quote_name(k) + " appears twice in the header (duplicate keys are not allowed)");
        }
        name_ = std::move(k);
        return true;
      case Mode::Metadata:
        if (out_.metadata.count(k))
          throw fail("\"__metadata__\" holds the key " + quote_name(k) + " twice (duplicate keys are not allowed)");
        meta_key_ = std::move(k);
        out_.metadata[meta_key_];  // present from now on: a second one is caught above
        return true;
      case Mode::Entry: {
        field_ = k == "dtype"          ? Field::Dtype
                 : k == "shape"        ? Field::Shape
                 : k == "data_offsets" ? Field::Offsets
                                       : Field::Other;
        const int bit = static_cast<int>(field_);
        if (field_ != Field::Other) {
          if (have_ & bit) throw fail_tensor("the field " + quote_name(k) + " appears twice");
          have_ |= bit;
        }
        return true;
      }
      default:
        return true;  // inside an ignored field
    }
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    std::string what =
        e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error ..."
    if (const size_t colon = what.find(": "); what.rfind("[json.exception", 0) == 0 && colon != std::string::npos)
      what = what.substr(colon + 2);
    throw fail("the header is not valid JSON (UTF-8) at byte " + std::to_string(position) + ": " +
               printable(what, true, 300));
  }

  bool done() const { return mode_ == Mode::Done; }

 private:
  enum class Mode { Start, Top, Metadata, Entry, Shape, Offsets, Skip, Done };
  enum class Field { Dtype = 1, Shape = 2, Offsets = 4, Other = 8 };
  enum class Number { None, Negative, Whole, Fraction };

  SafetensorsError fail(const std::string& why) const { return SafetensorsError("safetensors " + path_ + ": " + why); }
  SafetensorsError fail_tensor(const std::string& why) const {
    return fail("tensor " + quote_name(name_) + ": " + why);
  }

  /// A scalar value at the parser's position; `text` as written, `number` its kind.
  bool scalar(const std::string& text, Number number = Number::None, uint64_t whole = 0) {
    switch (mode_) {
      case Mode::Start:
        throw fail("the header must be a JSON object, not " + text);
      case Mode::Top:
        if (name_ == "__metadata__") throw fail("\"__metadata__\" = " + text + ": must be an object of strings");
        throw fail("tensor " + quote_name(name_) + " = " + text +
                   ": must be an object with \"dtype\", \"shape\" and \"data_offsets\"");
      case Mode::Metadata:
        throw fail("\"__metadata__\" key " + quote_name(meta_key_) + " = " + text + ": values must be strings");
      case Mode::Entry:
        if (field_ == Field::Other) return true;  // a field the format does not define: ignored
        throw fail_tensor(
            std::string(field_ == Field::Dtype   ? "\"dtype\" = " + text + ": must be a string naming a dtype"
                        : field_ == Field::Shape ? "\"shape\" = " + text + ": must be an array of whole numbers"
                                                 : "\"data_offsets\" = " + text + ": must be [BEGIN, END]"));
      case Mode::Shape:
      case Mode::Offsets: {
        const char* what = mode_ == Mode::Shape ? "\"shape\"" : "\"data_offsets\"";
        if (number != Number::Whole)
          throw fail_tensor(std::string(what) + " holds " + text + ": must hold whole numbers of at least 0");
        if (whole > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          throw fail_tensor(std::string(what) + " holds " + text + ": larger than any file or tensor (2^63 - 1)");
        if (mode_ == Mode::Shape) {
          shape_.push_back(static_cast<int64_t>(whole));
        } else {
          if (offsets_.size() == 2)
            throw fail_tensor("\"data_offsets\" holds more than 2 numbers: it must be [BEGIN, END]");
          offsets_.push_back(static_cast<int64_t>(whole));
        }
        return true;
      }
      default:
        return true;  // Skip
    }
  }

  /// An object or array where a scalar belongs, or inside an ignored field.
  bool container(const std::string& text) {
    if (mode_ == Mode::Entry && field_ == Field::Other) {
      mode_ = Mode::Skip;
      skip_depth_ = 1;
      return true;
    }
    if (mode_ == Mode::Skip) {
      if (++skip_depth_ > kMaxIgnoredDepth)
        throw fail_tensor("a field nests more than " + std::to_string(kMaxIgnoredDepth) +
                          " levels deep (no safetensors header does)");
      return true;
    }
    return scalar(text);  // a container where the format wants a scalar: refused there
  }
  bool leave_ignored() {
    if (--skip_depth_ == 0) mode_ = Mode::Entry;
    return true;
  }

  /// The end of a tensor's entry: its fields complete and consistent.
  void finish_entry() {
    for (const auto& [bit, field] :
         {std::pair{Field::Dtype, "dtype"}, {Field::Shape, "shape"}, {Field::Offsets, "data_offsets"}})
      if (!(have_ & static_cast<int>(bit)))
        throw fail_tensor(std::string("has no \"") + field +
                          "\" (every entry needs \"dtype\", \"shape\" and \"data_offsets\")");
    SafetensorsTensor t;
    t.name = name_;
    t.dtype = dtype_;
    t.shape = shape_;
    const int64_t begin = offsets_[0], end = offsets_[1];
    const std::string offsets_text = "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
    if (end < begin) throw fail_tensor("\"data_offsets\" = " + offsets_text + ": END must not be below BEGIN");
    if (end > data_bytes_)
      throw fail_tensor("\"data_offsets\" = " + offsets_text + " reaches past the " + std::to_string(data_bytes_) +
                        " bytes of the data section (the file is truncated or the header corrupt)");
    // Elements and bytes, every product checked for overflow (the reference crate's checked_mul).
    uint64_t elements = 1;
    for (int64_t d : shape_)
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements) ||
          elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw fail_tensor("\"shape\" = " + shape_text() + ": its element count overflows 64 bits");
    uint64_t bits = 0;
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(safetensors_element_bits(dtype_)), &bits))
      throw fail_tensor("\"shape\" = " + shape_text() + " of " + dtype_ + ": its size in bits overflows 64 bits");
    if (bits % 8 != 0)
      throw fail_tensor("\"shape\" = " + shape_text() + " of " + dtype_ + " is " + std::to_string(bits) +
                        " bits: not a whole number of bytes");
    t.elements = static_cast<int64_t>(elements);
    t.begin = begin;
    t.bytes = end - begin;
    if (static_cast<uint64_t>(t.bytes) != bits / 8)
      throw fail_tensor("\"data_offsets\" = " + offsets_text + " span " + std::to_string(t.bytes) +
                        " bytes but its shape " + shape_text() + " of " + dtype_ + " needs " +
                        std::to_string(bits / 8));
    out_.tensors.push_back(std::move(t));
  }
  std::string shape_text() const {
    std::string s = "[";
    for (size_t i = 0; i < shape_.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
    return s + (shape_.size() > 16 ? ", ... (" + std::to_string(shape_.size()) + " sizes)]" : "]");
  }

  const std::string& path_;
  const int64_t data_bytes_;
  SafetensorsHeader& out_;
  Mode mode_ = Mode::Start;
  Field field_ = Field::Other;
  std::string name_, meta_key_, dtype_;
  std::vector<int64_t> shape_, offsets_;
  int have_ = 0;
  int skip_depth_ = 0;
  bool seen_metadata_ = false;
};

// [SECTION] coverage ------------------------------------------------------------------------------

/// Sorted by offset, the tensors tile the data section: no hole, no overlap, nothing after the
/// last (the format's rule against polyglot files).
void check_coverage(const SafetensorsHeader& h, int64_t data_bytes, const std::string& path) {
  std::vector<size_t> order(h.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const SafetensorsTensor &x = h.tensors[a], &y = h.tensors[b];
    return x.begin != y.begin ? x.begin < y.begin : x.bytes < y.bytes;
  });
  auto fail = [&](const std::string& why) { return SafetensorsError("safetensors " + path + ": " + why); };
  int64_t at = 0;
  const SafetensorsTensor* previous = nullptr;
  for (size_t i : order) {
    const SafetensorsTensor& t = h.tensors[i];
    const std::string range = "[" + std::to_string(t.begin) + ", " + std::to_string(t.begin + t.bytes) + ")";
    if (t.begin > at)
      throw fail("tensor " + quote_name(t.name) + " begins at data byte " + std::to_string(t.begin) + " but " +
                 (previous ? "tensor " + quote_name(previous->name) + " ends at " + std::to_string(at)
                           : std::string("the data section begins at 0")) +
                 ": bytes [" + std::to_string(at) + ", " + std::to_string(t.begin) +
                 ") belong to no tensor (the data must be covered without holes)");
    if (t.begin < at)
      throw fail("tensor " + quote_name(t.name) + " " + range + " overlaps tensor " + quote_name(previous->name) +
                 ", which ends at " + std::to_string(at) + " (tensors must not overlap)");
    at = t.begin + t.bytes;
    previous = &t;
  }
  if (at != data_bytes)
    throw fail("the tensors cover data bytes [0, " + std::to_string(at) + ") of " + std::to_string(data_bytes) +
               ": the last " + std::to_string(data_bytes - at) +
               " bytes of the file belong to no tensor (nothing may follow the last tensor)");
}

}  // namespace

int64_t safetensors_element_bits(std::string_view dtype) {
  static const std::unordered_map<std::string_view, int64_t> bits = {
      {"BOOL", 8},    {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},     {"U8", 8},          {"I8", 8},
      {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
      {"U16", 16},    {"F16", 16},    {"BF16", 16},   {"I32", 32},        {"U32", 32},        {"F32", 32},
      {"C64", 64},    {"F64", 64},    {"I64", 64},    {"U64", 64}};
  auto it = bits.find(dtype);
  return it == bits.end() ? 0 : it->second;
}

int64_t safetensors_element_bytes(std::string_view dtype) {
  const int64_t bits = safetensors_element_bits(dtype);
  return bits % 8 == 0 ? bits / 8 : 0;
}

int64_t safetensors_header_length(const unsigned char first8[8], int64_t file_bytes, const std::string& path) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first8[i];  // little-endian, whatever the host
  if (n > static_cast<uint64_t>(kSafetensorsMaxHeaderBytes))
    throw SafetensorsError("safetensors " + path + ": the header length field says " + std::to_string(n) +
                           " bytes, more than the format's limit of " + std::to_string(kSafetensorsMaxHeaderBytes) +
                           " (not a safetensors file, or a corrupt one)");
  if (static_cast<int64_t>(n) > file_bytes - 8)
    throw SafetensorsError("safetensors " + path + ": the header length field says " + std::to_string(n) +
                           " bytes but the file holds " + std::to_string(file_bytes - 8) +
                           " after it (truncated or not safetensors)");
  return static_cast<int64_t>(n);
}

SafetensorsHeader parse_safetensors_header(std::string_view header, int64_t data_bytes, const std::string& path) {
  auto fail = [&](const std::string& why) { return SafetensorsError("safetensors " + path + ": " + why); };
  // The spec: the header MUST begin with '{' and MAY be padded at the end with spaces (0x20).
  size_t end = header.size();
  while (end > 0 && header[end - 1] == ' ') --end;
  const std::string_view json = header.substr(0, end);
  if (json.empty() || json.front() != '{')
    throw fail("the header must begin with '{' (a JSON object)" +
               (json.empty() ? std::string(" and is empty") : ", not the byte " + printable(json.substr(0, 1), true)));
  if (json.back() != '}')
    throw fail("the header must end with the object's '}' followed only by spaces (0x20), not the byte " +
               printable(json.substr(json.size() - 1), true));
  SafetensorsHeader out;
  HeaderHandler handler(path, data_bytes, out);
  nlohmann::json::sax_parse(json.begin(), json.end(), &handler, nlohmann::json::input_format_t::json, true);
  if (!handler.done()) throw fail("the header is not one complete JSON object");
  check_coverage(out, data_bytes, path);
  return out;
}

// [SECTION] file ----------------------------------------------------------------------------------

namespace {

/// pread until `bytes` are in or the file ends; the bytes read.
int64_t pread_full(int fd, void* dst, int64_t bytes, int64_t offset, int* error) {
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd, static_cast<char*>(dst) + done, static_cast<size_t>(bytes - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      *error = errno;
      return done;
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

}  // namespace

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  auto fail = [&](const std::string& why) { return SafetensorsError("safetensors " + path_ + ": " + why); };
  // O_NONBLOCK: a FIFO opened for reading would wait for a writer forever; it is refused below.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw fail(std::string("cannot open (") + std::strerror(errno) + ")");
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw fail(std::string("cannot stat (") + std::strerror(errno) + ")");
    if (!S_ISREG(st.st_mode)) throw fail("not a regular file (a directory, FIFO, socket or device)");
    const int64_t size = st.st_size;
    if (size < 8) throw fail(std::to_string(size) + " bytes: shorter than the 8-byte header length (truncated)");
    unsigned char first8[8];
    int error = 0;
    auto changed = [&](int64_t wanted, int64_t got) {
      return SafetensorsReadError(
          "safetensors " + path_ + ": the file changed while it was read (" +
          (error ? std::string(std::strerror(error)) : "it ended at byte " + std::to_string(got)) + ", " +
          std::to_string(wanted) + " bytes expected)");
    };
    if (const int64_t got = pread_full(fd_, first8, 8, 0, &error); got != 8) throw changed(8, got);
    const int64_t n = safetensors_header_length(first8, size, path_);
    std::string header(static_cast<size_t>(n), '\0');
    if (const int64_t got = pread_full(fd_, header.data(), n, 8, &error); got != n) throw changed(8 + n, 8 + got);
    data_start_ = 8 + n;
    header_ = parse_safetensors_header(header, size - data_start_, path_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = header_.index.find(name);
  return it == header_.index.end() ? nullptr : &header_.tensors[it->second];
}

void SafetensorsFile::read_into(const SafetensorsTensor& t, int64_t first, int64_t count, void* dst) const {
  const int64_t element = safetensors_element_bytes(t.dtype);
  if (element == 0 || first < 0 || count < 0 || first > t.elements || count > t.elements - first)
    throw std::out_of_range("safetensors " + path_ + ": tensor " + quote_name(t.name) + " (" +
                            std::to_string(t.elements) + " elements of " + t.dtype + "): elements [" +
                            std::to_string(first) + ", +" + std::to_string(count) + ") cannot be read");
  const int64_t offset = data_start_ + t.begin + first * element, bytes = count * element;
  int error = 0;
  const int64_t got = pread_full(fd_, dst, bytes, offset, &error);
  if (got != bytes) {
    struct stat st {};
    const std::string now = ::fstat(fd_, &st) == 0 ? std::to_string(st.st_size) : std::string("fewer");
    throw SafetensorsReadError("safetensors " + path_ + ": tensor " + quote_name(t.name) +
                               ": the file changed while it was read (" +
                               (error ? std::string(std::strerror(error)) + " at byte " + std::to_string(offset + got)
                                      : "it holds " + now + " bytes now; its header places this data up to byte " +
                                            std::to_string(offset + bytes)) +
                               ")");
  }
}

// [SECTION] write ---------------------------------------------------------------------------------

void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::string text;
  JsonWriter w(text);
  w.begin_object();
  if (!metadata.empty()) {
    w.key("__metadata__").begin_object();
    for (const auto& [k, v] : metadata) w.key(k).value(v);
    w.end_object();
  }
  int64_t offset = 0;
  for (const SafetensorsOut& t : tensors) {
    w.key(t.name).begin_object().key("dtype").value(t.dtype).key("shape").begin_array();
    for (int64_t d : t.shape) w.value(d);
    w.end_array().key("data_offsets").begin_array().value(offset).value(offset + t.bytes).end_array().end_object();
    offset += t.bytes;
  }
  w.end_object();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t length = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(length >> (8 * i));
  AtomicFile file(path);
  file.write(le, sizeof le);
  file.write(text);
  for (const SafetensorsOut& t : tensors) file.write(t.data, static_cast<size_t>(t.bytes));
  file.commit();
}

}  // namespace odyssey
