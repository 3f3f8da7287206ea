// POSIX implementations of the file helpers (see files.h for why not std::filesystem).
// defines: make_dirs, path_exists, is_directory, rename_path, remove_tree, list_dir, same_path,
// join_path, AtomicFile, write_file_atomically, RunDirLock
#include "engine/util/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace odyssey {

bool make_dirs(const std::string& path, std::string* error) {
  if (path.empty() || is_directory(path)) return true;
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !make_dirs(path.substr(0, slash), error)) return false;
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    if (error) *error = "cannot create directory " + path + ": " + std::strerror(errno);
    return false;
  }
  if (!is_directory(path)) {  // EEXIST from a file (or a link to one) of that name
    if (error) *error = "cannot create directory " + path + ": a file of that name is there";
    return false;
  }
  return true;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool rename_path(const std::string& from, const std::string& to, std::string* error) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    if (error) *error = "cannot rename " + from + " to " + to + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    for (const auto& name : list_dir(path)) remove_tree(join_path(path, name));
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

bool same_path(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

}  // namespace odyssey

namespace odyssey {

namespace {
std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

// [section] AtomicFile ------------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FileWriteError(system_error("cannot create", tmp_));
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) throw FileWriteError("cannot write " + tmp_ + ": already committed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw FileWriteError(system_error("cannot write", tmp_) + (errno == ENOSPC ? " (disk full)" : ""));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw FileWriteError("cannot commit " + tmp_ + ": already committed");
  // Data on the disk before the name moves: a power loss after the rename must not leave a
  // renamed file whose blocks were never written.
  if (::fsync(fd_) != 0) throw FileWriteError(system_error("cannot flush", tmp_));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    throw FileWriteError(system_error("cannot close", tmp_));
  }
  std::string error;
  if (!rename_path(tmp_, path_, &error)) {
    ::unlink(tmp_.c_str());
    throw FileWriteError(error);
  }
  const int dir = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // the rename itself made durable; best effort (some file systems refuse)
    ::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

// [section] RunDirLock ------------------------------------------------------------------------------

std::string RunDirLock::lock_path(const std::string& dir) { return join_path(dir, ".odyssey.lock"); }

RunDirLock::RunDirLock(const std::string& dir) {
  const std::string path = lock_path(dir);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FileWriteError(system_error("cannot create the run lock", path));
  auto read_owner = [&] {
    std::string text(512, '\0');
    const ssize_t n = ::pread(fd_, text.data(), text.size(), 0);
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
    return text;
  };
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == ENOSYS || err == ENOLCK || err == EOPNOTSUPP || err == EINVAL) {
      // Some cluster file systems (Lustre mounted without flock, some FUSE) have no locks: run
      // unguarded rather than not at all, and say so.
      unguarded_ = path + ": this file system has no flock (" + std::strerror(err) +
                   "), so a second run into the directory is not prevented";
      return;
    }
    const std::string owner = read_owner();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw RunDirBusy("--out " + dir + " is in use by another run (" + (owner.empty() ? "owner unknown" : owner) +
                       "); wait for it to end, or write to another directory");
    errno = err;
    throw FileWriteError(system_error("cannot lock", path));
  }
  previous_owner_ = read_owner();  // non-empty: its process died without unlocking
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  char when[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm tm {};
  ::localtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  const std::string me = "pid " + std::to_string(::getpid()) + " on " + host + ", since " + when + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    ::close(fd_);
    fd_ = -1;
    throw FileWriteError(system_error("cannot write the run lock", path));
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  // Emptied before unlocking: a lock file with contents is one whose owner died holding it.
  if (::ftruncate(fd_, 0) != 0) {
  }
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace odyssey
