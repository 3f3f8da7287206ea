// publish_new_file: a finished temporary becomes the new name, or is dropped when a file is already
// there (left as it was), and is never left behind; output_file_refusal replaces only a regular file,
// and only when asked. defines: test cases [util][publish]
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "../common/file_text.h"
#include "engine/util/files.h"
#include "engine/util/publish_file.h"
#include "test_paths.h"

using namespace odyssey;

TEST_CASE("publish_new_file: the temporary takes a free name, never an existing one", "[util][publish]") {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/publish_file_test";
  remove_tree(dir);
  REQUIRE(make_dirs(dir));
  const std::string path = dir + "/eval.json", temporary = path + ".tmp1";
  std::ofstream(temporary) << "first";
  REQUIRE(publish_new_file(temporary, path));
  CHECK(odyssey::test::file_text(path) == "first");
  CHECK(!path_exists(temporary));

  // A second writer's file finds the name taken: the first file stays, the second is dropped.
  std::ofstream(temporary) << "second";
  CHECK(!publish_new_file(temporary, path));
  CHECK(odyssey::test::file_text(path) == "first");
  CHECK(!path_exists(temporary));

  // A folder that is gone: a FileWriteError naming the path, and no temporary left.
  const std::string gone = dir + "/gone/eval.json";
  std::ofstream(temporary) << "third";
  CHECK_THROWS_WITH(publish_new_file(temporary, gone), Catch::Contains(gone + ": cannot publish"));
  CHECK(!path_exists(temporary));
  remove_tree(dir);
}

TEST_CASE("output_file_refusal: only a regular file is replaced, and only when asked", "[util][publish]") {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/output_file_refusal_test";
  remove_tree(dir);
  REQUIRE(make_dirs(dir));
  const std::string file = dir + "/kept.toml", link = dir + "/link.toml", fifo = dir + "/fifo.toml";
  std::ofstream(file) << "kept";
  REQUIRE(::symlink(file.c_str(), link.c_str()) == 0);
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const std::string how = "pass --overwrite to replace it";
  CHECK(output_file_refusal(dir + "/new.toml", false, how).empty());  // a new name
  CHECK(output_file_refusal(file, false, how) == file + " exists; pass --overwrite to replace it");
  CHECK(output_file_refusal(file, true, how).empty());
  for (const bool replace : {false, true}) {  // never, asked or not
    CHECK(output_file_refusal(dir, replace, how) == dir + " is a directory; give a file name inside it");
    CHECK_THAT(output_file_refusal(link, replace, how), Catch::Contains(link + " is a symbolic link"));
    CHECK_THAT(output_file_refusal(fifo, replace, how), Catch::Contains(fifo + " is not a regular file"));
  }
  remove_tree(dir);
}
