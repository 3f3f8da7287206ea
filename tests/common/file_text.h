// A file's bytes as a string, for tests that check what a command wrote: "" when it cannot be
// read (the test's own CHECK then says what was expected). defines: file_text
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace odyssey::test {

inline std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace odyssey::test
