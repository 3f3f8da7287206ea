// Keeps docs/presets.md honest: its schema section is exactly `odyssey schema --markdown`, and
// every preset key appears in it.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/config/schema.h"
#include "test_paths.h"

namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  REQUIRE(pclose(pipe) == 0);
  return out;
}

}  // namespace

TEST_CASE("docs/presets.md schema section equals odyssey schema --markdown", "[cli][docs]") {
  std::ifstream in(std::string(ODYSSEY_SOURCE_DIR) + "/docs/presets.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const auto begin = readme.find("<!-- schema:begin");
  const auto end = readme.find("<!-- schema:end -->");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const auto body = readme.find('\n', begin) + 1;
  const std::string section = readme.substr(body, end - body);
  const std::string generated = run(std::string(ODYSSEY_BIN_DIR) + "/odyssey schema --markdown");
  CHECK(section == generated);
  for (const auto& key : odyssey::config_schema()) {
    INFO(key.full_name());
    CHECK(section.find("`" + std::string(key.name) + "`") != std::string::npos);
  }
}
