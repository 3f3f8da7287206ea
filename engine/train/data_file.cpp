// DataFile: open-time checks (a regular file, opened without blocking) and bounded pread reads that
// name the file when it shrank or failed (see data_file.h). defines: DataFile
#include "engine/train/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace odyssey {

DataFile::DataFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever and deaf to
  // Ctrl-C; it is refused below like every other file that is not a regular one.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw DataError("data file '" + path + "': cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw DataError("data file '" + path +
                    "': not a regular file (a FIFO, socket, device or directory); "
                    "training.dataset_path must name a file");
  }
  size_ = static_cast<int64_t>(st.st_size);
}

DataFile::~DataFile() { ::close(fd_); }

void DataFile::read(int64_t offset, int64_t n, void* dst) const {
  int64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, static_cast<char*>(dst) + done, static_cast<size_t>(n - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw DataChangedError("data file '" + path_ + "': read failed at byte " + std::to_string(offset + done) + " (" +
                             std::strerror(errno) + ")");
    if (got == 0) {
      struct stat st {};
      const std::string now = ::fstat(fd_, &st) == 0 ? std::to_string(st.st_size) : std::string("fewer");
      throw DataChangedError("data file '" + path_ + "' changed size during the run: it holds " + now +
                             " bytes now and held " + std::to_string(size_) + " when the run began (bytes [" +
                             std::to_string(offset) + ", " + std::to_string(offset + n) + ") were wanted)");
    }
    done += got;
  }
}

}  // namespace odyssey
