// Small POSIX file helpers for checkpoints and run outputs. Not std::filesystem: libtorch.so
// exports its own copies of std::filesystem functions, and calls that bind to them crash
// (remove_all jumps to a null pointer). defines: make_dirs, path_exists, is_directory,
// rename_path, remove_tree, list_dir, same_path, join_path
#pragma once

#include <string>
#include <vector>

namespace odyssey {

/// mkdir -p. False with *error (the path and errno text) on failure.
bool make_dirs(const std::string& path, std::string* error = nullptr);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
/// rename(2): atomic within one file system. False with *error on failure.
bool rename_path(const std::string& from, const std::string& to, std::string* error = nullptr);
/// rm -rf (no error when absent).
void remove_tree(const std::string& path);
/// Entry names of a directory (no "." / ".."), empty when it cannot be read.
std::vector<std::string> list_dir(const std::string& path);
/// True when both exist and are the same file or directory.
bool same_path(const std::string& a, const std::string& b);
/// a + "/" + b (no doubled slash).
std::string join_path(const std::string& a, const std::string& b);

}  // namespace odyssey
