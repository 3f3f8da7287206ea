// POSIX implementations of the file helpers (see files.h for why not std::filesystem).
// defines: make_dirs, path_exists, is_directory, rename_path, remove_tree, list_dir, same_path,
// resolve_path, join_path, folder_of, clean_path, read_file_bounded, AtomicFile, write_file_atomically, RunDirLock
#include "engine/util/files.h"
#include "engine/util/publish_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace odyssey {

bool make_dirs(const std::string& path, std::string* error, int* error_number) {
  auto fail = [&](const std::string& why, int err) {
    if (error) *error = why;
    if (error_number) *error_number = err;
    return false;
  };
  if (path.empty() || is_directory(path)) return true;
  if (path.size() >= PATH_MAX)
    return fail("cannot create directory " + path.substr(0, 64) + "... (" + std::to_string(path.size()) +
                    " characters): longer than the system's path limit of " + std::to_string(PATH_MAX - 1),
                ENAMETOOLONG);
  // Each prefix ending before a slash, then the whole path: created in order, never recursively.
  std::vector<std::string> created;
  auto undo = [&] {  // what this call made, deepest first (each is empty: nothing else is inside)
    for (auto it = created.rbegin(); it != created.rend(); ++it) ::rmdir(it->c_str());
  };
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = end == std::string::npos ? path : path.substr(0, end);
    if (!prefix.empty() && prefix.back() != '/' && !is_directory(prefix)) {
      if (::mkdir(prefix.c_str(), 0755) == 0) {
        created.push_back(prefix);
      } else if (errno != EEXIST) {
        const int err = errno;
        undo();
        return fail("cannot create directory " + prefix + ": " + std::strerror(err), err);
      }
      if (!is_directory(prefix)) {  // EEXIST from a file (or a link to one) of that name
        undo();
        return fail("cannot create directory " + prefix + ": a file of that name is there", ENOTDIR);
      }
    }
    if (end == std::string::npos) break;
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

bool is_character_device(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

bool is_regular_file(std::FILE* file) {
  struct stat st {};
  return ::fstat(::fileno(file), &st) == 0 && S_ISREG(st.st_mode);
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
  struct stat sa {
  }, sb{};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

namespace {

/// resolve_path's walk: realpath of the longest existing prefix, the rest appended; with
/// `follow_dangling`, a link that leads nowhere yet is followed to where it leads (nullopt when
/// that takes more than 40 links, as the kernel stops: a loop).
std::optional<std::string> resolve_prefix(const std::string& path, bool follow_dangling) {
  std::string head = clean_path(path.empty() ? std::string(".") : path), tail;
  int links_followed = 0;
  for (;;) {
    char resolved[PATH_MAX];
    if (::realpath(head.c_str(), resolved) != nullptr) return tail.empty() ? resolved : join_path(resolved, tail);
    char target[PATH_MAX];
    struct stat st {};
    if (follow_dangling && ::lstat(head.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      if (++links_followed > 40) return std::nullopt;
      const ssize_t n = ::readlink(head.c_str(), target, sizeof target - 1);
      if (n > 0) {
        const std::string to(target, static_cast<size_t>(n));
        head = clean_path(to.front() == '/' ? to : join_path(folder_of(head), to));
        continue;
      }
    }
    const size_t slash = head.find_last_of('/');
    const std::string name = slash == std::string::npos ? head : head.substr(slash + 1);
    tail = tail.empty() ? name : join_path(name, tail);
    if (slash == std::string::npos)
      head = ".";
    else if (slash == 0)
      head = "/";
    else
      head = head.substr(0, slash);
  }
}

}  // namespace

std::string resolve_path(const std::string& path) {
  // A link that leads nowhere yet names the file a write through it makes (a shell's `>`); a loop
  // of links names none, and stays as written.
  if (std::optional<std::string> followed = resolve_prefix(path, /*follow_dangling=*/true)) return *followed;
  return *resolve_prefix(path, /*follow_dangling=*/false);
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string clean_path(const std::string& path) {
  std::string out;
  for (char c : path)
    if (!(c == '/' && !out.empty() && out.back() == '/')) out.push_back(c);
  for (;;) {
    if (out.size() > 1 && out.back() == '/') {
      out.pop_back();
    } else if (out.size() >= 2 && out.compare(out.size() - 2, 2, "/.") == 0) {
      out.resize(out.size() - 2);
      if (out.empty()) out = "/";
    } else {
      break;
    }
  }
  return out;
}

int open_regular_file(const std::string& path, const std::string& what, int64_t* size) {
  auto refuse = [&](const std::string& why) { return FileReadError(what + " " + path + ": " + why); };
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer, forever and deaf to signals;
  // it is refused below like every other file that is not a regular one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw refuse(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0)
    why = std::string("cannot stat: ") + std::strerror(errno);
  else if (S_ISDIR(st.st_mode))
    why = "is a directory, not a " + what + " file";
  else if (!S_ISREG(st.st_mode))
    why = "is not a regular file (a FIFO, socket or device); it must be a file";
  if (!why.empty()) {
    ::close(fd);
    throw refuse(why);
  }
  if (size) *size = static_cast<int64_t>(st.st_size);
  return fd;
}

std::string read_file_bounded(const std::string& path, int64_t max_bytes, const std::string& what) {
  auto refuse = [&](const std::string& why) { return FileReadError(what + " " + path + ": " + why); };
  int64_t size = 0;
  const int fd = open_regular_file(path, what, &size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (size > max_bytes)
    throw refuse("is " + std::to_string(size) + " bytes; a " + what + " is at most " + std::to_string(max_bytes) +
                 " bytes");
  std::string text(static_cast<size_t>(size) + 1, '\0');  // one byte more: a file that grew is seen
  size_t have = 0;
  for (;;) {
    if (have == text.size()) {
      if (static_cast<int64_t>(text.size()) > max_bytes)
        throw refuse("grew past " + std::to_string(max_bytes) + " bytes while it was read");
      text.resize(std::min<size_t>(text.size() * 2, static_cast<size_t>(max_bytes) + 1));
    }
    const ssize_t n = ::read(fd, text.data() + have, text.size() - have);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) throw refuse(std::string("cannot read (") + std::strerror(errno) + ")");
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  text.resize(have);
  return text;
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

/// An output file opened without blocking (O_NONBLOCK), refused when it is a FIFO or socket: one
/// without a reader fails the open (ENXIO), one with a reader would take the run's bytes. -1 with
/// errno set where the open fails otherwise.
int open_output_fd(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC, 0666);  // less the umask, as fopen
  struct stat st {};
  const bool planted =
      fd < 0 ? errno == ENXIO : ::fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
  if (planted) {
    if (fd >= 0) ::close(fd);
    throw FileWriteError(path + " is a FIFO or a socket, where Odyssey writes a file of its own: remove it");
  }
  if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // a device written through blocks as usual
  return fd;
}
}  // namespace

std::FILE* open_output_stream(const std::string& path, const char* mode) {
  const std::string m = mode;
  const int flags = m == "ab" ? O_WRONLY | O_CREAT | O_APPEND : m == "r+b" ? O_RDWR : O_WRONLY | O_CREAT | O_TRUNC;
  if (m != "ab" && m != "r+b" && m != "wb") throw std::logic_error("open_output_stream: mode " + m);
  const int fd = open_output_fd(path, flags);
  if (fd < 0) return nullptr;
  std::FILE* file = ::fdopen(fd, mode);
  if (file == nullptr) {
    const int err = errno;
    ::close(fd);
    errno = err;
  }
  return file;
}

// [section] AtomicFile ------------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(temporary_path(path_)) {
  // The temporary is this writer's own name: whatever is found there (a killed writer's leftover,
  // a link, a FIFO) is removed and the file made afresh, never written through, so a link there
  // cannot send the bytes into its target (which the rename would then name). Only a link to a
  // character device (/dev/null, /dev/full) is written through: it holds no file to overwrite.
  struct stat found {};
  const bool device_link = ::lstat(tmp_.c_str(), &found) == 0 && S_ISLNK(found.st_mode) && is_character_device(tmp_);
  if (!device_link) ::unlink(tmp_.c_str());  // ENOENT when none; a directory stays, and the open names it
  fd_ = open_output_fd(tmp_, device_link ? O_WRONLY | O_TRUNC : O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW);
  if (fd_ < 0) throw FileWriteError(system_error("cannot create", tmp_));
  // A file replaced keeps its permissions (a preset kept private stays private).
  struct stat target {
  }, written{};
  if (::stat(path_.c_str(), &target) == 0 && S_ISREG(target.st_mode) && ::fstat(fd_, &written) == 0 &&
      S_ISREG(written.st_mode))
    ::fchmod(fd_, target.st_mode & 07777);
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
    if (n <= 0)
      throw FileWriteError(system_error("cannot write", tmp_) +
                           (errno == ENOSPC  ? " (disk full)"
                            : errno == EFBIG ? " (the file size limit of this process: ulimit -f)"
                                             : ""));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::flush_and_close() {
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
}

void AtomicFile::commit() {
  flush_and_close();
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

bool AtomicFile::commit_new() {
  flush_and_close();
  return publish_new_file(tmp_, path_);  // syncs the folder; removes the temporary either way
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

// [section] RunDirLock ------------------------------------------------------------------------------

std::string RunDirLock::lock_path(const std::string& dir) { return join_path(dir, ".odyssey.lock"); }

std::string RunDirLock::live_owner(const std::string& dir) {
  const std::string path = lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";  // no lock file: no run ever held it
  struct stat st {};
  std::string owner;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    std::string text(512, '\0');
    const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
    owner = text.empty() ? "owner unknown" : text;
  }
  ::close(fd);  // drops the shared lock if it was taken
  return owner;
}

RunDirLock::RunDirLock(const std::string& dir) {
  const std::string path = lock_path(dir);
  // Not through a link (the lock's owner line would be written into its target), and without
  // blocking on a FIFO planted there.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  // A folder the user cannot write, or something planted where the lock belongs, is the user's
  // to change (exit 2); a disk that fails is the run's (exit 1).
  if (fd_ < 0 && errno == ELOOP)
    throw std::invalid_argument(path + " is a symbolic link, where a run keeps its lock file: remove it");
  if (fd_ < 0 && (errno == EACCES || errno == EPERM || errno == EROFS || errno == EISDIR || errno == ENOTDIR))
    throw std::invalid_argument(system_error("cannot create the run lock", path) + ": choose another --out");
  if (fd_ < 0) throw FileWriteError(system_error("cannot create the run lock", path));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw std::invalid_argument(path +
                                " is not a regular file (a FIFO, a socket or a device), where a run keeps "
                                "its lock file: remove it");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
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
  std::tm tm{};
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
