// Keeps docs/architecture.md's technique table honest: the text between its techniques markers is
// exactly `odyssey schema --techniques-markdown`, which reads the technique registry, and every
// registry key appears in it.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/config/techniques.h"
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

TEST_CASE("docs/architecture.md technique table equals odyssey schema --techniques-markdown", "[cli][docs]") {
  std::ifstream in(std::string(ODYSSEY_SOURCE_DIR) + "/docs/architecture.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const auto begin = doc.find("<!-- techniques:begin");
  const auto end = doc.find("<!-- techniques:end -->");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  REQUIRE(begin < end);
  const auto body = doc.find('\n', begin) + 1;
  const std::string section = doc.substr(body, end - body);
  const std::string generated = run(std::string(ODYSSEY_BIN_DIR) + "/odyssey schema --techniques-markdown");
  CHECK(section == generated);
  for (const auto& t : odyssey::kTechniques) {
    INFO(t.key);
    CHECK(section.find("`" + std::string(t.key) + "`") != std::string::npos);
  }
  CHECK(section.find("`memory.keep_attention`") != std::string::npos);
}
