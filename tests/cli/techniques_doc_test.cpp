// Keeps docs/architecture.md's technique table honest: the text between its techniques markers is
// exactly `odyssey schema --techniques-markdown`, which reads the technique registry, and every
// registry key appears in it.
#include <catch2/catch.hpp>

#include <string>

#include "cli_test_util.h"
#include "engine/config/techniques.h"

using namespace odyssey::test;

TEST_CASE("docs/architecture.md technique table equals odyssey schema --techniques-markdown", "[cli][docs]") {
  const std::string section =
      generated_section(read_text(std::string(ODYSSEY_SOURCE_DIR) + "/docs/architecture.md"), "techniques");
  const Run generated = run_odyssey("schema --techniques-markdown");
  require_exit(generated, 0);
  CHECK(section == generated.out);
  for (const auto& t : odyssey::kTechniques) {
    INFO(t.key);
    CHECK(section.find("`" + std::string(t.key) + "`") != std::string::npos);
  }
  CHECK(section.find("`memory.keep_attention`") != std::string::npos);
}
