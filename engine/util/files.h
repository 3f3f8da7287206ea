// Small POSIX file helpers for checkpoints and run outputs. Not std::filesystem: libtorch.so
// exports its own copies of std::filesystem functions, and calls that bind to them crash
// (remove_all jumps to a null pointer). defines: make_dirs, path_exists, is_directory,
// is_character_device, is_regular_file, rename_path, remove_tree, list_dir, same_path, resolve_path, join_path, folder_of, clean_path, FileReadError,
// open_regular_file, read_file_bounded, FileWriteError, open_output_stream, AtomicFile, RunDirBusy, RunDirLock
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace odyssey {

/// mkdir -p, one component at a time (no recursion, so no path is deep enough to exhaust the
/// stack). A path longer than PATH_MAX is refused before anything is created, and a failure part
/// way removes the directories this call made. False with *error (the path and errno text) and
/// *error_number (errno: ENOTDIR/EEXIST for a file in the way, ENOSPC for a full disk, ...).
bool make_dirs(const std::string& path, std::string* error = nullptr, int* error_number = nullptr);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
/// A character device where `path` leads (/dev/null behind a run file's link): it has no lines to
/// read back or keep, and nothing to sync.
bool is_character_device(const std::string& path);
/// A regular file behind an open stream: it has a length to cut and blocks to sync (a device or a
/// pipe has neither: ftruncate and fsync refuse them).
bool is_regular_file(std::FILE* file);
/// rename(2): atomic within one file system. False with *error on failure.
bool rename_path(const std::string& from, const std::string& to, std::string* error = nullptr);
/// rm -rf (no error when absent).
void remove_tree(const std::string& path);
/// Entry names of a directory (no "." / ".."), empty when it cannot be read.
std::vector<std::string> list_dir(const std::string& path);
/// True when both exist and are the same file or directory.
bool same_path(const std::string& a, const std::string& b);
/// `path` absolute, with links, "." and ".." resolved as far as it exists (realpath of its longest
/// existing prefix, the rest appended as written), so that two spellings of one file compare equal
/// as text even before it is made ("runs/a/../a/x" and "/abs/runs/a/x").
std::string resolve_path(const std::string& path);
/// a + "/" + b (no doubled slash).
std::string join_path(const std::string& a, const std::string& b);
/// The folder a file path names its file in: "a/b.png" -> "a", "b.png" -> ".", "/b.png" -> "/".
std::string folder_of(const std::string& path);
/// A path argument as a shell may spell it, without what changes nothing: repeated slashes
/// collapsed, trailing slashes and "/." dropped ("runs//a/" -> "runs/a", "/" stays "/"), so
/// names derived from it ("OUT.partial") land beside it, not inside it.
std::string clean_path(const std::string& path);

/// A file that cannot be read as the input it should be: missing, unreadable, not a regular file
/// (a FIFO, device, socket or directory) or larger than its kind allows. Bad input (exit 2); the
/// message names the file, what it was read as and the rule.
class FileReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A descriptor open for reading on a regular file, opened without blocking (a FIFO with no writer
/// cannot hang the caller) and checked on the descriptor itself (S_ISREG); *size gets its size.
/// For files read in pieces (an earlier run's metrics.jsonl and trace.json). The caller closes it.
/// Throws FileReadError naming `what`, the path and the rule.
int open_regular_file(const std::string& path, const std::string& what, int64_t* size = nullptr);

/// The whole of a small input file (a preset, config.json, an index, a pointer file), bounded
/// before a byte is read: opened without blocking (a FIFO with no writer cannot hang the caller),
/// then checked on the opened descriptor (so the file checked is the file read): a regular file
/// of at most `max_bytes`. A file that grows past the limit while it is read is refused too.
/// `what` names the file's role in messages ("preset", "config.json"). Throws FileReadError.
std::string read_file_bounded(const std::string& path, int64_t max_bytes, const std::string& what);

/// Writing a file failed (disk full, permission, rename): a runtime failure (exit 1), never bad
/// input. The message names the path and the system's reason.
class FileWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `path` opened for writing as std::fopen(path, mode) opens it ("wb", "ab" or "r+b"), except that a
/// FIFO or socket found there is refused (FileWriteError naming it) instead of blocking the open
/// until something reads it, forever. A link is followed, as fopen does (a trace sent to
/// /dev/null). nullptr with errno set where the open itself fails.
std::FILE* open_output_stream(const std::string& path, const char* mode);

/// A file that appears whole or not at all: bytes go to `path.tmp` (made afresh: a leftover, link
/// or FIFO there is removed first, never written through; a link to a character device is); commit() flushes them to the
/// disk (fsync), renames over `path` and syncs the directory, so a crash or power loss leaves
/// either the old file or the new one. Destroyed uncommitted, it removes the temporary.
/// Usage: AtomicFile f(path); f.write(p, n); ...; f.commit();   (throws FileWriteError)
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t bytes);
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();
  /// As commit(), where `path` must not exist (publish_new_file): false when a file appeared
  /// there since the caller looked, which is left as it is (the temporary removed).
  bool commit_new();
  const std::string& path() const { return path_; }
  /// The name a file at `path` is written through before the rename ("PATH.tmp").
  static std::string temporary_path(const std::string& path) { return path + ".tmp"; }

 private:
  void flush_and_close();  ///< the temporary's bytes on the disk, its descriptor closed
  std::string path_, tmp_;
  int fd_ = -1;
};

/// Writes `text` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& text);

/// Another live process holds the run directory (exit 2: choose another --out or wait).
class RunDirBusy : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The exclusive right to write one run directory: flock(2) on DIR/.odyssey.lock, which holds the
/// owner's pid, host and start time. The kernel drops the lock when its process dies, so a lock
/// left by a killed run is taken over (previous_owner() says whose it was); a live owner makes the
/// constructor throw RunDirBusy naming its pid. Two runs in one process conflict too.
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  /// The lock file's previous contents when it was taken over from a dead process ("" if fresh).
  const std::string& previous_owner() const { return previous_owner_; }
  /// Non-empty when the file system has no flock and the run goes on unguarded: why.
  const std::string& unguarded() const { return unguarded_; }
  static std::string lock_path(const std::string& dir);
  /// The owner line of a live run holding `dir` ("pid 4242 on node7, since ..."; "owner unknown"
  /// when its lock file is empty), or "" when no live process holds it. Takes nothing and creates
  /// nothing: a shared flock probe of an existing lock file, released at once.
  static std::string live_owner(const std::string& dir);

 private:
  int fd_ = -1;
  std::string previous_owner_;
  std::string unguarded_;
};

}  // namespace odyssey
