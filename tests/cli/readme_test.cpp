// Keeps docs/presets.md and the README honest: the schema section is exactly `odyssey schema
// --markdown` with every preset key in it; `odyssey schema --json` states each key as the schema
// holds it; the README's ladder rows are `odyssey ladder`'s.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

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

TEST_CASE("odyssey schema: every key's whole name, a space before its type", "[cli][docs]") {
  // Names were padded to 26 characters by cutting: untied_attention_efficiency printed as
  // "untied_attention_efficiencfloat".
  const Run plain = run_odyssey("schema");
  require_exit(plain, 0);
  for (const auto& key : odyssey::config_schema()) {
    if (key.section.empty()) continue;  // the top-level description is not listed under a section
    INFO(key.full_name());
    CHECK(plain.out.find("\n  " + std::string(key.name) + " ") != std::string::npos);
  }
}

TEST_CASE("odyssey schema --json: every preset key with the schema's own type, range, default and doc", "[cli][docs]") {
  const Run generated = run_odyssey("schema --json");
  require_exit(generated, 0);
  const auto parsed = odyssey::parse_json(generated.out);
  REQUIRE(parsed.has_value());
  const auto& keys = parsed->at("keys");
  REQUIRE(keys.size() == odyssey::config_schema().size());
  CHECK(parsed->at("sections").size() == odyssey::config_sections().size());
  const odyssey::RunConfig defaults;
  size_t i = 0;
  for (const auto& spec : odyssey::config_schema()) {
    const auto& key = keys.at(i++);
    INFO(spec.full_name());
    CHECK(key.at("key").get<std::string>() == spec.full_name());
    CHECK(key.at("doc").get<std::string>() == spec.doc);
    CHECK(key.at("applies").get<std::string>() == odyssey::to_string(spec.applies()));
    CHECK(key.at("resume_must_match").get<bool>() == spec.resume_must_match);
    if (spec.kind == odyssey::KeyKind::Choice) CHECK(key.at("choices").get<std::vector<std::string>>() == spec.choices);
    if (spec.range) {
      CHECK(key.at("range").at("min").get<double>() == spec.range->lo);
      if (!std::isinf(spec.range->hi)) CHECK(key.at("range").at("max").get<double>() == spec.range->hi);
      CHECK(key.at("range").at("text").get<std::string>() == spec.range->interval(spec.kind));
    } else {
      CHECK(key.at("range").is_null());
    }
    // a built-in default written as the TOML literal a preset would hold
    if (key.at("default_from").get<std::string>() == "built-in") {
      const std::string literal = odyssey::toml_literal(spec, defaults);
      const auto& value = key.at("default");
      if (value.is_number())  // the same number, whichever way each writes it (3e+02, 300.0)
        CHECK(value.get<double>() == std::stod(literal));
      else
        CHECK((value.is_string() ? "\"" + value.get<std::string>() + "\"" : value.dump()) == literal);
    } else {
      CHECK(key.at("default").is_null());
    }
  }
  // one output at a time
  require_exit(run_odyssey("schema --json --markdown"), 2);
}

TEST_CASE("the README's ladder rows are odyssey ladder's for the default preset", "[cli][docs]") {
  // The README shows the start of each row (up to "  ..."): copied by hand once, it had gone stale
  // (457K where the planner says 458K). The planner is arithmetic on the preset, no kernel chosen.
  const std::string readme = read_text(std::string(ODYSSEY_SOURCE_DIR) + "/README.md");
  const Run ladder = run_odyssey("ladder presets/tiny-cpu.toml");
  require_exit(ladder, 0);
  std::istringstream lines(readme);
  int rows = 0;
  for (std::string line; std::getline(lines, line);) {
    const std::string elided = "  ...";
    if (line.size() <= elided.size() || line.compare(line.size() - elided.size(), elided.size(), elided) != 0) continue;
    const std::string shown = line.substr(0, line.size() - elided.size());
    INFO(shown);
    CHECK(ladder.out.find("\n" + shown) != std::string::npos);
    ++rows;
  }
  CHECK(rows >= 3);  // the header and two rungs at least
}
