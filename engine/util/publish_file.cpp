// publish_new_file: link(2) where the file system has it, a checked rename where it has not, then
// a sync of the folder; output_file_refusal: the kinds of path a written file never replaces.
// defines: publish_new_file, output_file_refusal
#include "engine/util/publish_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/util/files.h"

namespace odyssey {

bool publish_new_file(const std::string& temporary, const std::string& path) {
  if (::link(temporary.c_str(), path.c_str()) != 0) {
    const int link_error = errno;
    if (link_error == EEXIST) {
      ::unlink(temporary.c_str());
      return false;
    }
    const bool no_hard_links = link_error == EPERM || link_error == ENOTSUP || link_error == ENOSYS;
    if (!no_hard_links) {
      ::unlink(temporary.c_str());
      throw FileWriteError(path + ": cannot publish " + temporary + " there (" + std::strerror(link_error) + ")");
    }
    if (path_exists(path)) {  // the check and the rename are not one step here: the best this file system allows
      ::unlink(temporary.c_str());
      return false;
    }
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      const int rename_error = errno;
      ::unlink(temporary.c_str());
      throw FileWriteError(path + ": cannot move " + temporary + " to it (" + std::strerror(rename_error) + ")");
    }
  } else {
    ::unlink(temporary.c_str());  // the new name holds the file now
  }
  const int folder = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder >= 0) {  // the new name made durable; best effort (some file systems refuse)
    ::fsync(folder);
    ::close(folder);
  }
  return true;
}

std::string output_file_refusal(const std::string& path, bool replace, const std::string& how_to_replace) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "";
  if (S_ISDIR(st.st_mode)) return path + " is a directory; give a file name inside it";
  if (S_ISLNK(st.st_mode)) return path + " is a symbolic link; name the file it points to, or another name";
  if (!S_ISREG(st.st_mode)) return path + " is not a regular file (a FIFO, socket or device); name a file";
  if (!replace) return path + " exists; " + how_to_replace;
  return "";
}

}  // namespace odyssey
