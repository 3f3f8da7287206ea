// odyssey prepare as a user runs it, with a WordLevel tokenizer.json the test builds with Hugging
// Face `tokenizers` and Parquet inputs it writes with pyarrow (make deps installs both; without
// them these tests fail, they never skip): JSON lines, Parquet and a directory of text read back
// token for token from the documents file, --append-eos, a bad line named FILE:LINE (a bad Parquet
// row FILE:row N) with exit 2, an existing --out refused and untouched, a tokenizer larger than the
// preset's vocabulary refused, a long document encoded in pieces (byte-level BPE) token for token;
// then odyssey train on the prepared file, and odyssey check refusing what train would of a data
// file, every dataset kind.
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "../hf/hf_fixtures.h"
#include "cli_test_util.h"
#include "tokenizer_test_util.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

const std::vector<std::string> kWords = {"[UNK]", "</s>", "the", "cat", "sat", "on", "mat", "a", "dog", "ran"};

std::string make_dir(const std::string& name) {
  const std::string dir = fresh_dir("prepare_" + name);
  REQUIRE(std::system(("mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

using Index = std::vector<uint64_t>;
using Tokens = std::vector<uint32_t>;

/// The build's Python, which must import pyarrow to write the Parquet inputs (and odyssey prepare
/// to read them): a missing library fails here, loudly.
std::string pyarrow_python() {
  const std::string python = tokenizers_python();
  const int rc = std::system(("'" + python + "' -c 'import pyarrow.parquet' 2>/dev/null").c_str());
  INFO("the Python at " << python << " cannot import `pyarrow`: run `make deps` (scripts/deps.sh installs it)");
  REQUIRE(rc == 0);
  return python;
}

/// Writes the Parquet file `path` from `table`, a Python expression of a pyarrow table (`pa` is
/// pyarrow), `row_group_size` rows a row group; the script that does it is `path`.py.
void write_parquet(const std::string& path, const std::string& table, int row_group_size = 1024) {
  const std::string python = pyarrow_python(), script = path + ".py";
  std::ofstream(script) << "import pyarrow as pa, pyarrow.parquet as pq\n"
                        << "pq.write_table(" << table << ", '" << path << "', row_group_size=" << row_group_size
                        << ")\n";
  REQUIRE(std::system(("'" + python + "' '" + script + "'").c_str()) == 0);
}

/// An environment variable set for the scope (the odyssey processes the test starts inherit it).
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

}  // namespace

TEST_CASE("odyssey prepare: JSON lines and a text directory read back token for token, counts printed",
          "[cli][prepare]") {
  const std::string dir = make_dir("inputs");
  const std::string tokenizer = make_tokenizer(dir, kWords);
  // A blank line is no document; an empty text has no token and is skipped (counted).
  std::ofstream(dir + "/docs.jsonl") << "{\"text\": \"the cat sat\"}\n{\"text\": \"a dog ran on the mat\"}\n\n"
                                     << "{\"text\": \"\"}\n{\"text\": \"cat\", \"id\": 3}\n";
  const std::string out = dir + "/docs.odoc";
  Run r = run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 0);
  CHECK_THAT(r.out, Catch::Contains("prepared " + out + ": 3 documents, 10 tokens from 1 file(s)") &&
                        Catch::Contains("vocabulary 10") &&
                        Catch::Contains("longest document 6 tokens, median document 3 tokens, 1 empty skipped") &&
                        Catch::Contains("separator: none"));
  // Progress on stderr (one line per file when it is not a terminal).
  CHECK_THAT(r.err,
             Catch::Contains("prepare: [1/1] " + dir + "/docs.jsonl") && Catch::Contains("3 documents, 10 tokens"));
  DocumentsBytes d = read_documents(out);
  CHECK(d.vocab == 10);
  CHECK(d.index == Index{0, 3, 9, 10});
  CHECK(d.tokens == Tokens{2, 3, 4, 7, 8, 9, 5, 2, 6, 3});

  SECTION("an --out name of 250 bytes: its temporaries still fit the file system, the same tokens") {
    // The temporaries beside it took the whole name and 15 bytes more: "File name too long".
    const std::string long_out = dir + "/" + std::string(245, 'n') + ".odoc";
    require_exit(run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + long_out), 0);
    CHECK(read_documents(long_out).tokens == d.tokens);
  }
  SECTION("with stderr closed (2>&-) the same file, byte for byte") {
    // The documents file's temporary took descriptor 2, and the progress lines went into its
    // token area: a corrupt file, exit 0. The standard descriptors are held open on /dev/null.
    const std::string closed_out = dir + "/closed.odoc";
    const Run closed = run_shell(std::string(ODYSSEY_BIN_DIR) + "/odyssey prepare " + dir + "/docs.jsonl --tokenizer " +
                                 tokenizer + " --out " + closed_out + " 2>&- >/dev/null");
    require_exit(closed, 0);
    std::ifstream a(out, std::ios::binary), b(closed_out, std::ios::binary);
    const std::string want((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>()),
        got((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
    CHECK(got == want);
  }
  SECTION("--append-eos puts the tokenizer's </s> after every document, and --json says so") {
    const std::string eos_out = dir + "/eos.odoc";
    r = run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + dir + " --out " + eos_out + " --append-eos --json");
    require_exit(r, 0);
    const auto v = parse_json(r.out);
    REQUIRE(v.has_value());
    CHECK(v->at("documents").get<int64_t>() == 3);
    CHECK(v->at("tokens").get<int64_t>() == 13);
    CHECK(v->at("longest").get<int64_t>() == 7);
    CHECK(v->at("median").get<double>() == 4.0);
    CHECK(v->at("eos_id").get<int64_t>() == 1);
    d = read_documents(eos_out);
    CHECK(d.index == Index{0, 4, 11, 13});
    CHECK(d.tokens == Tokens{2, 3, 4, 1, 7, 8, 9, 5, 2, 6, 1, 3, 1});
  }
  SECTION("a Parquet file of the same texts, one a row, gives the same documents file byte for byte") {
    // Four rows in two row groups (3 + 1); the empty text is skipped as the JSON line's is.
    write_parquet(dir + "/docs.parquet",
                  "pa.table({'id': [1, 2, 3, 4], 'text': ['the cat sat', 'a dog ran on the mat', '', 'cat']})", 3);
    const std::string parquet_out = dir + "/parquet.odoc";
    r = run_odyssey("prepare " + dir + "/docs.parquet --tokenizer " + tokenizer + " --out " + parquet_out);
    require_exit(r, 0);
    CHECK_THAT(r.out, Catch::Contains("prepared " + parquet_out + ": 3 documents, 10 tokens from 1 file(s)") &&
                          Catch::Contains("longest document 6 tokens, median document 3 tokens, 1 empty skipped"));
    CHECK_THAT(r.err, Catch::Contains("prepare: [1/1] " + dir + "/docs.parquet"));
    CHECK(read_text(parquet_out) == read_text(out));
    d = read_documents(parquet_out);
    CHECK(d.index == Index{0, 3, 9, 10});
    CHECK(d.tokens == Tokens{2, 3, 4, 7, 8, 9, 5, 2, 6, 3});
  }
  SECTION("a directory mixing .jsonl and .parquet: its files in path order, Parquet rows in row order") {
    REQUIRE(std::system(("mkdir -p '" + dir + "/mixed/c'").c_str()) == 0);
    write_parquet(dir + "/mixed/b.parquet", "pa.table({'text': ['the mat', 'dog']})");
    std::ofstream(dir + "/mixed/a.jsonl") << "{\"text\": \"a cat\"}\n";
    write_parquet(dir + "/mixed/c/d.parquet", "pa.table({'text': pa.array(['sat on'], pa.large_string())})");
    const std::string mixed_out = dir + "/mixed.odoc";
    r = run_odyssey("prepare " + dir + "/mixed --tokenizer " + tokenizer + " --out " + mixed_out);
    require_exit(r, 0);
    CHECK_THAT(r.out, Catch::Contains("4 documents, 7 tokens from 3 file(s)"));
    CHECK_THAT(r.err, Catch::Contains("[1/3] " + dir + "/mixed/a.jsonl") &&
                          Catch::Contains("[2/3] " + dir + "/mixed/b.parquet") &&
                          Catch::Contains("[3/3] " + dir + "/mixed/c/d.parquet"));
    d = read_documents(mixed_out);
    CHECK(d.index == Index{0, 2, 4, 5, 7});
    CHECK(d.tokens == Tokens{7, 3, 2, 6, 8, 4, 5});
  }
  SECTION("a directory: its .txt files (recursively, sorted by path), each one document") {
    REQUIRE(std::system(("mkdir -p '" + dir + "/texts/sub'").c_str()) == 0);
    std::ofstream(dir + "/texts/b.txt") << "the mat\n";
    std::ofstream(dir + "/texts/a.txt") << "a cat\n\nsat";  // blank lines inside: still one document
    std::ofstream(dir + "/texts/sub/c.txt") << "dog";
    std::ofstream(dir + "/texts/notes.md") << "ran ran ran";  // not a text input: skipped by the walk
    const std::string dir_out = dir + "/texts.odoc";
    r = run_odyssey("prepare " + dir + "/texts --tokenizer " + tokenizer + " --out " + dir_out);
    require_exit(r, 0);
    CHECK_THAT(r.out, Catch::Contains("3 documents, 6 tokens from 3 file(s)"));
    d = read_documents(dir_out);
    CHECK(d.index == Index{0, 3, 5, 6});
    CHECK(d.tokens == Tokens{7, 3, 4, 2, 6, 8});
  }
  SECTION("a directory: extensions in any case; a text input's name that is no file is refused, not skipped") {
    REQUIRE(std::system(("mkdir -p '" + dir + "/cased' && ln -sf /nonexistent '" + dir + "/cased/gone.txt'").c_str()) ==
            0);
    std::ofstream(dir + "/cased/A.TXT") << "a cat";
    r = run_odyssey("prepare " + dir + "/cased --tokenizer " + tokenizer + " --out " + dir + "/cased.odoc");
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("input " + dir + "/cased/gone.txt: cannot read it"));
    CHECK_FALSE(std::ifstream(dir + "/cased.odoc").good());
    REQUIRE(std::remove((dir + "/cased/gone.txt").c_str()) == 0);
    r = run_odyssey("prepare " + dir + "/cased --tokenizer " + tokenizer + " --out " + dir + "/cased.odoc");
    require_exit(r, 0);
    CHECK_THAT(r.out, Catch::Contains("1 documents, 2 tokens from 1 file(s)"));
  }
  SECTION("an existing --out is refused and left as it was; --overwrite replaces it") {
    const std::string before = read_text(out);
    std::ofstream(dir + "/other.jsonl") << "{\"text\": \"dog dog\"}\n";
    r = run_odyssey("prepare " + dir + "/other.jsonl --tokenizer " + tokenizer + " --out " + out);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("--out " + out + " exists: pass --overwrite"));
    CHECK(read_text(out) == before);
    r = run_odyssey("prepare " + dir + "/other.jsonl --tokenizer " + tokenizer + " --out " + out + " --overwrite");
    require_exit(r, 0);
    CHECK(read_documents(out).tokens == Tokens{8, 8});
  }
  SECTION("an --out that is the tokenizer or the preset is refused, --overwrite or not, and left as it was") {
    const std::string tokenizer_before = read_text(tokenizer);
    r = run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + tokenizer + " --overwrite");
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("--out " + tokenizer + " is the tokenizer " + tokenizer));
    CHECK(read_text(tokenizer) == tokenizer_before);
    const std::string preset = dir + "/preset.toml";
    std::ofstream(preset) << read_text(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml");
    const std::string preset_before = read_text(preset);
    r = run_odyssey("prepare " + dir + "/docs.jsonl --preset " + preset + " --tokenizer " + tokenizer + " --out " +
                    preset + " --overwrite");
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains("--out " + preset + " is the preset " + preset));
    CHECK(read_text(preset) == preset_before);
  }
}

TEST_CASE("odyssey prepare: a bad line is FILE:LINE: rule with exit 2, and nothing is written", "[cli][prepare]") {
  const std::string dir = make_dir("bad");
  const std::string tokenizer = make_tokenizer(dir, kWords);
  const std::string out = dir + "/out.odoc";
  std::ofstream(dir + "/type.jsonl") << "{\"text\": \"the cat\"}\n{\"text\": 5}\n";
  Run r = run_odyssey("prepare " + dir + "/type.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/type.jsonl:2: \"text\" is a number, not a string"));
  std::ofstream(dir + "/syntax.jsonl") << "{\"text\": \"the cat\"}\n\n{\"text\": \"sat\"\n";
  r = run_odyssey("prepare " + dir + "/syntax.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/syntax.jsonl:3: invalid JSON") && Catch::Contains("(column "));
  std::ofstream(dir + "/field.jsonl") << "{\"content\": \"the cat\"}\n";
  r = run_odyssey("prepare " + dir + "/field.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/field.jsonl:1: no \"text\" field (the object has \"content\")"));
  // "text" twice in one object: JSON parsers keep the last, which one was meant is unknowable
  std::ofstream(dir + "/twice.jsonl")
      << "{\"text\": \"the cat\"}\n{\"text\": \"a\", \"meta\": {\"text\": 1}, \"text\": \"b\"}\n";
  r = run_odyssey("prepare " + dir + "/twice.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/twice.jsonl:2: \"text\" is given 2 times in one object: give it once"));
  // A line that is JSON but not an object is named with its value; bytes that are not UTF-8 with
  // their line and column, in JSON lines and in a plain text file; a \ud800 escape (a lone
  // surrogate, no Unicode character) with its place.
  const std::vector<std::pair<std::string, std::string>> bad_lines = {
      {"string.jsonl", "a JSON object with a \"text\" string field is expected, got a string: \"the cat\""},
      {"array.jsonl", "a JSON object with a \"text\" string field is expected, got an array: [\"the\", 1]"},
      {"null.jsonl", "a JSON object with a \"text\" string field is expected, got null: null"},
      {"latin1.jsonl", "latin1.jsonl:2: not UTF-8: byte 0xe9 at column 14 is invalid"},
      {"latin1.txt", "latin1.txt:2: not UTF-8: byte 0xe9 at column 4 is invalid"},
      {"surrogate.jsonl", "surrogate.jsonl:1: \"text\" holds a lone surrogate \\ud800 at character 5"},
      // Python's json reads NaN and Infinity, which JSON has not
      {"nan.jsonl", "nan.jsonl:2: invalid JSON: NaN is not JSON (JSON has no NaN or Infinity)"},
      // an object named as one (the reader's own dict class was named), and a line of a vertical
      // tab, which is no JSON whitespace, refused where it was skipped as blank
      {"object.jsonl", "object.jsonl:1: \"text\" is an object, not a string"},
      {"vtab.jsonl", "vtab.jsonl:2: invalid JSON"},
      // a file name that is not UTF-8: its line named, where the name broke the message (exit 1)
      {"name\xff.jsonl", ".jsonl:2: invalid JSON"},
  };
  std::ofstream(dir + "/object.jsonl") << "{\"text\": {\"a\": \"b\"}}\n";
  std::ofstream(dir + "/vtab.jsonl") << "{\"text\": \"the\"}\n\v\n";
  std::ofstream(dir + "/name\xff.jsonl") << "{\"text\": \"the\"}\nnot json\n";
  std::ofstream(dir + "/string.jsonl") << "{\"text\": \"the\"}\n\"the cat\"\n";
  std::ofstream(dir + "/array.jsonl") << "[\"the\", 1]\n";
  std::ofstream(dir + "/null.jsonl") << "null\n";
  std::ofstream(dir + "/latin1.jsonl") << "{\"text\": \"the\"}\n{\"text\": \"caf\xe9\"}\n";
  std::ofstream(dir + "/latin1.txt") << "the cat\ncaf\xe9 sat\n";
  std::ofstream(dir + "/surrogate.jsonl") << "{\"text\": \"the \\ud800\"}\n";
  std::ofstream(dir + "/nan.jsonl") << "{\"text\": \"the\"}\n{\"text\": \"cat\", \"score\": NaN}\n";
  for (const auto& [file, message] : bad_lines) {
    INFO(file);
    r = run_odyssey("prepare " + dir + "/" + file + " --tokenizer " + tokenizer + " --out " + out);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(message));
  }
  CHECK_FALSE(exists(out));
  // Nor a temporary beside it.
  CHECK(std::system(("ls -A '" + dir + "' | grep -q '^\\.out\\.odoc'").c_str()) != 0);
  // An integer of 5001 digits in a field prepare does not read is valid JSON (Python's own limit on
  // converting one was the message); as "text" it is a number.
  std::ofstream(dir + "/long_number.jsonl") << "{\"text\": \"the cat\", \"id\": 1" << std::string(5000, '0') << "}\n";
  require_exit(run_odyssey("prepare " + dir + "/long_number.jsonl --tokenizer " + tokenizer + " --out " + out), 0);
  std::ofstream(dir + "/long_text.jsonl") << "{\"text\": 1" << std::string(5000, '0') << "}\n";
  r = run_odyssey("prepare " + dir + "/long_text.jsonl --tokenizer " + tokenizer + " --out " + out + " --overwrite");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("long_text.jsonl:1: \"text\" is a number, not a string"));
  std::remove(out.c_str());

  // A missing tokenizer, and a model directory without one: exit 2, named.
  r = run_odyssey("prepare " + dir + "/type.jsonl --tokenizer " + dir + "/none.json --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--tokenizer " + dir + "/none.json: cannot read it"));
  REQUIRE(std::system(("mkdir -p '" + dir + "/model'").c_str()) == 0);
  r = run_odyssey("prepare " + dir + "/type.jsonl --tokenizer " + dir + "/model --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("a directory without tokenizer.json"));
  // One file reached twice (named twice, or inside a directory also named) would be written twice;
  // a value flag given twice names both values.
  std::ofstream(dir + "/twice.jsonl") << "{\"text\": \"the cat\"}\n";
  r = run_odyssey("prepare " + dir + "/twice.jsonl " + dir + "/twice.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("input " + dir + "/twice.jsonl is the file " + dir + "/twice.jsonl again"));
  r = run_odyssey("prepare " + dir + "/twice.jsonl --tokenizer " + tokenizer + " --out " + out + " --out " + out + "2");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out given twice"));
  // No tokenizer at all: --preset without model.hf_path names what is missing.
  r = run_odyssey("prepare " + dir + "/type.jsonl --preset presets/tiny-cpu.toml --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--preset presets/tiny-cpu.toml has no model.hf_path"));
  CHECK_FALSE(exists(out));
  // A tokenizer_config.json beside the tokenizer is read for its eos_token only with --append-eos:
  // a broken one stops that run alone.
  REQUIRE(std::system(("mkdir -p '" + dir + "/with_config'").c_str()) == 0);
  const std::string configured = make_tokenizer(dir + "/with_config", kWords);
  std::ofstream(dir + "/with_config/tokenizer_config.json") << "{broken";
  r = run_odyssey("prepare " + dir + "/twice.jsonl --tokenizer " + configured + " --out " + out + " --append-eos");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/with_config/tokenizer_config.json: not a JSON object"));
  CHECK_FALSE(exists(out));
  // one that is there but no file (a directory, a FIFO) is refused, not read as absent
  REQUIRE(std::system(("rm -f '" + dir + "/with_config/tokenizer_config.json' && mkdir '" + dir +
                       "/with_config/tokenizer_config.json'")
                          .c_str()) == 0);
  r = run_odyssey("prepare " + dir + "/twice.jsonl --tokenizer " + configured + " --out " + out + " --append-eos");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/with_config/tokenizer_config.json: not a regular file"));
  CHECK_FALSE(exists(out));
  REQUIRE(std::system(("rmdir '" + dir + "/with_config/tokenizer_config.json'").c_str()) == 0);
  // an eos_token that is no token is refused, not passed over for another special token
  std::ofstream(dir + "/with_config/tokenizer_config.json", std::ios::trunc) << "{\"eos_token\": 5}";
  r = run_odyssey("prepare " + dir + "/twice.jsonl --tokenizer " + configured + " --out " + out + " --append-eos");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("tokenizer_config.json: eos_token 5 is not a token"));
  CHECK_FALSE(exists(out));
  // an --out that is a link (to nothing here) is refused before the tokenizing, --overwrite or not
  REQUIRE(::symlink((dir + "/nowhere/x.odoc").c_str(), (dir + "/link.odoc").c_str()) == 0);
  r = run_odyssey("prepare " + dir + "/twice.jsonl --tokenizer " + tokenizer + " --out " + dir +
                  "/link.odoc --overwrite");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("--out " + dir + "/link.odoc is a symbolic link"));
  require_exit(run_odyssey("prepare " + dir + "/twice.jsonl --tokenizer " + configured + " --out " + out), 0);
  CHECK(exists(out));
}

TEST_CASE("odyssey prepare --preset: the tokenizer of the preset's model.hf_path, as --tokenizer gives it",
          "[cli][prepare]") {
  // A Hugging Face model directory (a tied Llama built by transformers, vocabulary 128) with a
  // tokenizer.json of its own, named by the preset's model.hf_path: prepare finds the tokenizer
  // there and writes the file that --tokenizer on the same directory writes, byte for byte.
  const std::string dir = make_dir("preset_hf_path"), model = dir + "/model";
  REQUIRE(std::system(("cp -r '" + hf_fixture("llama-tied-bf16-sharded") + "' '" + model + "'").c_str()) == 0);
  make_tokenizer(model, kWords);
  std::ofstream(dir + "/in.jsonl") << "{\"text\": \"the cat sat on a mat\"}\n{\"text\": \"a dog ran\"}\n";
  const Run by_preset = run_odyssey("prepare " + dir +
                                    "/in.jsonl --preset presets/tiny-cpu.toml --set model.flavor=hf "
                                    "--set model.hf_path=" +
                                    model + " --out " + dir + "/by_preset.odoc");
  require_exit(by_preset, 0);
  CHECK_THAT(by_preset.out + by_preset.err, Catch::Contains(model + "/tokenizer.json"));
  const Run by_tokenizer =
      run_odyssey("prepare " + dir + "/in.jsonl --tokenizer " + model + " --out " + dir + "/by_tokenizer.odoc");
  require_exit(by_tokenizer, 0);
  const std::string a = read_text(dir + "/by_preset.odoc"), b = read_text(dir + "/by_tokenizer.odoc");
  CHECK(a.size() > 64);
  CHECK(a == b);
  CHECK(read_documents(dir + "/by_preset.odoc").tokens == std::vector<uint32_t>{2, 3, 4, 5, 7, 6, 7, 8, 9});
  // A preset that names the file prepare is about to write, as a user writes them (preset first):
  // its data file is not read (prepare refused it as missing).
  const Run first = run_odyssey(
      "prepare " + dir + "/in.jsonl --preset presets/tiny-cpu.toml --set model.flavor=hf --set model.hf_path=" + model +
      " --set training.dataset=documents --set training.document_mask=true " + "--set training.dataset_path=" + dir +
      "/first.odoc --out " + dir + "/first.odoc");
  require_exit(first, 0);
  CHECK(read_text(dir + "/first.odoc") == a);
  // The preset's model directory without a tokenizer.json: named as the preset's, not as a
  // --tokenizer that was never given.
  const std::string bare = dir + "/bare_model";
  REQUIRE(std::system(("cp -r '" + model + "' '" + bare + "' && rm '" + bare + "/tokenizer.json'").c_str()) == 0);
  const Run no_tokenizer = run_odyssey("prepare " + dir +
                                       "/in.jsonl --preset presets/tiny-cpu.toml --set model.flavor=hf "
                                       "--set model.hf_path=" +
                                       bare + " --out " + dir + "/bare.odoc");
  require_exit(no_tokenizer, 2);
  CHECK_THAT(no_tokenizer.err, Catch::Contains("--preset presets/tiny-cpu.toml's model.hf_path " + bare +
                                               ": a directory without tokenizer.json") &&
                                   !Catch::Contains("--tokenizer " + bare));

  // Another tokenizer than the model's (12 words, not its 10): its ids are not the model's tokens.
  // prepare --preset refuses it before a document is written; a file made with it is refused by
  // check and train against the preset's model.hf_path, naming both vocabularies.
  REQUIRE(std::system(("mkdir -p '" + dir + "/other'").c_str()) == 0);
  std::vector<std::string> other_words = kWords;
  other_words.push_back("bird");
  other_words.push_back("flew");
  const std::string other = make_tokenizer(dir + "/other", other_words);
  const std::string preset = "--preset presets/tiny-cpu.toml --set model.flavor=hf --set model.hf_path=" + model;
  Run r =
      run_odyssey("prepare " + dir + "/in.jsonl " + preset + " --tokenizer " + other + " --out " + dir + "/mixed.odoc");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("its vocabulary holds 12 tokens, and the tokenizer.json of --preset "
                                    "presets/tiny-cpu.toml's model.hf_path " +
                                    model + " holds 10"));
  CHECK_FALSE(exists(dir + "/mixed.odoc"));
  require_exit(run_odyssey("prepare " + dir + "/in.jsonl --tokenizer " + other + " --out " + dir + "/other.odoc"), 0);
  auto on = [&](const std::string& file) {  // the tiny preset on the model directory, trained on `file`
    return "presets/tiny-cpu.toml --set model.flavor=hf --set model.hf_path=" + model +
           " --set parallel.world_size=1 --set parallel.ulysses_degree=1 --set parallel.fsdp=false --set "
           "training.seq_len=8 --set training.dataset=documents --set training.dataset_path=" +
           dir + "/" + file;
  };
  const std::string train_sets = on("other.odoc");
  const std::string refused =
      "prepared with a tokenizer of 12 tokens, and model.hf_path " + model + " holds a tokenizer.json of 10";
  r = run_odyssey("check " + train_sets);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(refused));
  r = run_odyssey("train " + train_sets + " --steps 1 --quiet --out " + dir + "/run");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(refused));
  require_exit(run_odyssey("check " + on("by_preset.odoc")), 0);  // the model's own tokenizer
}

TEST_CASE("odyssey prepare: a bad Parquet file is FILE[:row N]: rule with exit 2, and nothing is written",
          "[cli][prepare]") {
  const std::string dir = make_dir("bad_parquet");
  const std::string tokenizer = make_tokenizer(dir, kWords);
  const std::string out = dir + "/out.odoc";
  std::ofstream(dir + "/good.jsonl") << "{\"text\": \"the cat\"}\n";
  const std::string rule = "(a Parquet input is one document a row, the row's \"text\" string)";
  struct Bad {
    const char* name;
    const char* table;
    std::string message;  // after "DIR/NAME.parquet"
  };
  const std::vector<Bad> cases = {
      {"no_text", "pa.table({'content': ['the cat'], 'id': [7]})",
       ": no \"text\" column (the columns are \"content\", \"id\"; a Parquet input is one document a row, the row's "
       "\"text\" string)"},
      {"number", "pa.table({'text': [5, 6]})",
       ":row 1: \"text\" is a number (5) in a column of int64, not a string " + rule},
      {"null", "pa.table({'text': ['the cat', 'a dog', None, 'sat']})",
       ":row 3: \"text\" is null, not a string " + rule},
      {"bytes", "pa.table({'text': pa.array([b'the cat'], pa.binary())})",
       ":row 1: \"text\" is bytes (b'the cat') in a column of binary, not a string " + rule},
      {"utf8", "pa.table({'text': pa.array([b'the cat', b'a \\xff dog'], pa.binary()).view(pa.string())})",
       ":row 2, line 1 of \"text\": not UTF-8: byte 0xff at column 3 is invalid (invalid start byte)"},
  };
  for (const auto& bad : cases) {
    INFO("case " << bad.name);
    const std::string parquet = dir + "/" + bad.name + ".parquet";
    write_parquet(parquet, bad.table);
    // After a good file: its documents are not written either.
    const Run r =
        run_odyssey("prepare " + dir + "/good.jsonl " + parquet + " --tokenizer " + tokenizer + " --out " + out);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(parquet + bad.message));
    CHECK_FALSE(exists(out));
  }
  // A page whose checksum fails (a byte of its text flipped, the file written with checksums) is
  // refused: read unchecked, the flipped text was tokenized as the document.
  {
    const std::string parquet = dir + "/flipped.parquet", script = parquet + ".py";
    std::ofstream(script) << "import pyarrow as pa, pyarrow.parquet as pq, sys\n"
                          << "path = sys.argv[1]\n"
                          << "pq.write_table(pa.table({'text': ['the cat sat here', 'a dog']}), path, "
                             "write_page_checksum=True, compression='none')\n"
                          << "data = bytearray(open(path, 'rb').read())\n"
                          << "at = data.index(b'the cat sat here')\n"
                          << "data[at] ^= 0x01\n"
                          << "open(path, 'wb').write(bytes(data))\n";
    REQUIRE(std::system(("'" + pyarrow_python() + "' '" + script + "' '" + parquet + "'").c_str()) == 0);
    const Run flipped = run_odyssey("prepare " + parquet + " --tokenizer " + tokenizer + " --out " + out);
    require_exit(flipped, 2);
    CHECK_THAT(flipped.err, Catch::Contains(parquet + ": pyarrow cannot read the rows after row 0") &&
                                Catch::Contains("CRC checksum verification failed"));
    CHECK_FALSE(exists(out));
  }
  std::ofstream(dir + "/junk.parquet") << "{\"text\": \"the cat\"}\n";
  Run r = run_odyssey("prepare " + dir + "/junk.parquet --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/junk.parquet: not a Parquet file pyarrow reads"));
  CHECK_FALSE(exists(out));
  CHECK(std::system(("ls -A '" + dir + "' | grep -q '^\\.out\\.odoc'").c_str()) != 0);

  // A Python without pyarrow (a package of that name that fails to import shadows it): a runtime
  // failure, exit 1, that names the file and `make deps`, before any file is tokenized.
  REQUIRE(std::system(("mkdir -p '" + dir + "/shadow/pyarrow'").c_str()) == 0);
  std::ofstream(dir + "/shadow/pyarrow/__init__.py") << "raise ImportError('no pyarrow here')\n";
  {
    const ScopedEnv shadow("PYTHONPATH", dir + "/shadow");
    r = run_odyssey("prepare " + dir + "/good.jsonl " + dir + "/null.parquet --tokenizer " + tokenizer + " --out " +
                    out);
  }
  require_exit(r, 1);
  CHECK_THAT(r.err, Catch::Contains(dir + "/null.parquet is a Parquet file, and the Python at") &&
                        Catch::Contains("cannot import `pyarrow` (no pyarrow here): `make deps` installs it"));
  CHECK_THAT(r.err, !Catch::Contains("[1/2]"));
  CHECK_FALSE(exists(out));
}

TEST_CASE("odyssey prepare and train: a tokenizer larger than the model's vocabulary is refused, exit 2",
          "[cli][prepare]") {
  const std::string dir = make_dir("vocab");
  std::vector<std::string> words = {"[UNK]", "</s>"};
  for (int i = 0; i < 298; ++i) words.push_back("w" + std::to_string(i));
  const std::string tokenizer = make_tokenizer(dir, words);  // 300 tokens; tiny's model.vocab_size is 256
  std::string text;
  for (int i = 0; i < 200; ++i) text += "w" + std::to_string(i % 298) + " ";
  std::ofstream(dir + "/big.jsonl") << "{\"text\": \"" << text << "\"}\n";
  const std::string out = dir + "/big.odoc";
  Run r = run_odyssey("prepare " + dir + "/big.jsonl --tokenizer " + tokenizer +
                      " --preset presets/tiny-cpu.toml --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains("its vocabulary holds 300 tokens, more than model.vocab_size = 256 of --preset "
                                    "presets/tiny-cpu.toml"));
  CHECK_FALSE(exists(out));
  // Prepared without a preset, the trainer refuses it, naming the file and both vocabularies.
  r = run_odyssey("prepare " + dir + "/big.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 0);
  r = run_odyssey("train " + kTiny +
                  "--set training.seq_len=64 --set training.dataset=documents --set training.dataset_path=" + out +
                  " --steps 1 --quiet --out " + dir + "/run");
  require_exit(r, 2);
  CHECK_THAT(r.out + r.err, Catch::Contains(out) && Catch::Contains("vocab_size = 300 (the tokenizer's vocabulary) is "
                                                                    "larger than model.vocab_size = 256"));
}

TEST_CASE("odyssey train: two steps on a prepared file, split and refuse packing", "[cli][prepare][train]") {
  const std::string dir = make_dir("train");
  const std::string tokenizer = make_tokenizer(dir, kWords);
  // 40 documents of 1 to 12 words (about 260 tokens), then one of 80 words.
  std::ofstream jsonl(dir + "/docs.jsonl");
  for (int d = 0; d < 40; ++d) {
    std::string text;
    for (int w = 0; w <= d % 12; ++w) text += kWords[2 + (d * 7 + w * 3) % 8] + " ";
    jsonl << "{\"text\": \"" << text << "\"}\n";
  }
  std::string long_text;
  for (int w = 0; w < 80; ++w) long_text += kWords[2 + w % 8] + " ";
  jsonl << "{\"text\": \"" << long_text << "\"}\n";
  jsonl.close();
  const std::string out = dir + "/docs.odoc";
  require_exit(run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + out), 0);
  const std::string documents = kShort +
                                "--set training.seq_len=64 --set training.dataset=documents "
                                "--set training.dataset_path=" +
                                out + " --steps 2 --quiet ";
  for (const char* packing : {"split", "refuse"}) {
    INFO("document_packing = " << packing);
    const std::string run_dir = dir + "/run_" + packing;
    const std::string set_packing = std::string("--set training.document_packing=") + packing + " ";
    if (std::string(packing) == "refuse") {
      // The 80-word document does not fit 65 tokens: refused, named by number and length.
      const Run r = run_odyssey("train " + documents + set_packing + "--out " + run_dir);
      require_exit(r, 2);
      CHECK_THAT(r.out + r.err, Catch::Contains(out) && Catch::Contains("document 40 holds 80 tokens, more than "
                                                                        "training.seq_len + 1 = 65"));
      // With a sequence that holds it, refuse packing trains.
    }
    const std::string seq = std::string(packing) == "refuse" ? "--set training.seq_len=128 " : "";
    const Run r = run_odyssey("train " + documents + set_packing + seq + "--out " + run_dir + " --overwrite");
    require_exit(r, 0);
    const auto loss = losses(run_dir);
    REQUIRE(loss.size() == 2);
    for (const auto& [step, value] : loss) {
      CHECK(std::isfinite(value));
      CHECK(value > 0.0);
    }
    const auto summary = parse_json(read_text(run_dir + "/summary.json"));
    REQUIRE(summary.has_value());
    CHECK(summary->at("status").get<std::string>() == "finished");
  }
  // Document masking on the same file: it trains, and its first loss is not the unmasked one
  // (attention and targets across the boundaries are gone; the engine suites prove the values).
  const std::string masked_dir = dir + "/run_masked";
  require_exit(run_odyssey("train " + documents + "--set training.document_mask=true --out " + masked_dir), 0);
  const auto masked = losses(masked_dir), unmasked = losses(dir + "/run_split");
  REQUIRE(masked.size() == 2);
  CHECK(std::isfinite(masked.begin()->second));
  CHECK(masked.begin()->second != unmasked.begin()->second);

  // The planner counts the documents' attention: one token a word, so the documents are 1 to 12
  // tokens (d % 12 + 1) and one of 80; at S = 64 the short ones are triangles n (n + 1) / 2 and
  // the 80-token one (S + 1) / 2 pairs a token, against (S + 1) / 2 a token over whole sequences.
  double pairs = 80 * 65 / 2.0, tokens = 80;
  for (int d = 0; d < 40; ++d) {
    const double n = d % 12 + 1;
    pairs += n * (n + 1) / 2;
    tokens += n;
  }
  const std::string plan = "plan " + kTiny +
                           "--set training.seq_len=64 --set training.dataset=documents "
                           "--set training.dataset_path=" +
                           out + " --json ";
  const Run whole = run_odyssey(plan), documents_only = run_odyssey(plan + "--set training.document_mask=true");
  require_exit(whole, 0);
  require_exit(documents_only, 0);
  const auto whole_json = parse_json(whole.out), masked_json = parse_json(documents_only.out);
  REQUIRE(whole_json.has_value());
  REQUIRE(masked_json.has_value());
  const auto& masked_time = masked_json->at("time");
  CHECK(whole_json->at("time").at("attention_pair_fraction").get<double>() == 1.0);
  CHECK(masked_time.at("attention_pair_fraction").get<double>() == Approx(pairs / (tokens * 65 / 2.0)).epsilon(1e-12));
  CHECK(masked_time.at("attention_flops_per_token").get<double>() ==
        Approx(whole_json->at("time").at("attention_flops_per_token").get<double>() * pairs / (tokens * 65 / 2.0)));
  // a data file the planner cannot read is refused, named
  const Run missing = run_odyssey("plan " + kTiny +
                                  "--set training.dataset=documents --set training.document_mask=true "
                                  "--set training.dataset_path=" +
                                  dir + "/absent.odoc");
  require_exit(missing, 2);
  CHECK_THAT(missing.err, Catch::Contains("absent.odoc"));
}

TEST_CASE("odyssey check and plan: a documents preset whose file is missing is FILE:LINE:COL, exit 2",
          "[cli][prepare]") {
  // check validated the preset's text only and passed what plan and train refuse (the planner
  // reads the documents' lengths); both now name the key's line.
  const std::string dir = make_dir("check_documents");
  const std::string preset = dir + "/documents.toml";
  std::ofstream(preset) << "[model]\nflavor = \"tiny\"\n[training]\nseq_len = 512\ndataset = \"documents\"\n"
                           "dataset_path = \""
                        << dir << "/absent.odoc\"\ndocument_mask = true\n";
  for (const std::string& command : {std::string("check "), std::string("plan ")}) {
    INFO(command);
    const Run r = run_odyssey(command + preset);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(preset + ":6:1: training.dataset_path = \"" + dir + "/absent.odoc\": data file"));
  }
}

TEST_CASE("odyssey check: a data file odyssey train would refuse is refused at its line, every dataset kind",
          "[cli][prepare]") {
  // check read a documents file only for the planner (under document masking), and no token or
  // byte file at all, so it passed presets whose data train refuses before its first step. It now
  // opens the data as train does (make_dataset), naming the preset's training.dataset_path line.
  const std::string dir = make_dir("check_data");
  const std::string tokenizer = make_tokenizer(dir, kWords);
  std::ofstream(dir + "/docs.jsonl") << "{\"text\": \"the cat sat on the mat\"}\n"
                                     << "{\"text\": \"a dog ran on the mat the cat sat on a mat a dog ran\"}\n";
  const std::string docs = dir + "/docs.odoc";  // documents of 6 and 15 tokens: 21 tokens in all
  require_exit(run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + docs), 0);
  std::ofstream(dir + "/bytes.txt") << "twelve bytes";
  std::ofstream(dir + "/not_llmc.bin") << std::string(2048, 'x');  // no llm.c magic
  struct Case {
    std::string dataset, path, sets, rule;
  };
  const std::vector<Case> cases = {
      {"documents", dir + "/absent.odoc", "", "absent.odoc"},  // no masking: the planner never read it
      {"documents", docs, "seq_len = 32\n", "holds 21 tokens, fewer than training.seq_len + 1 = 33"},
      {"documents", docs, "seq_len = 8\ndocument_packing = \"refuse\"\n",
       "document 1 holds 15 tokens, more than training.seq_len + 1 = 9"},
      {"bytes", dir + "/bytes.txt", "seq_len = 16\n", "holds 12 tokens, fewer than training.seq_len + 1 = 17"},
      {"tokens", dir + "/not_llmc.bin", "seq_len = 16\n", "wrong magic"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO(c.dataset << " " << c.path << " " << c.sets);
    const std::string preset = dir + "/preset" + std::to_string(i) + ".toml";
    std::ofstream(preset) << "[model]\nflavor = \"tiny\"\n[training]\ndataset = \"" << c.dataset
                          << "\"\ndataset_path = \"" << c.path << "\"\n"
                          << (c.sets.empty() ? "seq_len = 16\n" : c.sets);
    const Run r = run_odyssey("check " + preset);
    require_exit(r, 2);
    CHECK_THAT(r.err, Catch::Contains(preset + ":5:1: training.dataset_path = \"" + c.path + "\": ") &&
                          Catch::Contains(c.rule));
    const Run json = run_odyssey("check " + preset + " --json");
    require_exit(json, 2);
    const auto v = parse_json(json.out);
    REQUIRE(v.has_value());
    CHECK(v->at("presets")[0].at("issues")[0].at("key").get<std::string>() == "training.dataset_path");
  }
  // The same file where train takes it: split packing of a sequence the file holds.
  const std::string good = dir + "/good.toml";
  std::ofstream(good) << "[model]\nflavor = \"tiny\"\n[training]\ndataset = \"documents\"\ndataset_path = \"" << docs
                      << "\"\nseq_len = 8\n";
  require_exit(run_odyssey("check " + good), 0);
}

TEST_CASE("odyssey prepare: a long document in pieces gives its own tokens, and a saved truncation cuts nothing",
          "[cli][prepare]") {
  // Independent of the CPU: the tokens are integers from the tokenizers library, compared exactly.
  const std::string dir = make_dir("pieces"), python = tokenizers_python();
  // A byte-level BPE (GPT-2's pre-tokenizer) and a Metaspace one (it marks the start of a text: no
  // cut after a line break gives the same tokens, one before a space does), trained here; a 30 000-
  // character text of words, digits, blank and indented lines, whose whole encoding is the expected
  // file. The script also checks the cutting itself (scripts/prepare_text.py's pieces): several
  // pieces for both, and for the text as one line (no line break at all) the same tokens apart.
  std::ofstream(dir + "/make.py")
      << "import importlib.util, os, random, sys\n"
      << "from tokenizers import Tokenizer, models, pre_tokenizers, trainers\n"
      << "dir = sys.argv[1]\n"
      << "random.seed(7)\n"
      << "words = ['alpha', 'beta', 'gamma', 'delta', '12345', 'x', 'déjà', '(', ')', ':', '!']\n"
      << "lines = []\n"
      << "while sum(len(l) + 1 for l in lines) < 30000:\n"
      << "    k = random.randrange(6)\n"
      << "    lines.append('' if k == 0 else ('    ' if k == 1 else '') + ' '.join(random.choice(words) "
         "for _ in range(random.randrange(1, 9))))\n"
      << "text = '\\n'.join(lines) + '\\n'\n"
      << "open(os.path.join(dir, 'long.txt'), 'w', encoding='utf-8').write(text)\n"
      << "spec = importlib.util.spec_from_file_location('prep', sys.argv[2])\n"
      << "prep = importlib.util.module_from_spec(spec); spec.loader.exec_module(prep)\n"
      << "prep.PIECE_CHARS = 500\n"
      << "for name, pre in (('bpe', pre_tokenizers.ByteLevel(add_prefix_space=False)),\n"
      << "                  ('metaspace', pre_tokenizers.Metaspace(prepend_scheme='first'))):\n"
      << "    tok = Tokenizer(models.BPE())\n"
      << "    tok.pre_tokenizer = pre\n"
      << "    alphabet = pre_tokenizers.ByteLevel.alphabet() if name == 'bpe' else []\n"
      << "    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=300, initial_alphabet=alphabet, "
         "show_progress=False))\n"
      << "    tok.save(os.path.join(dir, name + '.json'))\n"
      << "    pieces = list(prep.pieces(tok, text))\n"
      << "    assert ''.join(pieces) == text\n"
      << "    assert len(pieces) > 10, (name, len(pieces))\n"
      << "    ids = tok.encode(text, add_special_tokens=False).ids\n"
      << "    # one long line (no line break to cut at): cut before a space between words, same tokens\n"
      << "    line = text.replace('\\n', ' ')\n"
      << "    pieces = list(prep.pieces(tok, line))\n"
      << "    assert ''.join(pieces) == line\n"
      << "    assert len(pieces) > 10, (name, 'line', len(pieces))\n"
      << "    apart = [i for p in pieces for i in tok.encode(p, add_special_tokens=False).ids]\n"
      << "    assert apart == tok.encode(line, add_special_tokens=False).ids, (name, 'line tokens')\n"
      << "    open(os.path.join(dir, name + '.ids'), 'w').write(' '.join(map(str, ids)))\n"
      << "# A WordLevel tokenizer saved with truncation to 2 tokens and padding to 6\n"
      << "tok = Tokenizer(models.WordLevel({'[UNK]': 0, '[PAD]': 1, 'a': 2, 'b': 3}, unk_token='[UNK]'))\n"
      << "tok.pre_tokenizer = pre_tokenizers.Whitespace()\n"
      << "tok.enable_truncation(max_length=2)\n"
      << "tok.enable_padding(length=6, pad_id=1, pad_token='[PAD]')\n"
      << "tok.save(os.path.join(dir, 'truncating.json'))\n";
  REQUIRE(std::system(("'" + python + "' '" + dir + "/make.py' '" + dir + "' '" + ODYSSEY_SOURCE_DIR +
                       "/scripts/prepare_text.py'")
                          .c_str()) == 0);
  const ScopedEnv pieces("ODYSSEY_PREPARE_PIECE_CHARS", "500");
  for (const std::string name : {"bpe", "metaspace"}) {
    INFO(name);
    const Run r = run_odyssey("prepare " + dir + "/long.txt --tokenizer " + dir + "/" + name + ".json --out " + dir +
                              "/" + name + ".odoc");
    require_exit(r, 0);
    std::istringstream expected_text(read_text(dir + "/" + name + ".ids"));
    Tokens expected;
    for (uint32_t id = 0; expected_text >> id;) expected.push_back(id);
    REQUIRE(expected.size() > 1000);
    const DocumentsBytes d = read_documents(dir + "/" + name + ".odoc");
    CHECK(d.index == Index{0, expected.size()});  // one document, its tokens whole
    CHECK(d.tokens == expected);
  }
  // Truncation and padding saved in the tokenizer.json would cut "a b a b a" to 2 tokens and pad
  // "b" to 6: every document is kept as written.
  std::ofstream(dir + "/ab.jsonl") << "{\"text\": \"a b a b a\"}\n{\"text\": \"b\"}\n";
  const Run r =
      run_odyssey("prepare " + dir + "/ab.jsonl --tokenizer " + dir + "/truncating.json --out " + dir + "/ab.odoc");
  require_exit(r, 0);
  const DocumentsBytes d = read_documents(dir + "/ab.odoc");
  CHECK(d.index == Index{0, 5, 6});
  CHECK(d.tokens == Tokens{2, 3, 2, 3, 2, 3});
  // A piece length that is no number is the user's setting: bad input (exit 2) naming the variable.
  const ScopedEnv bad("ODYSSEY_PREPARE_PIECE_CHARS", "lots");
  const Run refused =
      run_odyssey("prepare " + dir + "/ab.jsonl --tokenizer " + dir + "/truncating.json --out " + dir + "/never.odoc");
  CHECK(refused.code == 2);
  CHECK_THAT(refused.err, Catch::Contains("ODYSSEY_PREPARE_PIECE_CHARS=lots: must be a whole number"));
  CHECK_FALSE(exists(dir + "/never.odoc"));
}

TEST_CASE("odyssey prepare: SIGINT and SIGTERM end it at once, exit 130 / 143, nothing written",
          "[cli][prepare][signals]") {
  // The tokenizer process is a stand-in that never answers (ODYSSEY_PYTHON): prepare is in its
  // loop, its handler installed, when the stand-in starts, so the signal lands there every time.
  const std::string dir = make_dir("signals");
  const std::string tokenizer = make_tokenizer(dir, kWords);
  std::ofstream(dir + "/docs.jsonl") << "{\"text\": \"the cat sat\"}\n";
  const std::string stand_in = dir + "/silent_python.sh", started = dir + "/started";
  std::ofstream(stand_in) << "#!/bin/sh\n: > '" << started << "'\nexec sleep 600\n";
  REQUIRE(::chmod(stand_in.c_str(), 0755) == 0);
  for (const int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    ::unlink(started.c_str());
    const std::string out = dir + "/stopped_" + std::to_string(sig) + ".odoc", log = out + ".log";
    const pid_t pid = spawn_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + out, log,
                                    "ODYSSEY_PYTHON=" + stand_in);
    for (int i = 0; i < 6000 && !exists(started); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(exists(started));
    CHECK(exit_code_after_signal(pid, sig, log) == 128 + sig);
    CHECK_THAT(read_text(log), Catch::Contains(std::string("stopped by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM")));
    CHECK_FALSE(exists(out));
  }
  // Nothing beside the inputs: no temporary of either --out was left.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    INFO(name);
    const bool log = name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0;
    CHECK((log || name.find(".odoc") == std::string::npos));
  }
}

TEST_CASE("odyssey prepare: ODYSSEY_PREPARE_PIECE_CHARS=1 ends, and a value that is no piece length is bad input",
          "[cli][prepare]") {
  // A piece length of 1 made a window of 0 characters that never moved: prepare never ended (the
  // timeout kills odyssey and its tokenizer process, one process group: exit 137). A value that is
  // no whole number above 0 is the user's setting, refused as bad input (exit 2), not exit 1.
  const std::string dir = make_dir("piece_chars");
  const std::string tokenizer = make_tokenizer(dir, kWords);
  std::ofstream(dir + "/lines.txt") << "the cat\nsat on\nthe mat\n\na dog\n\nran\n";
  const std::string out = dir + "/one.odoc";
  const Run r =
      run_shell("OMP_NUM_THREADS=1 ODYSSEY_PREPARE_PIECE_CHARS=1 timeout -s KILL 120 " + std::string(ODYSSEY_BIN_DIR) +
                "/odyssey prepare " + dir + "/lines.txt --tokenizer " + tokenizer + " --out " + out + " 2>&1");
  require_exit(r, 0);
  const DocumentsBytes d = read_documents(out);
  CHECK(d.index == Index{0, 9});
  CHECK(d.tokens == Tokens{2, 3, 4, 5, 2, 6, 7, 8, 9});
  for (const std::string value : {"0", "abc", "-3", ""}) {
    INFO("ODYSSEY_PREPARE_PIECE_CHARS=" << value);
    const ScopedEnv bad("ODYSSEY_PREPARE_PIECE_CHARS", value);
    const Run refused =
        run_odyssey("prepare " + dir + "/lines.txt --tokenizer " + tokenizer + " --out " + dir + "/never.odoc");
    require_exit(refused, 2);
    CHECK_THAT(refused.err, Catch::Contains("ODYSSEY_PREPARE_PIECE_CHARS=" + value +
                                            ": must be a whole number of characters above 0"));
    CHECK_FALSE(exists(dir + "/never.odoc"));
  }
}

TEST_CASE("odyssey prepare: text the tokenizer would drop (no unk token, no byte fallback) is refused, named",
          "[cli][prepare]") {
  // A BPE over a, b, c and ab without an unk token or byte fallback has no token for "d": the
  // tokenizers library leaves it out, and prepare wrote the rest, exit 0, the "d" lost unsaid.
  const std::string dir = make_dir("drops"), tokenizer = dir + "/tokenizer.json";
  std::ofstream(tokenizer) << R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3}, "merges": ["a b"]}})";
  std::ofstream(dir + "/docs.jsonl") << "{\"text\": \"abc\"}\n{\"text\": \"ab d c\"}\n";
  std::ofstream(dir + "/doc.txt") << "abc\nab\nc abd\n";
  const std::string out = dir + "/out.odoc";
  Run r = run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/docs.jsonl:2: the tokenizer " + tokenizer +
                                    " drops \"d\" (U+0064, character 4 of its \"text\")") &&
                        Catch::Contains("use a tokenizer with byte fallback or an unk token"));
  // A text file is one document: the line and column of the first dropped character.
  r = run_odyssey("prepare " + dir + "/doc.txt --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err,
             Catch::Contains(dir + "/doc.txt:3: the tokenizer " + tokenizer + " drops \"d\" (U+0064, column 5)"));
  CHECK_FALSE(exists(out));
  // The spaces the BPE has no token for either are white space, not text: what it can spell is written.
  std::ofstream(dir + "/fine.jsonl") << "{\"text\": \"ab c\"}\n";
  require_exit(run_odyssey("prepare " + dir + "/fine.jsonl --tokenizer " + tokenizer + " --out " + out), 0);
  CHECK(read_documents(out).tokens == Tokens{3, 2});
  // A BPE's symbol for a character inside a word carries its continuing-subword prefix, and at a
  // word's end its end-of-word suffix: "t" without "##t" drops the t of "cat"; "!</w>" spells a
  // final "!" (the BEL the normalizer removes is its rule, no loss).
  const std::string prefixed = dir + "/prefixed.json", suffixed = dir + "/suffixed.json";
  std::ofstream(prefixed) << R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
    "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,
    "unk_token":null,"continuing_subword_prefix":"##","end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,
    "ignore_merges":false,"vocab":{"c":0,"##a":1,"a":2,"t":4,"h":5,"##e":6,"##l":7,"##o":8,"ca":9},"merges":[]}})";
  std::ofstream(suffixed)
      << R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":{"type":"BertNormalizer",
    "clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
    "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,
    "unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":"</w>","fuse_unk":false,
    "byte_fallback":false,"ignore_merges":false,"vocab":{"h":0,"i</w>":1,"!</w>":2},"merges":[]}})";
  std::ofstream(dir + "/cat.jsonl") << "{\"text\": \"cat at hello\"}\n";
  std::ofstream(dir + "/hi.jsonl") << "{\"text\": \"hi!\\u0007\"}\n";
  r = run_odyssey("prepare " + dir + "/cat.jsonl --tokenizer " + prefixed + " --out " + out + " --overwrite");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/cat.jsonl:1: the tokenizer " + prefixed +
                                    " drops \"t\" (U+0074, character 3 of its \"text\")"));
  require_exit(run_odyssey("prepare " + dir + "/hi.jsonl --tokenizer " + suffixed + " --out " + out + " --overwrite"),
               0);
  CHECK(read_documents(out).tokens == Tokens{0, 1, 2});
  // An NFKC normalizer composes "e" and U+0301 into "é", which has a token: the mark alone has none,
  // and the Omega after it was dropped, yet the mark (character 5) was named. Then "u" and U+0308
  // compose into a "ü" without a token: named as written, at its first character.
  const std::string composing = dir + "/composing.json";
  std::ofstream(composing) << R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
    "normalizer":{"type":"NFKC"},"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
    "model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,
    "fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
    "vocab":{"a":0,"b":1,"c":2,"e":3,"f":4,"r":5,"u":6,"é":7},"merges":[]}})";
  std::ofstream(dir + "/omega.jsonl") << "{\"text\": \"cafe\\u0301\"}\n{\"text\": \"cafe\\u0301 \\u03a9\"}\n";
  std::ofstream(dir + "/umlaut.jsonl") << "{\"text\": \"cafe\\u0301 u\\u0308ber\"}\n";
  r = run_odyssey("prepare " + dir + "/omega.jsonl --tokenizer " + composing + " --out " + out + " --overwrite");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/omega.jsonl:2: the tokenizer " + composing +
                                    " drops \"\u03a9\" (U+03A9, character 7 of its \"text\")"));
  r = run_odyssey("prepare " + dir + "/umlaut.jsonl --tokenizer " + composing + " --out " + out + " --overwrite");
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir + "/umlaut.jsonl:1: the tokenizer " + composing +
                                    " drops \"u\u0308\" (U+0075, character 7 of its \"text\")"));
}

TEST_CASE("odyssey prepare: a tokenizer the library fails to encode with is bad input, its message named",
          "[cli][prepare]") {
  // A WordLevel whose unk token is not in its vocabulary raises on an unknown word: prepare ended
  // with exit 1 and a Python traceback.
  const std::string dir = make_dir("library_error"), tokenizer = dir + "/tokenizer.json";
  std::ofstream(tokenizer) << R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
    "model": {"type": "WordLevel", "vocab": {"the": 0, "cat": 1}, "unk_token": "[UNK]"}})";
  std::ofstream(dir + "/docs.jsonl") << "{\"text\": \"the cat\"}\n{\"text\": \"the zebra\"}\n";
  const std::string out = dir + "/out.odoc";
  const Run r = run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + out);
  require_exit(r, 2);
  CHECK_THAT(r.err, Catch::Contains(dir +
                                    "/docs.jsonl:2: the tokenizers library cannot encode this text with the "
                                    "tokenizer " +
                                    tokenizer + ": WordLevel error: Missing [UNK] token from the vocabulary"));
  CHECK_THAT(r.err, !Catch::Contains("Traceback"));
  CHECK_FALSE(exists(out));
}

TEST_CASE("odyssey prepare: a special token's text inside a document is text, and only --append-eos adds the eos",
          "[cli][prepare]") {
  // "</s>" written in a document was encoded as the special token </s> (id 1), which the file could
  // not tell from the eos --append-eos puts after it. It is text now: Whitespace splits it into
  // "</", "s", ">", unknown words ([UNK], 0). An added token that is not special ("catdog", id 10)
  // is still matched as the tokenizer matches it.
  const std::string dir = make_dir("special_text"), python = tokenizers_python();
  const std::string tokenizer = make_tokenizer(dir, kWords);
  std::ofstream(dir + "/add.py") << "from tokenizers import Tokenizer\n"
                                 << "tok = Tokenizer.from_file('" << tokenizer << "')\n"
                                 << "tok.add_tokens(['catdog'])\n"
                                 << "tok.save('" << tokenizer << "')\n";
  REQUIRE(std::system(("'" + python + "' '" + dir + "/add.py'").c_str()) == 0);
  std::ofstream(dir + "/docs.jsonl") << "{\"text\": \"the </s> cat\"}\n{\"text\": \"the catdog </s>\"}\n";
  const std::string out = dir + "/out.odoc", eos_out = dir + "/eos.odoc";
  require_exit(run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + out), 0);
  DocumentsBytes d = read_documents(out);
  CHECK(d.index == Index{0, 5, 10});
  CHECK(d.tokens == Tokens{2, 0, 0, 0, 3, 2, 10, 0, 0, 0});
  require_exit(
      run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + eos_out + " --append-eos"),
      0);
  d = read_documents(eos_out);
  CHECK(d.index == Index{0, 6, 12});
  CHECK(d.tokens == Tokens{2, 0, 0, 0, 3, 1, 2, 10, 0, 0, 0, 1});  // the one eos a document, by id
  // --match-special-tokens: chat-formatted data means its markup as the tokens, so "</s>" written in
  // a document is the token </s> (id 1), and --json says which way the text was read.
  const std::string matched_out = dir + "/matched.odoc";
  const Run matched = run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + matched_out +
                                  " --match-special-tokens --json");
  require_exit(matched, 0);
  CHECK_THAT(matched.out, Catch::Contains("\"special_tokens_matched\":true"));
  d = read_documents(matched_out);
  CHECK(d.index == Index{0, 3, 6});
  CHECK(d.tokens == Tokens{2, 1, 3, 2, 10, 1});
  CHECK_THAT(
      run_odyssey("prepare " + dir + "/docs.jsonl --tokenizer " + tokenizer + " --out " + dir + "/plain.odoc --json")
          .out,
      Catch::Contains("\"special_tokens_matched\":false"));
}
