// A data file read with pread, never memory-mapped, and the two ways a data file fails: bad input
// (DataError) and a file that changed during the run (DataChangedError). Shared by every dataset
// that reads a file. defines: DataError, DataChangedError, DataFile
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace odyssey {

/// A data file that cannot be used: the message names the file and the problem. Bad input (exit 2).
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A data file that was valid when the run began and changed during it (it shrank, or holds a
/// token the open-time scan did not see): a runtime failure (exit 1), not bad input, and the run
/// still writes its trace and summary. The message names the file and what changed.
class DataChangedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A regular file open for reading. pread, not mmap: a file that shrinks under a mapping kills the
/// process with SIGBUS (no summary.json, a 0-byte trace), while a short read is an error the run
/// reports. Callers read bounded pieces (one sequence, one scan chunk), so memory never grows with
/// the file. Usage: DataFile f(path); f.read(offset, n, buffer);
class DataFile {
 public:
  /// Throws DataError when the path cannot be opened or is not a regular file (a FIFO would block).
  explicit DataFile(const std::string& path);
  ~DataFile();
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  int64_t size() const { return size_; }  ///< at open
  /// Bytes [offset, offset + n) into dst. The file ending early (it shrank since it was opened) or
  /// an I/O error throws DataChangedError (a runtime failure, exit 1), naming the file.
  void read(int64_t offset, int64_t n, void* dst) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace odyssey
