// The documents file format (see documents_file.h): the writer behind `odyssey prepare`, private
// temporaries renamed at the end, and the reader that checks every field before a byte is trusted.
// defines: DocumentsFileWriter, DocumentsFile
#include "engine/train/documents_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "engine/util/files.h"
#include "engine/util/le_bytes.h"
#include "engine/util/publish_file.h"

namespace odyssey {

namespace {

// Memory: the writer buffers this many tokens (1 MiB) before a write; the reader checks the index
// and the tokens in chunks of this many entries (2 MiB of index, 1 MiB of tokens), so opening a
// file of any size costs a few MiB of host memory besides the index it keeps (8 bytes a document).
constexpr int64_t kWriteBufferTokens = int64_t{1} << 18;
constexpr int64_t kScanEntries = int64_t{1} << 18;
// Counts above this cannot describe a file (8 bytes an index entry): refused before any arithmetic.
constexpr uint64_t kMaxCount = uint64_t{1} << 60;

std::string name_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

FileWriteError write_error(const std::string& path, const std::string& what) {
  return FileWriteError(path + ": " + what + " (" + std::strerror(errno) + ")");
}

/// A private temporary `FOLDER/.NAME.XXXXXX<suffix>` beside `path`, open for writing.
int make_temporary(const std::string& path, const std::string& suffix, std::string* tmp) {
  // The name's first 128 bytes, whole UTF-8 characters: a name near the file system's 255 has no
  // room for the 15 around it.
  std::string name = name_of(path);
  size_t keep = std::min<size_t>(name.size(), 128);
  while (keep > 0 && keep < name.size() && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;
  std::string pattern = join_path(folder_of(path), "." + name.substr(0, keep) + ".XXXXXX" + suffix);
  const int fd = ::mkstemps(pattern.data(), static_cast<int>(suffix.size()));
  if (fd < 0) throw write_error(path, "cannot create a temporary file in " + folder_of(path));
  *tmp = pattern;
  return fd;
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw write_error(path, "write failed");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

/// Appends all of `from` (from its start) to `to`: copy_file_range (in the kernel, a reflink where
/// the file system has them), else read/write through a 1 MiB buffer.
void append_file(int from, int to, int64_t bytes, const std::string& path) {
  if (::lseek(from, 0, SEEK_SET) != 0) throw write_error(path, "cannot rewind the token temporary");
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::copy_file_range(from, nullptr, to, nullptr, static_cast<size_t>(bytes - done), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // not supported here (EXDEV, ENOSYS, EINVAL): copy by hand from `done`
    done += n;
  }
  std::vector<char> buffer(1 << 20);
  while (done < bytes) {
    const ssize_t n = ::pread(from, buffer.data(), std::min<int64_t>(bytes - done, buffer.size()), done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw write_error(path, "cannot read back the token temporary");
    write_all(to, buffer.data(), static_cast<size_t>(n), path);
    done += n;
  }
}

}  // namespace

// [section] writer -------------------------------------------------------------------------------

DocumentsFileWriter::DocumentsFileWriter(std::string path) : path_(std::move(path)) {
  tokens_fd_ = make_temporary(path_, ".tokens", &tokens_tmp_);
  buffer_.reserve(kWriteBufferTokens);
}

DocumentsFileWriter::~DocumentsFileWriter() {
  if (tokens_fd_ >= 0) ::close(tokens_fd_);
  if (!tokens_tmp_.empty()) ::unlink(tokens_tmp_.c_str());
  if (!committed_ && !file_tmp_.empty()) ::unlink(file_tmp_.c_str());
}

void DocumentsFileWriter::flush() {
  write_all(tokens_fd_, buffer_.data(), buffer_.size() * sizeof(uint32_t), tokens_tmp_);
  buffer_.clear();
}

void DocumentsFileWriter::add_document(const uint32_t* tokens, int64_t n) {
  if (n < 1) throw std::invalid_argument("documents file " + path_ + ": a document needs at least one token");
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<int64_t>(buffer_.size()) == kWriteBufferTokens) flush();
    buffer_.push_back(tokens[i]);
    max_token_ = std::max<int64_t>(max_token_, tokens[i]);
  }
  index_.push_back(index_.back() + n);
}

void DocumentsFileWriter::commit(int64_t vocab_size, bool replace) {
  if (committed_) throw std::logic_error("DocumentsFileWriter::commit called twice");
  if (index_.size() < 2) throw std::invalid_argument("documents file " + path_ + ": no document to write");
  if (vocab_size < 1 || vocab_size > (int64_t{1} << 32))
    throw std::invalid_argument("documents file " + path_ + ": vocab_size = " + std::to_string(vocab_size) +
                                " must be between 1 and 2^32 (uint32 tokens)");
  if (max_token_ >= vocab_size)
    throw std::invalid_argument("documents file " + path_ + ": token " + std::to_string(max_token_) +
                                " is >= vocab_size = " + std::to_string(vocab_size));
  flush();
  const int fd = make_temporary(path_, ".partial", &file_tmp_);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const mode_t mask = ::umask(0);  // the finished file gets the permissions a new file would
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) throw write_error(file_tmp_, "cannot set permissions");
  const int64_t documents = static_cast<int64_t>(index_.size()) - 1;
  char header[kDocumentsHeaderBytes] = {};
  std::memcpy(header, kDocumentsMagic, 8);
  store_le<uint32_t>(header + 8, kDocumentsVersion);
  store_le<uint32_t>(header + 12, kDocumentsTokenUint32);
  store_le<uint64_t>(header + 16, static_cast<uint64_t>(token_count()));
  store_le<uint64_t>(header + 24, static_cast<uint64_t>(documents));
  store_le<uint64_t>(header + 32, static_cast<uint64_t>(vocab_size));
  write_all(fd, header, sizeof header, file_tmp_);
  std::vector<uint64_t> chunk;
  for (size_t first = 0; first < index_.size(); first += kScanEntries) {
    const size_t end = std::min(index_.size(), first + kScanEntries);
    chunk.assign(index_.begin() + first, index_.begin() + end);
    write_all(fd, chunk.data(), chunk.size() * 8, file_tmp_);
  }
  append_file(tokens_fd_, fd, token_count() * 4, file_tmp_);
  if (::fsync(fd) != 0) throw write_error(file_tmp_, "fsync failed");
  if (!replace) {
    if (!publish_new_file(file_tmp_, path_))  // never over a file that appeared meanwhile
      throw FileWriteError(path_ +
                           ": a file appeared there while it was prepared; it is kept, and the prepared data is "
                           "not written (run again with --overwrite to replace it)");
    committed_ = true;
    return;
  }
  if (::rename(file_tmp_.c_str(), path_.c_str()) != 0)
    throw write_error(path_, "cannot rename " + file_tmp_ + " to it");
  committed_ = true;
  const int dir = ::open(folder_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // the rename itself survives a power cut
    ::fsync(dir);
    ::close(dir);
  }
}

// [section] reader -------------------------------------------------------------------------------

DocumentsFile::DocumentsFile(const std::string& path, int64_t model_vocab) : file_(path) {
  const std::string where = "documents file '" + path + "': ";
  auto refuse = [&](const std::string& why) { return DataError(where + why); };
  const int64_t have = file_.size();
  if (have < kDocumentsHeaderBytes)
    throw refuse("truncated: " + std::to_string(have) + " bytes, shorter than the " +
                 std::to_string(kDocumentsHeaderBytes) + "-byte header");
  char header[kDocumentsHeaderBytes];
  file_.read(0, sizeof header, header);
  if (std::memcmp(header, kDocumentsMagic, 8) != 0) {
    std::string shown;
    for (int i = 0; i < 8; ++i) {
      const auto c = static_cast<unsigned char>(header[i]);
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      if (c == '"' || c == '\\')
        shown += std::string("\\") + static_cast<char>(c);  // escaped, so the quoted value reads back
      else
        shown += c >= 0x20 && c < 0x7f ? std::string(1, static_cast<char>(c)) : std::string(hex);
    }
    throw refuse("magic = \"" + shown +
                 "\": not a documents file (those begin \"ODYDOCS\\x00\"; `odyssey prepare` "
                 "writes them; use dataset = \"tokens\" for llm.c .bin files)");
  }
  if (const uint32_t version = load_le<uint32_t>(header + 8); version != kDocumentsVersion)
    throw refuse("version = " + std::to_string(version) + ": unsupported (this build reads version " +
                 std::to_string(kDocumentsVersion) + ")");
  if (const uint32_t dtype = load_le<uint32_t>(header + 12); dtype != kDocumentsTokenUint32)
    throw refuse("token_dtype = " + std::to_string(dtype) + ": unsupported (version 1 has 1 = uint32 tokens only)");
  for (int64_t i = 40; i < kDocumentsHeaderBytes; ++i)
    if (header[i] != 0)
      throw refuse("reserved header byte " + std::to_string(i) + " = " +
                   std::to_string(static_cast<unsigned char>(header[i])) + ": bytes 40 to 63 must be zero");
  const uint64_t tokens = load_le<uint64_t>(header + 16), documents = load_le<uint64_t>(header + 24),
                 vocab = load_le<uint64_t>(header + 32);
  if (vocab < 1 || vocab > (uint64_t{1} << 32))
    throw refuse("vocab_size = " + std::to_string(vocab) + ": must be between 1 and 2^32 (uint32 tokens)");
  vocab_size_ = static_cast<int64_t>(vocab);
  if (model_vocab > 0 && vocab_size_ > model_vocab)
    throw refuse("vocab_size = " + std::to_string(vocab) +
                 " (the tokenizer's vocabulary) is larger than model.vocab_size = " + std::to_string(model_vocab) +
                 ": the file was tokenized for another model (prepare it with this "
                 "model's tokenizer, or set model.vocab_size to at least " +
                 std::to_string(vocab) + ")");
  if (documents < 1) throw refuse("document_count = 0: the file holds no document");
  if (tokens < documents)
    throw refuse("token_count = " + std::to_string(tokens) + " is below document_count = " + std::to_string(documents) +
                 ": every document holds at least one token");
  // Both counts against the size before any product is formed: no overflow, no allocation the
  // file cannot back (a flipped count bit would otherwise reserve exabytes for the index).
  const uint64_t body = static_cast<uint64_t>(have - kDocumentsHeaderBytes);
  if (documents >= kMaxCount || (documents + 1) * 8 > body)
    throw refuse("document_count = " + std::to_string(documents) + " needs a " +
                 (documents >= kMaxCount ? std::string("larger") : std::to_string((documents + 1) * 8)) +
                 "-byte index, and the file has " + std::to_string(body) + " bytes after the header");
  if (tokens >= kMaxCount || (documents + 1) * 8 + tokens * 4 != body) {
    const uint64_t want = tokens >= kMaxCount ? 0 : kDocumentsHeaderBytes + (documents + 1) * 8 + tokens * 4;
    throw refuse("file size = " + std::to_string(have) + " bytes, and the header's token_count = " +
                 std::to_string(tokens) + " and document_count = " + std::to_string(documents) + " make " +
                 (want ? std::to_string(want) + " bytes (" +
                             (want > static_cast<uint64_t>(have) ? "truncated" : "bytes follow the tokens") + ")"
                       : std::string("more bytes than any file")));
  }
  const int64_t T = static_cast<int64_t>(tokens), D = static_cast<int64_t>(documents);
  tokens_offset_ = kDocumentsHeaderBytes + (D + 1) * 8;
  index_.resize(static_cast<size_t>(D + 1));
  std::vector<uint64_t> chunk;
  for (int64_t first = 0; first <= D; first += kScanEntries) {
    const int64_t n = std::min(kScanEntries, D + 1 - first);
    chunk.resize(static_cast<size_t>(n));
    file_.read(kDocumentsHeaderBytes + 8 * first, 8 * n, chunk.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t d = first + i;
      const uint64_t v = chunk[i];
      const std::string entry = "document index[" + std::to_string(d) + "] = " + std::to_string(v);
      if (d == 0 && v != 0) throw refuse(entry + ": must be 0 (the first document starts at token 0)");
      if (d > 0 && v <= static_cast<uint64_t>(index_[d - 1]))
        throw refuse(entry + " is not greater than index[" + std::to_string(d - 1) +
                     "] = " + std::to_string(index_[d - 1]) + ": offsets must strictly increase (no empty document)");
      if (v > tokens) throw refuse(entry + " is past token_count = " + std::to_string(tokens));
      if (d == D && v != tokens)
        throw refuse(entry + ": the last entry must equal token_count = " + std::to_string(tokens) + " (the total)");
      index_[d] = static_cast<int64_t>(v);
    }
  }
  std::vector<uint32_t> scan;
  int64_t document = 0;
  for (int64_t first = 0; first < T; first += kScanEntries) {
    const int64_t n = std::min(kScanEntries, T - first);
    scan.resize(static_cast<size_t>(n));
    file_.read(tokens_offset_ + 4 * first, 4 * n, scan.data());
    for (int64_t i = 0; i < n; ++i) {
      if (scan[i] < vocab) continue;
      const int64_t at = first + i;
      while (index_[document + 1] <= at) ++document;
      throw refuse("token " + std::to_string(scan[i]) + " at position " + std::to_string(at) + " (document " +
                   std::to_string(document) + ", its token " + std::to_string(at - index_[document]) +
                   ") is >= vocab_size = " + std::to_string(vocab) + " of the header" +
                   (model_vocab > 0 ? " (model.vocab_size = " + std::to_string(model_vocab) + ")" : std::string()));
    }
  }
}

void DocumentsFile::read_tokens(int64_t first, int64_t n, int64_t* out) const {
  std::vector<uint32_t> raw(static_cast<size_t>(n));
  file_.read(tokens_offset_ + 4 * first, 4 * n, raw.data());
  for (int64_t i = 0; i < n; ++i) {
    if (raw[i] >= vocab_size_)  // every token was below it at open: the file was rewritten since
      throw DataChangedError("documents file '" + path() + "': token " + std::to_string(raw[i]) + " at position " +
                             std::to_string(first + i) + " is >= vocab_size = " + std::to_string(vocab_size_) +
                             ", and none was when the run began: the file changed during the run");
    out[i] = raw[i];
  }
}

std::shared_ptr<const DocumentLengthProfile> read_document_lengths(const std::string& path, int64_t model_vocab) {
  const DocumentsFile file(path, model_vocab);
  std::vector<int64_t> lengths(static_cast<size_t>(file.document_count()));
  for (int64_t d = 0; d < file.document_count(); ++d) lengths[static_cast<size_t>(d)] = file.document_length(d);
  return std::make_shared<const DocumentLengthProfile>(std::move(lengths));
}

}  // namespace odyssey
