// Keeps docs/planner.md's table of tensor kinds honest: the text between its tensor-kinds markers is
// exactly `odyssey schema --tensor-kinds-markdown`, which reads the planner's rule of each kind, with
// one row a kind, each naming the kind, its shape and what it is.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "cli_test_util.h"
#include "engine/planner/planner.h"

using namespace odyssey::test;

TEST_CASE("docs/planner.md tensor kinds equal odyssey schema --tensor-kinds-markdown", "[cli][docs]") {
  const std::string section =
      generated_section(read_text(std::string(ODYSSEY_SOURCE_DIR) + "/docs/planner.md"), "tensor-kinds");
  const Run generated = run_odyssey("schema --tensor-kinds-markdown");
  require_exit(generated, 0);
  CHECK(section == generated.out);
  size_t rows = 0;
  std::istringstream lines(section);
  for (std::string line; std::getline(lines, line);) rows += line.rfind("| `", 0) == 0;
  const auto kinds = odyssey::tensor_kind_docs();
  CHECK(rows == kinds.size());
  for (const odyssey::TensorKindDoc& kind : kinds) {
    INFO(kind.name);
    CHECK(!kind.shape.empty());
    CHECK(!kind.meaning.empty());
    CHECK(section.find("| `" + kind.name + "` | `" + kind.shape + "` | " + kind.meaning + " |\n") != std::string::npos);
  }
}
