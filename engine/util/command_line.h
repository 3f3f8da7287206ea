// Rules every Odyssey command line keeps, odyssey's and odyssey-studio's alike: a value option is
// given once, and its value is never the next option. defines: OnceFlags, option_taken_as_value
#pragma once

#include <map>
#include <string>

namespace odyssey {

/// The value flags of one command line, each given once: `--resume A --resume B` would otherwise
/// use B without a word about A. Switches (--json) and --set may repeat.
class OnceFlags {
 public:
  /// "" the first time `flag` is given; else the message naming both values.
  std::string give(const std::string& flag, const std::string& value);

 private:
  std::map<std::string, std::string> given_;  // flag -> its first value
};

/// The argument after `flag` (not given inline): "" when it can be the flag's value, else the
/// message refusing it. An option there (`-o --json`, or `--`, the end of the options) was taken
/// as a file's name, and the option lost; a file or folder whose name truly begins with "--" is
/// written as a path (`-o ./--json`), which the message says for the options that name one.
std::string option_taken_as_value(const std::string& flag, const std::string& next);

}  // namespace odyssey
