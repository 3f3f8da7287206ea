// Rules every Odyssey command line keeps: each value option once, no option taken as a value.
// defines: OnceFlags::give, option_taken_as_value
#include "engine/util/command_line.h"

#include <set>

namespace odyssey {

std::string OnceFlags::give(const std::string& flag, const std::string& value) {
  const auto [earlier, first] = given_.emplace(flag, value);
  if (first) return "";
  return flag + " given twice (" + earlier->second + ", then " + value + "): give it once";
}

std::string option_taken_as_value(const std::string& flag, const std::string& next) {
  if (next.rfind("--", 0) != 0) return "";  // "--" itself too: the end of the options
  if (flag == "--set") return "--set needs section.key=value, and the next argument is the option " + next;
  // the options whose value names a file or folder, of odyssey's commands and odyssey-studio's
  static const std::set<std::string> kPathFlags = {
      "-o",     "--output",    "--out",    "--resume", "--memory-snapshot", "--kernel-profile",
      "--data", "--tokenizer", "--preset", "--hf",     "--screenshot"};
  const std::string message = flag + " needs a value, and the next argument is the option " + next;
  if (!kPathFlags.count(flag)) return message + ": give " + flag + " its value";
  return message + ": give " + flag + " its value (for a file or folder of that name, " + flag + " ./" + next + ")";
}

}  // namespace odyssey
