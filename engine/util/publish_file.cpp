// publish_new_file: link(2) where the file system has it, a checked rename where it has not, then
// a sync of the folder.
// defines: publish_new_file
#include "engine/util/publish_file.h"

#include <fcntl.h>
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

}  // namespace odyssey
