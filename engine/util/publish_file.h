// Publishing a finished file under a name that must still be free: never over a file that another
// process wrote there meanwhile (a second eval into one --out, a second prepare of one FILE).
// defines: publish_new_file
#pragma once

#include <string>

namespace odyssey {

/// Moves `temporary` (complete and synced, in the same folder) to `path`, which must not exist,
/// and syncs the folder so the new name survives a power cut. link(2) fails where a file appeared
/// since the caller looked, where rename(2) would replace it; on a file system without hard links
/// (link refused with EPERM or ENOTSUP, say FAT or some FUSE mounts) it renames once the name is
/// seen free. `temporary` is removed whatever the outcome. False when `path` exists (it is left as
/// it is); FileWriteError naming `path` and the system's reason for any other failure.
///   if (!publish_new_file(path + ".tmp123", path)) ...;  // another writer came first
bool publish_new_file(const std::string& temporary, const std::string& path);

}  // namespace odyssey
