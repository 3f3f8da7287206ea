// What a torchrun job's processes compare before they start: the job's text (config and options),
// the identity of the files each process reads on its own node, and how two texts differ.
// defines: job_text, job_difference, file_identity, files_identity
#include "engine/train/job_text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "engine/config/config_diff.h"
#include "engine/config/preset.h"
#include "engine/train/checksum.h"
#include "engine/util/files.h"

namespace odyssey {
namespace {

/// Where a job's text turns from its config to its option lines.
constexpr const char* kJobOptionsMark = "\n# the command line's options, alike in every process\n";

}  // namespace

std::string job_text(const RunConfig& cfg, const std::vector<JobOption>& options) {
  RunConfig shown = cfg;
  shown.description.clear();
  shown.hardware = RunConfig{}.hardware;
  shown.output.log_every = RunConfig{}.output.log_every;
  shown.output.dir = RunConfig{}.output.dir;
  std::string text = preset_to_toml(shown) + kJobOptionsMark;
  for (const auto& [name, value] : options) text += name + "\t" + value + "\n";
  return text;
}

std::string job_difference(const std::string& lead, const std::string& other, const std::string& rule) {
  auto split = [](const std::string& text) {
    const size_t at = text.find(kJobOptionsMark);
    return at == std::string::npos ? std::pair{text, std::string()}
                                   : std::pair{text.substr(0, at), text.substr(at + std::strlen(kJobOptionsMark))};
  };
  const auto [lead_config, lead_options] = split(lead);
  const auto [other_config, other_options] = split(other);
  std::vector<std::string> changes;
  if (lead_config != other_config) {
    const LoadedPreset a = load_preset_text(lead_config, "rank 0's preset"),
                       b = load_preset_text(other_config, "its preset");
    for (const KeyChange& c : config_changes(a.config, b.config)) changes.push_back(c.describe());
  }
  std::istringstream la(lead_options), lb(other_options);
  for (std::string x, y; std::getline(la, x) && std::getline(lb, y);)  // "name\tvalue" lines
    if (x != y)
      changes.push_back(x.substr(0, x.find('\t')) + " " + x.substr(x.find('\t') + 1) + " -> " +
                        y.substr(y.find('\t') + 1));
  std::string text;
  for (size_t i = 0; i < changes.size() && i < 4; ++i) text += (i ? "; " : "") + changes[i];
  if (changes.size() > 4) text += "; and " + std::to_string(changes.size() - 4) + " more";
  if (text.empty()) text = "its preset differs from rank 0's";
  return "its process runs another job than rank 0's (" + text + ", rank 0's value first): " + rule;
}

std::string file_identity(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "unreadable";
  struct stat st {};
  std::string identity = "unreadable";
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    constexpr int64_t kEdge = 64 * 1024;
    const int64_t size = st.st_size;
    std::vector<char> bytes(static_cast<size_t>(std::min(size, kEdge)));
    uint32_t crc = 0;
    bool read_all = true;
    for (const int64_t at : {int64_t{0}, std::max<int64_t>(0, size - kEdge)}) {
      const ssize_t got = ::pread(fd, bytes.data(), bytes.size(), at);
      read_all = read_all && got == static_cast<ssize_t>(bytes.size());
      crc = crc32_update(crc, bytes.data(), bytes.size());
    }
    if (read_all) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%08x", crc);
      identity = std::to_string(size) + " bytes, CRC-32 of its first and last 64 KiB " + hex;
    }
  }
  ::close(fd);
  return identity;
}

std::string files_identity(const std::string& dir, const std::function<bool(const std::string&)>& wanted) {
  if (!is_directory(dir)) return "unreadable";
  std::vector<std::string> names;
  for (const std::string& name : list_dir(dir)) {
    struct stat st {};
    if (wanted(name) && ::stat(join_path(dir, name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(name);
  }
  if (names.empty()) return "no such files";
  std::sort(names.begin(), names.end());
  std::string text;
  for (const std::string& name : names)
    text += (text.empty() ? "" : "; ") + name + ": " + file_identity(join_path(dir, name));
  return text;
}

}  // namespace odyssey
