// Publishing a finished file under a name that must still be free: never over a file that another
// process wrote there meanwhile (a second eval into one --out, a second prepare of one FILE); and
// where a file may be written at all. defines: publish_new_file, output_file_refusal
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

/// Why a file the user named may not be written at `path` ("" when it may; a name that does not
/// exist yet may). The file is replaced by a new one, written beside it and renamed: a directory
/// is no file, a symbolic link would lose its target's name, a FIFO, socket or device its nature,
/// so only a regular file is replaced, and that only when `replace`; `how_to_replace` ends that
/// message ("pass --overwrite to replace it", "press Replace to overwrite it").
///   output_file_refusal("runs", false, "...") -> "runs is a directory; give a file name inside it"
std::string output_file_refusal(const std::string& path, bool replace, const std::string& how_to_replace);

}  // namespace odyssey
