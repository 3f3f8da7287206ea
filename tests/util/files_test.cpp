// The POSIX file helpers against what a hostile or unlucky path does to them: paths deeper than
// the stack or the system allows, a file in the way, FIFOs, devices and files that grow, and the
// spellings a shell gives one directory. defines: test cases [util][files]
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>

#include "engine/util/files.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

std::string scratch(const std::string& name) {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/files_test_" + name;
  remove_tree(dir);
  REQUIRE(make_dirs(dir));
  return dir;
}

}  // namespace

TEST_CASE("make_dirs: a path past PATH_MAX is refused before anything is made, without recursion", "[util][files]") {
  // 100,000 components: the recursive version overflowed the stack (SIGSEGV) on such a path.
  const std::string base = scratch("too_long");
  std::string path = base;
  for (int i = 0; i < 100000; ++i) path += "/a";
  std::string error;
  int error_number = 0;
  CHECK_FALSE(make_dirs(path, &error, &error_number));
  CHECK(error_number == ENAMETOOLONG);
  CHECK_THAT(error, Catch::Contains("longer than the system's path limit"));
  CHECK_FALSE(path_exists(base + "/a"));
}

TEST_CASE("make_dirs: a failure part way removes the directories the call made", "[util][files]") {
  // 1500 levels under PATH_MAX, then a name longer than a file system allows (255 bytes): the
  // mkdir of the last one fails after 1500 others succeeded, which used to stay behind.
  const std::string base = scratch("undo");
  std::string path = base;
  for (int i = 0; i < 1500; ++i) path += "/a";
  REQUIRE(path.size() + 300 < PATH_MAX);
  path += "/" + std::string(300, 'x');
  std::string error;
  int error_number = 0;
  CHECK_FALSE(make_dirs(path, &error, &error_number));
  CHECK(error_number == ENAMETOOLONG);
  CHECK_FALSE(path_exists(base + "/a"));
  CHECK(is_directory(base));  // what was there before stays
}

TEST_CASE("make_dirs: a file in the way is named with ENOTDIR, and what existed is kept", "[util][files]") {
  const std::string base = scratch("file_in_way");
  std::ofstream(base + "/f") << "x";
  std::string error;
  int error_number = 0;
  CHECK_FALSE(make_dirs(base + "/f", &error, &error_number));
  CHECK(error_number == ENOTDIR);
  CHECK_THAT(error, Catch::Contains(base + "/f") && Catch::Contains("a file of that name is there"));
  CHECK_FALSE(make_dirs(base + "/f/g/h", &error, &error_number));
  CHECK(error_number == ENOTDIR);
  CHECK(path_exists(base + "/f"));
  REQUIRE(make_dirs(base + "/new/deeper/still", &error));
  CHECK(is_directory(base + "/new/deeper/still"));
  CHECK(make_dirs(base + "/new//deeper/still/", &error));  // already there, spelled otherwise
}

TEST_CASE("is_character_device and is_regular_file tell a run file's link to /dev/null from a file", "[util][files]") {
  // The trace and metrics writers keep no old lines of a device and fsync only a regular file.
  const std::string dir = scratch("kinds");
  const std::string file = dir + "/metrics.jsonl", link = dir + "/trace.json";
  std::ofstream(file) << "{}\n";
  REQUIRE(::symlink("/dev/null", link.c_str()) == 0);
  CHECK(is_character_device(link));
  CHECK_FALSE(is_character_device(file));
  CHECK_FALSE(is_character_device(dir));
  CHECK_FALSE(is_character_device(dir + "/missing"));
  std::FILE* regular = std::fopen(file.c_str(), "rb");
  std::FILE* device = std::fopen(link.c_str(), "rb");
  REQUIRE(regular != nullptr);
  REQUIRE(device != nullptr);
  CHECK(is_regular_file(regular));
  CHECK_FALSE(is_regular_file(device));
  std::fclose(regular);
  std::fclose(device);
}

TEST_CASE("clean_path: the spellings a shell gives one directory become one", "[util][files]") {
  CHECK(clean_path("runs/a/") == "runs/a");
  CHECK(clean_path("runs//a///") == "runs/a");
  CHECK(clean_path("runs/a/.") == "runs/a");
  CHECK(clean_path("./runs/a") == "./runs/a");
  CHECK(clean_path("/") == "/");
  CHECK(clean_path("//") == "/");
  CHECK(clean_path("/.") == "/");
  CHECK(clean_path("a") == "a");
  CHECK(clean_path("") == "");
  CHECK(clean_path("runs/a b/") == "runs/a b");
}

TEST_CASE("resolve_path: a file not made yet resolves where a write through its links would make it", "[util][files]") {
  const std::string dir = scratch("resolve");
  char real[PATH_MAX];
  REQUIRE(::realpath(dir.c_str(), real) != nullptr);
  const std::string abs = real;
  REQUIRE(make_dirs(dir + "/target"));
  REQUIRE(::symlink((abs + "/target/a.json").c_str(), (dir + "/absolute").c_str()) == 0);
  REQUIRE(::symlink("target/b.json", (dir + "/relative").c_str()) == 0);
  REQUIRE(::symlink("relative", (dir + "/chain").c_str()) == 0);
  REQUIRE(::symlink("target", (dir + "/folder").c_str()) == 0);
  REQUIRE(::symlink("loop", (dir + "/loop").c_str()) == 0);
  CHECK(resolve_path(dir + "/absolute") == abs + "/target/a.json");  // leads nowhere yet: followed
  CHECK(resolve_path(dir + "/relative") == abs + "/target/b.json");  // from the link's own folder
  CHECK(resolve_path(dir + "/chain") == abs + "/target/b.json");
  CHECK(resolve_path(dir + "/folder/c/d.json") == abs + "/target/c/d.json");
  CHECK(resolve_path(dir + "/loop") == abs + "/loop");  // a loop stays as written
  REQUIRE(::symlink("ring_b", (dir + "/ring_a").c_str()) == 0);
  REQUIRE(::symlink("ring_c", (dir + "/ring_b").c_str()) == 0);
  REQUIRE(::symlink("ring_a", (dir + "/ring_c").c_str()) == 0);
  CHECK(resolve_path(dir + "/ring_a") == abs + "/ring_a");  // a loop of three too, not where 40 hops end
  CHECK(resolve_path(dir + "/none/e.json") == abs + "/none/e.json");
  // a write through the link makes the file it resolved to
  std::ofstream(dir + "/chain") << "x";
  CHECK(resolve_path(dir + "/chain") == abs + "/target/b.json");
  struct stat st {};
  CHECK(::stat((abs + "/target/b.json").c_str(), &st) == 0);
}

TEST_CASE("read_file_bounded: FIFOs, devices and directories are refused at once, sizes before reading",
          "[util][files]") {
  const std::string base = scratch("bounded");
  const std::string fifo = base + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(read_file_bounded(fifo, 1 << 20, "config.json"),
                    Catch::Contains("config.json " + fifo) && Catch::Contains("not a regular file"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // no wait for a writer
  CHECK_THROWS_WITH(read_file_bounded("/dev/zero", 1 << 20, "config.json"), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(read_file_bounded(base, 1 << 20, "preset"), Catch::Contains("is a directory"));
  CHECK_THROWS_WITH(read_file_bounded(base + "/missing", 1 << 20, "preset"), Catch::Contains("cannot open"));
  // A link to /dev/zero is judged by what it opens, not by its name.
  REQUIRE(::symlink("/dev/zero", (base + "/zero.json").c_str()) == 0);
  CHECK_THROWS_WITH(read_file_bounded(base + "/zero.json", 1 << 20, "config.json"),
                    Catch::Contains("not a regular file"));
  std::ofstream(base + "/big") << std::string(2000, 'x');
  CHECK_THROWS_WITH(read_file_bounded(base + "/big", 1000, "preset"),
                    Catch::Contains("is 2000 bytes; a preset is at most 1000 bytes"));
  std::ofstream(base + "/ok") << "hello";
  CHECK(read_file_bounded(base + "/ok", 5, "preset") == "hello");
  std::ofstream(base + "/empty");
  CHECK(read_file_bounded(base + "/empty", 5, "preset").empty());
}

TEST_CASE("AtomicFile: what is found at its temporary is replaced, never written through nor waited on",
          "[util][files]") {
  const std::string base = scratch("atomic_tmp");
  const std::string victim = base + "/victim.txt", out = base + "/out.json";
  std::ofstream(victim) << "kept\n";
  // a link to a regular file: its target would receive the bytes and the rename would leave the
  // link as out.json
  REQUIRE(::symlink(victim.c_str(), (out + ".tmp").c_str()) == 0);
  write_file_atomically(out, "new\n");
  struct stat st {};
  REQUIRE(::lstat(out.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(read_file_bounded(out, 64, "out") == "new\n");
  CHECK(read_file_bounded(victim, 64, "victim") == "kept\n");
  // a FIFO: opening it to write would wait for a reader forever
  REQUIRE(::mkfifo((out + ".tmp").c_str(), 0644) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  write_file_atomically(out, "newer\n");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(read_file_bounded(out, 64, "out") == "newer\n");
  // a link to a character device is written through: /dev/full refuses as a full disk does
  REQUIRE(::symlink("/dev/full", (out + ".tmp").c_str()) == 0);
  CHECK_THROWS_WITH(write_file_atomically(out, std::string(4096, 'x')), Catch::Contains("(disk full)"));
  CHECK(read_file_bounded(out, 64, "out") == "newer\n");  // the old file stands
  // a directory cannot be replaced: named
  REQUIRE(make_dirs(out + ".tmp"));
  CHECK_THROWS_WITH(write_file_atomically(out, "x"), Catch::Contains("cannot create " + out + ".tmp"));
}

TEST_CASE("open_output_stream: a FIFO where a file is written is refused at once, a file opens as fopen would",
          "[util][files]") {
  const std::string base = scratch("output_stream");
  const std::string fifo = base + "/trace.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(open_output_stream(fifo, "wb"), Catch::Contains(fifo + " is a FIFO or a socket"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // no wait for a reader
  std::FILE* file = open_output_stream(base + "/metrics.jsonl", "ab");
  REQUIRE(file != nullptr);
  CHECK(std::fputs("line\n", file) >= 0);
  CHECK(std::fclose(file) == 0);
  CHECK(read_file_bounded(base + "/metrics.jsonl", 64, "metrics") == "line\n");
  CHECK(open_output_stream(base + "/missing/x", "wb") == nullptr);  // errno set, as fopen
}

TEST_CASE("RunDirLock::live_owner: a live holder is named, a dead one's or none is empty, nothing created",
          "[util][files]") {
  const std::string base = scratch("live_owner");
  CHECK(RunDirLock::live_owner(base).empty());
  CHECK_FALSE(path_exists(RunDirLock::lock_path(base)));  // the probe creates no lock file
  {
    RunDirLock lock(base);
    CHECK_THAT(RunDirLock::live_owner(base), Catch::Contains("pid " + std::to_string(::getpid())));
  }
  CHECK(RunDirLock::live_owner(base).empty());  // released
}
