// Keeps docs/presets.md honest: its schema section is exactly `odyssey schema --markdown`, and
// every preset key appears in it.
#include <catch2/catch.hpp>

#include <string>

#include "cli_test_util.h"
#include "engine/config/schema.h"

using namespace odyssey::test;

TEST_CASE("docs/presets.md schema section equals odyssey schema --markdown", "[cli][docs]") {
  const std::string section =
      generated_section(read_text(std::string(ODYSSEY_SOURCE_DIR) + "/docs/presets.md"), "schema");
  const Run generated = run_odyssey("schema --markdown");
  require_exit(generated, 0);
  CHECK(section == generated.out);
  for (const auto& key : odyssey::config_schema()) {
    INFO(key.full_name());
    CHECK(section.find("`" + std::string(key.name) + "`") != std::string::npos);
  }
}
