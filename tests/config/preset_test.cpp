// Preset loader tests: shipped presets validate and round-trip through save; every bad-preset
// fixture under tests/fixtures reports exactly its expected messages; --set and size parsing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/file_text.h"
#include "engine/config/preset.h"
#include "engine/config/schema.h"
#include "engine/config/sizes.h"
#include "engine/config/validate.h"
#include "test_paths.h"

using namespace odyssey;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> files_in(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("every shipped preset validates", "[config][presets]") {
  const auto presets = files_in(std::string(ODYSSEY_SOURCE_DIR) + "/presets", ".toml");
  REQUIRE(presets.size() >= 5);
  for (const auto& path : presets) {
    INFO(path);
    const LoadedPreset loaded = load_preset(path);
    for (const auto& issue : loaded.issues) UNSCOPED_INFO(issue.format());
    CHECK(loaded.ok());
    CHECK_FALSE(loaded.config.description.empty());
  }
}

TEST_CASE("load -> save -> load is the identity for every preset", "[config][presets]") {
  for (const auto& path : files_in(std::string(ODYSSEY_SOURCE_DIR) + "/presets", ".toml")) {
    INFO(path);
    const LoadedPreset first = load_preset(path);
    REQUIRE(first.ok());
    const std::string text = preset_to_toml(first.config);
    const LoadedPreset second = load_preset_text(text, path + " (saved)");
    for (const auto& issue : second.issues) UNSCOPED_INFO(issue.format());
    REQUIRE(second.ok());
    CHECK(second.config == first.config);
    // Saving is stable: the saved text saves to itself.
    CHECK(preset_to_toml(second.config) == text);
  }
}

TEST_CASE("a saved preset keeps a head_dim its d_model or n_heads would not give", "[config][presets]") {
  // The loader derives head_dim = d_model / n_heads when either is given and head_dim is not: a
  // head_dim equal to the flavor's beside a d_model or n_heads of its own must be written too.
  const LoadedPreset tiny = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml");
  REQUIRE(tiny.ok());
  const int64_t flavor_head_dim = tiny.config.model.head_dim;
  for (const bool wider : {true, false}) {
    RunConfig edited = tiny.config;
    if (wider)
      edited.model.d_model *= 2;  // derived, head_dim would double
    else
      edited.model.n_heads /= 2;  // derived, head_dim would double
    INFO((wider ? "d_model " : "n_heads ") << (wider ? edited.model.d_model : edited.model.n_heads));
    const std::string text = preset_to_toml(edited);
    CHECK(text.find("\nhead_dim = " + std::to_string(flavor_head_dim) + "\n") != std::string::npos);
    const LoadedPreset back = load_preset_text(text, "saved.toml");
    REQUIRE(back.ok());
    CHECK(back.config.model.head_dim == flavor_head_dim);
    CHECK(back.config == edited);
  }
}

TEST_CASE("a head_dim derived from a d_model given alone is reported at d_model, where it was written",
          "[config][presets]") {
  // `--set model.d_model=...` over a flavor derives head_dim with the flavor's n_heads: its problems
  // were reported at the [model] header, naming head_dim or the flavor's n_heads, never the --set.
  const std::string preset = std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3-8b-3m-8xh100.toml";
  auto issue_of = [&](const std::string& set) {
    Override o;
    ConfigIssue parse_issue;
    REQUIRE(parse_override(set, 1, &o, &parse_issue));
    const LoadedPreset p = load_preset(preset, {o});
    REQUIRE(p.issues.size() == 1);
    return p.issues[0];
  };
  const ConfigIssue wide = issue_of("model.d_model=262144");  // 262144 / 32 heads = 8192 > 4096
  CHECK(wide.loc.file == "--set");
  CHECK(wide.key == "model.d_model");
  CHECK(wide.value == "262144");
  CHECK(wide.rule == "gives model.head_dim = d_model / n_heads = 8192, and model.head_dim must be between 2 and 4096");
  const ConfigIssue odd = issue_of("model.d_model=4100");  // not a multiple of 32
  CHECK(odd.loc.file == "--set");
  CHECK(odd.key == "model.d_model");
  CHECK(odd.rule == "must be a multiple of model.n_heads = 32 unless model.head_dim is given");
  const ConfigIssue heads = issue_of("model.n_heads=5");  // n_heads written: it is named, as before
  CHECK(heads.loc.file == "--set");
  CHECK(heads.key == "model.n_heads");
  CHECK(heads.rule == "must divide model.d_model = 4096 unless model.head_dim is given");
}

TEST_CASE("save_preset writes atomically and the file loads back", "[config][presets]") {
  const fs::path dir = fs::temp_directory_path() / "odyssey_save_test";
  fs::create_directories(dir);
  LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml");
  REQUIRE(loaded.ok());
  loaded.config.model.n_layers = 8;
  loaded.config.model.d_model = 256;  // head_dim follows d_model / n_heads = 32
  loaded.config.model.head_dim = 32;
  loaded.config.training.seq_len = 3 * 1024 * 1024;
  loaded.config.hardware.pcie_gbps = 25.5;
  std::string error;
  const std::string path = (dir / "edited.toml").string();
  REQUIRE(save_preset(path, loaded.config, &error));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  const LoadedPreset back = load_preset(path);
  REQUIRE(back.ok());
  CHECK(back.config == loaded.config);
  CHECK(odyssey::test::file_text(path).find("seq_len = \"3M\"") != std::string::npos);
  CHECK(odyssey::test::file_text(path).find("# Tokens per sequence") != std::string::npos);
  CHECK_FALSE(save_preset((dir / "no-such-dir" / "x.toml").string(), loaded.config, &error));
  CHECK(error.find("cannot create " + (dir / "no-such-dir" / "x.toml").string()) != std::string::npos);
  // Without replace (tune -o without --overwrite, the studio's Save before Replace), a file that
  // appeared after the caller found the name free is left as it is: the rename replaced it.
  const std::string taken = (dir / "taken.toml").string();
  std::ofstream(taken) << "# another program's file\n";
  CHECK_FALSE(save_preset(taken, loaded.config, &error, /*replace=*/false));
  CHECK_THAT(error, Catch::Contains(taken + " appeared while the preset was written"));
  CHECK(odyssey::test::file_text(taken) == "# another program's file\n");
  CHECK_FALSE(fs::exists(taken + ".tmp"));
  fs::remove(taken);
  REQUIRE(save_preset(taken, loaded.config, &error, /*replace=*/false));
  CHECK(load_preset(taken).config == loaded.config);
}

TEST_CASE("bad-preset fixtures report their exact messages", "[config][fixtures]") {
  const std::string dir = std::string(ODYSSEY_SOURCE_DIR) + "/tests/fixtures";
  const auto fixtures = files_in(dir, ".toml");
  REQUIRE(fixtures.size() >= 30);
  for (const auto& path : fixtures) {
    // Header lines: "# expect: LINE:COL: message" (path prefix implied), "# set: section.key=value".
    std::vector<std::string> expected;
    std::vector<Override> overrides;
    std::istringstream lines(odyssey::test::file_text(path));
    std::string line;
    const std::string rel = "tests/fixtures/" + fs::path(path).filename().string();
    while (std::getline(lines, line)) {
      if (line.rfind("# expect: ", 0) == 0) {
        const std::string rest = line.substr(10);
        expected.push_back(rest.rfind("--set", 0) == 0 ? rest : rel + ":" + rest);
      } else if (line.rfind("# set: ", 0) == 0) {
        Override o;
        ConfigIssue issue;
        REQUIRE(parse_override(line.substr(7), static_cast<int>(overrides.size()) + 1, &o, &issue));
        overrides.push_back(o);
      }
    }
    INFO(path);
    REQUIRE_FALSE(expected.empty());
    const LoadedPreset loaded = load_preset(rel, overrides);
    std::vector<std::string> got;
    for (const auto& issue : loaded.issues) got.push_back(issue.format());
    CHECK(got == expected);
  }
}

TEST_CASE("size literals parse as powers of 1024 and format back", "[config][sizes]") {
  CHECK(parse_size("4096") == 4096);
  CHECK(parse_size("512K") == 512 * 1024);
  CHECK(parse_size("512k") == 512 * 1024);
  CHECK(parse_size("3M") == 3 * 1024 * 1024);
  CHECK(parse_size("1.5M") == 1536 * 1024);
  CHECK(parse_size("2G") == int64_t{2} << 30);
  CHECK(parse_size("131_072") == 131072);
  CHECK(parse_size(" 8K ") == 8192);
  CHECK_FALSE(parse_size(""));
  CHECK_FALSE(parse_size("K"));
  CHECK_FALSE(parse_size("-1"));
  CHECK_FALSE(parse_size("1.3K"));
  CHECK_FALSE(parse_size("3MB"));
  CHECK_FALSE(parse_size("3 M"));
  CHECK_FALSE(parse_size("abc"));
  CHECK_FALSE(parse_size("1.5"));
  // whole digits are exact to INT64_MAX (a double would round the first to ...992), refused past it
  CHECK(parse_size("9007199254740993") == int64_t{9007199254740993});
  CHECK(parse_size("9223372036854775807") == std::numeric_limits<int64_t>::max());
  CHECK_FALSE(parse_size("9223372036854775808"));
  CHECK_FALSE(parse_size("18446744073709551615"));
  CHECK(parse_size("8589934591G") == int64_t{8589934591} << 30);
  CHECK_FALSE(parse_size("8589934592G"));
  // a fraction is exact too: a double read the first as 3M and the fourth as 2^63 - 1024 + 1024
  CHECK_FALSE(parse_size("3.0000000000000001M"));
  CHECK(parse_size("3.000000000000000000000000000000000000M") == 3 * 1024 * 1024);
  CHECK(parse_size("0.0009765625K") == 1);  // 2^-10 K: ten digits after the dot, whole
  CHECK(parse_size("8589934591.999999999068677425384521484375G") == std::numeric_limits<int64_t>::max());
  CHECK_FALSE(parse_size("8589934591.9999999990686774253845214843751G"));
  CHECK_FALSE(parse_size("8589934592.0G"));
  CHECK(parse_size(".5K") == 512);
  CHECK(parse_size("5.K") == 5 * 1024);
  CHECK_FALSE(parse_size("0.00000000000000000000000000000000005K"));  // 35 digits: not whole
  CHECK(format_size(3 * 1024 * 1024) == "3M");
  CHECK(format_size(512 * 1024) == "512K");
  CHECK(format_size(1000) == "1000");
  CHECK(format_size(0) == "0");
  CHECK(format_gib(64.6 * kGiB) == "64.60 GiB");
}

TEST_CASE("set overrides parse, apply and point at themselves", "[config][overrides]") {
  Override o;
  ConfigIssue issue;
  REQUIRE(parse_override("training.seq_len=3M", 1, &o, &issue));
  CHECK(o.section == "training");
  CHECK(o.key == "seq_len");
  CHECK(o.value.type == RawValue::Type::String);
  CHECK(o.value.s == "3M");
  REQUIRE(parse_override("memory.untied_ulysses=false", 2, &o, &issue));
  CHECK(o.value.type == RawValue::Type::Bool);
  CHECK_FALSE(o.value.b);
  REQUIRE(parse_override("training.lr=0.001", 3, &o, &issue));
  CHECK(o.value.type == RawValue::Type::Float);
  REQUIRE(parse_override("output.dir=\"runs/x y\"", 4, &o, &issue));
  CHECK(o.value.s == "runs/x y");
  CHECK_FALSE(parse_override("seq_len=3M", 5, &o, &issue));
  CHECK(issue.format() ==
        "--set:5:1: --set seq_len=3M: expected section.key=value (for example --set training.seq_len=3M)");
  CHECK_FALSE(parse_override("training.seq_len", 6, &o, &issue));
  // A value reads as a preset's TOML reads it: the same number on the command line and in a file
  // (hex, underscores), and a value TOML cannot hold is echoed as typed, not as what strtod made of it
  REQUIRE(parse_override("training.seq_len=0x200", 8, &o, &issue));
  CHECK(o.value.type == RawValue::Type::Int);
  CHECK(o.value.i == 512);
  REQUIRE(parse_override("training.steps=1_000", 8, &o, &issue));
  CHECK(o.value.type == RawValue::Type::Int);
  CHECK(o.value.i == 1000);
  REQUIRE(parse_override("training.steps=1e400", 8, &o, &issue));
  CHECK(o.value.type == RawValue::Type::String);
  CHECK(o.value.s == "1e400");
  REQUIRE(parse_override("hardware.compute_efficiency=.5", 8, &o, &issue));  // no TOML literal: as before
  CHECK(o.value.type == RawValue::Type::Float);
  CHECK(o.value.f == 0.5);
  REQUIRE(parse_override("training.steps=5\nx = 1", 8, &o, &issue));  // one value, never two keys
  CHECK(o.value.type == RawValue::Type::String);
  // A value that opens a TOML string or array and does not close it is refused: read as a word,
  // `"runs/a` became the directory "\"runs/a".
  for (const char* open : {"output.dir=\"runs/a", "description='it's", "description=[1, 2"}) {
    INFO(open);
    CHECK_FALSE(parse_override(open, 9, &o, &issue));
    CHECK_THAT(issue.format(), Catch::Contains("--set:9:1: ") && Catch::Contains("and does not read as one"));
  }
  // A value a preset file could not hold is refused as the file would be: not UTF-8 (saved into a
  // checkpoint's config.toml it made the run unresumable), or a character of the shelter block
  // U+E000..U+EBFF, which a quoted value turned into another character and a bare one kept.
  for (const char* bad :
       {"description=caf\xe9", "description=\"caf\xe9\"", "description=\xc0\xaf", "description=\xed\xa0\x80",
        "output.dir=runs/\xee\x80\x80", "output.dir=\"runs/\xee\x80\x81\""}) {
    INFO(bad);
    CHECK_FALSE(parse_override(bad, 10, &o, &issue));
    CHECK_THAT(issue.format(), Catch::StartsWith("--set:10:1: ") &&
                                   (Catch::Contains("is not UTF-8 (byte ") || Catch::Contains("U+E000..U+EBFF")));
  }
  // Characters beside the shelter block read back as themselves, bare and quoted, and save.
  for (const char* kept : {"description=caf\xc3\xa9 \xef\x80\x80", "description=\"caf\xc3\xa9 \xef\x80\x80\""}) {
    INFO(kept);
    std::vector<Override> sets(1);
    REQUIRE(parse_override(kept, 1, &sets[0], &issue));
    CHECK(sets[0].value.s == "caf\xc3\xa9 \xef\x80\x80");
    const LoadedPreset with = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml", sets);
    REQUIRE(with.ok());
    const LoadedPreset back = load_preset_text(preset_to_toml(with.config), "saved.toml");
    REQUIRE(back.ok());
    CHECK(back.config.description == "caf\xc3\xa9 \xef\x80\x80");
  }
  // TOML values no key takes (an array, a date) are what they are in a file: refused by the key's type.
  for (const char* other : {"description=[1, 2]", "description=1979-05-27"}) {
    INFO(other);
    std::vector<Override> sets(1);
    REQUIRE(parse_override(other, 1, &sets[0], &issue));
    const LoadedPreset refused = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml", sets);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.issues.front().format(),
               Catch::Contains("description = ") && Catch::Contains("must be a string"));
  }
  // A NUL in a string key: the system reads a path only up to it ("ok.bin\u0000junk" trained on
  // ok.bin), so it is refused by name, in --set and in a file alike.
  for (const char* nul : {"training.dataset_path=\"ok.bin\\u0000junk\"", "output.dir=\"runs/a\\u0000b\""}) {
    INFO(nul);
    std::vector<Override> sets(1);
    REQUIRE(parse_override(nul, 1, &sets[0], &issue));
    const LoadedPreset refused = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml", sets);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.issues.front().format(), Catch::Contains("\\u0000") && Catch::Contains("must not hold a NUL"));
  }
  {
    const LoadedPreset refused =
        load_preset_text("[model]\nflavor = \"tiny\"\n[training]\ndataset_path = \"ok.bin\\u0000junk\"\n", "nul.toml");
    REQUIRE_FALSE(refused.ok());
    std::string all;  // the file's other issues (seq_len missing) are named too
    for (const auto& found : refused.issues) all += found.format() + "\n";
    CHECK_THAT(all, Catch::Contains("nul.toml:4") && Catch::Contains("training.dataset_path") &&
                        Catch::Contains("must not hold a NUL character"));
  }
  // A whole number past int64 is echoed as typed, and refused by the key's bound, not its type.
  {
    std::vector<Override> sets(1);
    REQUIRE(parse_override("training.seed=18446744073709551615", 1, &sets[0], &issue));
    const LoadedPreset refused = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml", sets);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.issues.front().format(),
               Catch::Contains("training.seed = 18446744073709551615: must be at most 9223372036854775807"));
  }
  // A size key takes a whole number written as a float, as an integer key does (docs/presets.md);
  // a fraction is refused by its type, and a whole number past int64 by the key's bound.
  {
    const LoadedPreset whole = load_preset_text("[model]\nflavor = \"tiny\"\n[training]\nseq_len = 512.0\n", "w.toml");
    REQUIRE(whole.ok());
    CHECK(whole.config.training.seq_len == 512);
    for (const auto& [set, rule] : std::vector<std::pair<std::string, std::string>>{
             {"training.seq_len=1e3", ""},
             {"training.seq_len=512.5", "must be a whole count"},
             {"training.seq_len=-1024.0", "must not be negative"},
             {"training.seq_len=99999999999999999999", "training.seq_len = 99999999999999999999: must be "}}) {
      INFO(set);
      std::vector<Override> sets(1);
      REQUIRE(parse_override(set, 1, &sets[0], &issue));
      const LoadedPreset p = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml", sets);
      if (rule.empty()) {
        REQUIRE(p.ok());
        CHECK(p.config.training.seq_len == 1000);
        continue;
      }
      REQUIRE_FALSE(p.ok());
      CHECK_THAT(p.issues.front().format(), Catch::Contains(rule));
      if (set.find("9999") != std::string::npos) CHECK_THAT(p.issues.front().format(), !Catch::Contains("whole count"));
    }
  }
  // A word's stored value ("auto" is -1) is the word's alone, however the number is written: as an
  // integer or as a whole float, it is out of the key's range, never "auto" in silence.
  for (const std::string set :
       {"memory.heads_per_stage=-1", "memory.heads_per_stage=-1.0", "memory.heads_per_stage=-1e0"}) {
    INFO(set);
    std::vector<Override> sets(1);
    REQUIRE(parse_override(set, 1, &sets[0], &issue));
    const LoadedPreset p = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml", sets);
    REQUIRE_FALSE(p.ok());
    CHECK_THAT(p.issues.front().format(),
               Catch::Contains("memory.heads_per_stage = -1") && Catch::Contains("must be between 0 and 4096"));
  }
  // An unknown top-level key is offered what may stand there: the top-level key too.
  const LoadedPreset stray = load_preset_text("zzz = 1\n", "stray.toml");
  REQUIRE_FALSE(stray.ok());
  CHECK_THAT(stray.issues.front().format(),
             Catch::Contains("unknown top-level key") && Catch::Contains("description") && Catch::Contains("training"));
  // The one top-level key takes no section.
  REQUIRE(parse_override("description=\"a 3M run\"", 7, &o, &issue));
  CHECK(o.section.empty());
  CHECK(o.key == "description");

  const std::string preset = std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3-8b-3m-8xh100.toml";
  std::vector<Override> sets(2);
  REQUIRE(parse_override("training.seq_len=5M", 1, &sets[0], &issue));
  REQUIRE(parse_override("memory.untied_ulysses=true", 2, &sets[1], &issue));
  const LoadedPreset loaded = load_preset(preset, sets);
  REQUIRE(loaded.ok());
  CHECK(loaded.config.training.seq_len == 5 * 1024 * 1024);
  CHECK(loaded.config.memory.untied_ulysses);
  CHECK(loaded.sources.at("training.seq_len").file == "--set");
  std::vector<Override> described(1);
  REQUIRE(parse_override("description=\"the 3M preset at 5M\"", 1, &described[0], &issue));
  const LoadedPreset renamed = load_preset(preset, described);
  REQUIRE(renamed.ok());
  CHECK(renamed.config.description == "the 3M preset at 5M");

  std::vector<Override> bad(1);
  REQUIRE(parse_override("parallel.ulysses_degree=3", 1, &bad[0], &issue));
  const LoadedPreset invalid = load_preset(preset, bad);
  REQUIRE_FALSE(invalid.ok());
  const bool points_at_override = std::any_of(invalid.issues.begin(), invalid.issues.end(), [](const ConfigIssue& i) {
    return i.format().rfind("--set:1:1: parallel.ulysses_degree = 3: must divide model.n_heads = 32", 0) == 0;
  });
  CHECK(points_at_override);
}

TEST_CASE("apply_overrides edits a config in memory", "[config][overrides]") {
  LoadedPreset loaded = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml");
  REQUIRE(loaded.ok());
  Override o;
  ConfigIssue issue;
  REQUIRE(parse_override("memory.heads_per_stage=4", 1, &o, &issue));
  const LoadedPreset edited = apply_overrides(loaded.config, {o});
  REQUIRE(edited.ok());
  CHECK(edited.config.memory.heads_per_stage == 4);
  RunConfig expected = loaded.config;
  expected.memory.heads_per_stage = 4;
  CHECK(edited.config == expected);
}

TEST_CASE("flavors carry the published shapes", "[config][flavors]") {
  const auto l8 = find_model_flavor("llama3-8b");
  REQUIRE(l8);
  CHECK(l8->total_params() == 8030261248);  // Llama-3.1-8B: 8.03 B
  const auto l1 = find_model_flavor("llama3.2-1b");
  REQUIRE(l1);
  CHECK(l1->total_params() == 1235814400);  // Llama-3.2-1B with tied embeddings: 1.24 B
  const auto q32 = find_model_flavor("qwen3-32b");
  REQUIRE(q32);
  CHECK(q32->q_dim() == 8192);  // 64 heads x 128, wider than d_model = 5120
  CHECK(q32->total_params() > 32'000'000'000);
  CHECK(q32->total_params() < 33'000'000'000);
  const auto l70 = find_model_flavor("llama3-70b");
  REQUIRE(l70);
  CHECK(l70->total_params() > 70'000'000'000);
  CHECK(l70->total_params() < 71'000'000'000);
  CHECK_FALSE(find_model_flavor("gpt2"));
}

TEST_CASE("a scaling set over a named flavor stretches the flavor's own context", "[config][flavors]") {
  // `--set model.rope_scaling=yarn` over qwen3-32b took the key's default original context, 8K
  // (Llama 3's), where Qwen3 was pretrained at 32K (its model card's YaRN original) and
  // transformers would take the model's context: other frequencies than the model's own, unsaid.
  auto loaded = [](const std::string& flavor, const std::string& keys) {
    const LoadedPreset p = load_preset_text(
        "[model]\nflavor = \"" + flavor + "\"\n" + keys + "[training]\nseq_len = \"128K\"\n", "scaled.toml");
    for (const auto& issue : p.issues) INFO(issue.format());
    REQUIRE(p.ok());
    return p.config;
  };
  const std::string yarn = "rope_scaling = \"yarn\"\nrope_factor = 4.0\n";
  CHECK(loaded("qwen3-32b", yarn).model.rope_scaling.original_max_position == 32768);
  CHECK(
      loaded("qwen3-32b", "rope_scaling = \"llama3\"\nrope_factor = 4.0\n").model.rope_scaling.original_max_position ==
      32768);
  CHECK(loaded("llama3-8b", yarn).model.rope_scaling.original_max_position == 8192);  // Llama 3's 8K
  // given, it is kept, and a saved preset keeps it (the loader would otherwise take the flavor's)
  const RunConfig given = loaded("qwen3-32b", yarn + "rope_original_max_position = \"8K\"\n");
  CHECK(given.model.rope_scaling.original_max_position == 8192);
  const LoadedPreset back = load_preset_text(preset_to_toml(given), "saved.toml");
  REQUIRE(back.ok());
  CHECK(back.config == given);
  // unscaled, the flavor's context changes no frequency and no note names it
  const RunConfig plain = loaded("qwen3-32b", "");
  CHECK(plain.model.rope_scaling.kind == RopeScalingKind::None);
  CHECK(config_notes(plain).empty());
}

TEST_CASE("a flavor's pretraining context is its own field: the debug flavor has none to go past",
          "[config][flavors]") {
  auto context = [](const char* flavor) { return model_own_rope(*find_model_flavor(flavor)).pretrained_context; };
  CHECK(context("llama3-8b") == 8192);
  CHECK(context("llama3.2-1b") == 8192);
  CHECK(context("qwen3-32b") == 32768);
  CHECK(context("tiny") == 0);
  for (const ModelFlavor& f : model_flavors()) CHECK(f.pretrained == (std::string(f.name) != "tiny"));
  // a stretch of tiny above any context is no note; of llama3-8b above its 8K it is
  auto notes = [](const std::string& flavor) {
    const LoadedPreset p =
        load_preset_text("[model]\nflavor = \"" + flavor +
                             "\"\nrope_scaling = \"yarn\"\nrope_factor = 4.0\nrope_original_max_position = \"16K\"\n"
                             "[training]\nseq_len = 512\n",
                         "stretched.toml");
    REQUIRE(p.ok());
    return config_notes(p.config);
  };
  CHECK(notes("tiny").empty());
  REQUIRE(notes("llama3-8b").size() == 1);
  CHECK_THAT(notes("llama3-8b")[0], Catch::Contains("above the context the model was pretrained at, 8K"));
}

TEST_CASE("validation lists valid alternatives", "[config][validate]") {
  RunConfig cfg;
  cfg.model = *find_model_flavor("llama3-8b");
  cfg.training.seq_len = 1 << 20;
  cfg.parallel.world_size = 8;
  CHECK(valid_ulysses_degrees(cfg) == std::vector<int64_t>{1, 2, 4, 8});
  cfg.parallel.ulysses_degree = 8;
  CHECK(valid_heads_per_stage(cfg) == std::vector<int64_t>{8, 16, 32});
  CHECK(validate(cfg).empty());
  cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = 24;
  const auto issues = validate(cfg);
  REQUIRE(issues.size() == 1);
  CHECK(issues[0].key == "memory.heads_per_stage");
  CHECK(issues[0].format() ==
        "memory.heads_per_stage = 24: must split each rank's 4 heads (model.n_heads = 32 over 8 ranks) into whole "
        "stages (valid values here: 8, 16, 32)");
}

TEST_CASE("an attention backward past the peak is refused, naming the efficiency it multiplies", "[config][validate]") {
  // attention_backward_ratio 4 at attention_efficiency 0.9 planned MFU 101% and HFU 151%: the
  // backward's kernels ran at 3.6 times the device's peak. The limit is the fastest kernel's.
  for (const auto& [sets, rule] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"hardware.attention_backward_ratio=4", "hardware.attention_efficiency=0.9"},
            "hardware.attention_backward_ratio = 4.0: times hardware.attention_efficiency = 0.9 is the attention "
            "backward's fraction of the peak, 3.6, which must be at most 1: at most 1.11111"},
           {{"hardware.attention_backward_ratio=2", "hardware.attention_efficiency=0.3",
             "hardware.untied_attention_efficiency=0.6"},
            "hardware.attention_backward_ratio = 2.0: times hardware.untied_attention_efficiency = 0.6 is the "
            "attention backward's fraction of the peak, 1.2, which must be at most 1: at most 1.66667"},
           {{"hardware.attention_backward_ratio=2", "hardware.attention_efficiency=0.5",
             "hardware.untied_attention_efficiency=0.25"},
            ""}}) {
    std::vector<Override> overrides;
    for (const std::string& set : sets) {
      Override o;
      ConfigIssue issue;
      REQUIRE(parse_override(set, static_cast<int>(overrides.size()) + 1, &o, &issue));
      overrides.push_back(o);
    }
    INFO(sets.front() << " " << sets.back());
    const LoadedPreset p = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3.2-1b-1xh100.toml", overrides);
    if (rule.empty()) {
      CHECK(p.ok());  // 0.5 x 2: the peak exactly
      continue;
    }
    REQUIRE_FALSE(p.ok());
    CHECK_THAT(p.issues.front().format(), Catch::Contains(rule));
  }
}

TEST_CASE("a checkpoint's config loads with a hardware profile a later rule refuses, kept as saved",
          "[config][validate]") {
  // A checkpoint saved before the backward-ratio rule could no longer be resumed, exported or
  // evaluated: the profile only feeds the planner, the checkpoint's state never depends on it.
  std::string text = preset_to_toml(load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/tiny-cpu.toml").config);
  const size_t at = text.find("\n[hardware]\n");  // a profile's keys are written only where set
  REQUIRE(at != std::string::npos);
  text.insert(at + 12, "attention_backward_ratio = 4.0\nattention_efficiency = 0.9\n");
  REQUIRE_FALSE(load_preset_text(text, "config.toml").ok());  // a preset: refused
  const LoadedPreset saved = load_checkpoint_config(text, "config.toml");
  CHECK(saved.ok());
  REQUIRE(saved.hardware_kept_as_saved.size() == 1);
  CHECK(saved.hardware_kept_as_saved.front().key == "hardware.attention_backward_ratio");
  CHECK(saved.config.hardware.attention_backward_ratio == 4.0);  // as written, no default put in
  // Another key's issue is refused as ever, and a --set on the profile makes it the user's, checked.
  Override set;
  ConfigIssue issue;
  REQUIRE(parse_override("training.seq_len=0", 1, &set, &issue));
  CHECK_FALSE(load_checkpoint_config(text, "config.toml", {set}).ok());
  REQUIRE(parse_override("hardware.bf16_tflops=900", 1, &set, &issue));
  const LoadedPreset user = load_checkpoint_config(text, "config.toml", {set});
  REQUIRE_FALSE(user.ok());
  CHECK(user.issues.front().key == "hardware.attention_backward_ratio");
  // A hardware key this version does not read kept the rules that combine keys from running: they
  // run on the rest (warmup past the last step is refused), and the key is set aside alone.
  std::string unknown = text;
  unknown.insert(at + 12, "retired_key = 1\n");
  const LoadedPreset retired = load_checkpoint_config(unknown, "config.toml");
  CHECK(retired.ok());
  CHECK(retired.hardware_kept_as_saved.size() == 2);  // the retired key, then the backward-ratio rule
  const size_t warmup = unknown.find("\nwarmup_steps = ");
  REQUIRE(warmup != std::string::npos);
  unknown.replace(warmup + 1, unknown.find('\n', warmup + 1) - warmup - 1, "warmup_steps = 1000000");
  const LoadedPreset unchecked = load_checkpoint_config(unknown, "config.toml");
  REQUIRE_FALSE(unchecked.ok());
  CHECK(unchecked.issues.front().key == "training.warmup_steps");
}

TEST_CASE("memory.lse_attention_kernel = cudnn is refused where cuDNN cannot run, naming why", "[config][validate]") {
  RunConfig cfg;
  cfg.model = *find_model_flavor("llama3.2-1b");  // hd 64
  cfg.training.seq_len = 8192;
  cfg.training.dtype = DType::BFloat16;
  cfg.memory.lse_attention_kernel = LseKernelChoice::Cudnn;
  CHECK(validate(cfg).empty());
  auto only = [](const RunConfig& c) {
    const auto issues = validate(c);
    REQUIRE(issues.size() == 1);
    CHECK(issues[0].key == "memory.lse_attention_kernel");
    return issues[0].format();
  };
  RunConfig fp32 = cfg;
  fp32.training.dtype = DType::Float32;
  CHECK(only(fp32) ==
        "memory.lse_attention_kernel = \"cudnn\": cudnn takes fp16/bf16 only, and training.dtype is float32 (use auto "
        "(fp32 runs the memory-efficient kernel) or training.dtype = \"bfloat16\")");
  RunConfig wide = cfg;
  wide.model.head_dim = 100;
  CHECK(only(wide).find("cudnn cannot run here: cuDNN's attention takes head dims that are multiples of 8 up to 128") !=
        std::string::npos);
  // the CPU path runs its own kernel whatever the key says: nothing to refuse
  fp32.training.device = DeviceKind::Cpu;
  CHECK(validate(fp32).empty());
  RunConfig preset = cfg;
  preset.memory.lse_attention_kernel = LseKernelChoice::Auto;
  preset.model.head_dim = 100;
  CHECK(validate(preset).empty());  // auto takes FlashAttention-2 there
}

TEST_CASE("hostile bytes are reported with positions, Unicode strings survive", "[config][robustness]") {
  const std::string ok_tail = "[model]\nflavor = \"tiny\"\n[training]\nseq_len = 1024\n";
  // Control characters: reported by position before the TOML parser sees them.
  const LoadedPreset nul = load_preset_text(std::string("[mo\0del]\n", 9) + ok_tail, "nul.toml");
  REQUIRE(nul.issues.size() == 1);
  CHECK(nul.issues[0].format() ==
        "nul.toml:1:4: control character U+0000 is not allowed in TOML (TOML syntax) (is this a binary file?)");
  // Code points toml++ 3.3 mishandles (Cyrillic, CJK punctuation, presentation forms) load and
  // come back unchanged in strings and in messages.
  const std::string unicode = "description = \"Ёлка, 〄 and ﬀ\"\n" + ok_tail;
  const LoadedPreset loaded = load_preset_text(unicode, "unicode.toml");
  REQUIRE(loaded.ok());
  CHECK(loaded.config.description == "Ёлка, 〄 and ﬀ");
  const LoadedPreset back = load_preset_text(preset_to_toml(loaded.config), "saved.toml");
  REQUIRE(back.ok());
  CHECK(back.config.description == loaded.config.description);
  const LoadedPreset bare = load_preset_text("[model]\nflavorЁ = \"tiny\"\n", "bare.toml");
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.issues[0].format().find("Ё") != std::string::npos);
  // Private-use characters of the shelter block are refused rather than misread.
  const LoadedPreset pua = load_preset_text("description = \"\xee\x80\x81\"\n" + ok_tail, "pua.toml");
  REQUIRE(pua.issues.size() == 1);
  CHECK(pua.issues[0].format() == "pua.toml:1:16: private-use characters U+E000..U+EBFF are not supported in presets");
  // Not a file: a directory, a missing path.
  CHECK(load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets").issues.at(0).rule ==
        "is a directory, not a preset file");
  const LoadedPreset missing = load_preset("no/such/preset.toml");
  REQUIRE(missing.issues.size() == 1);
  CHECK(missing.issues[0].format() ==
        "no/such/preset.toml: cannot open: No such file or directory (give the path of a .toml preset, e.g. "
        "presets/tiny-cpu.toml)");
}

TEST_CASE("every numeric key has a physical range, values past it are refused with the schema's rule",
          "[config][validate][ranges]") {
  const LoadedPreset base = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/llama3-8b-3m-8xh100.toml");
  REQUIRE(base.ok());
  int ranged = 0;
  for (const KeySpec& spec : config_schema()) {
    const bool numeric = spec.kind == KeyKind::Int || spec.kind == KeyKind::Size || spec.kind == KeyKind::Float;
    INFO(spec.full_name());
    CHECK(numeric == spec.range.has_value());
    if (!spec.range) continue;
    ++ranged;
    const ValueRange& r = *spec.range;
    CHECK(r.contains(spec.number(base.config)));  // the shipped preset is in range
    CHECK_FALSE(r.contains(std::nan("")));
    std::vector<std::string> outside;
    if (spec.kind == KeyKind::Float) {
      outside = {"nan", "inf", "-inf"};
      if (r.lo > -1e300) outside.push_back(std::to_string(r.lo_open ? r.lo : r.lo - 1));
      if (r.hi < 1e300) outside.push_back(std::to_string(r.hi_open ? r.hi : r.hi * 2 + 1));
    } else {
      if (r.lo > 0) outside.push_back(std::to_string(static_cast<int64_t>(r.lo) - 1));
      if (std::isfinite(r.hi)) outside.push_back(std::to_string(static_cast<int64_t>(r.hi) + 1));
    }
    for (const std::string& value : outside) {
      INFO(spec.full_name() << " = " << value);
      Override o;
      ConfigIssue parse_issue;
      REQUIRE(parse_override(spec.full_name() + "=" + value, 1, &o, &parse_issue));
      const LoadedPreset bad = apply_overrides(base.config, {o});
      // --set reads nan and inf as words ("must be a number"); a finite value past a bound gets
      // the range's own rule.
      const bool word = value == "nan" || value == "inf" || value == "-inf";
      const bool named = std::any_of(bad.issues.begin(), bad.issues.end(), [&](const ConfigIssue& i) {
        return i.key == spec.full_name() && (word || i.rule == r.rule(spec.kind));
      });
      CHECK(named);
    }
  }
  CHECK(ranged >= 35);
}

TEST_CASE("TOML's nan and inf are outside every float range", "[config][validate][ranges]") {
  for (const char* value : {"nan", "inf", "-inf", "+nan"}) {
    INFO(value);
    const LoadedPreset p = load_preset_text(std::string("[model]\nflavor = \"tiny\"\nrope_theta = ") + value +
                                                "\n[training]\nseq_len = 1024\nlr = " + value + "\n",
                                            "nan.toml");
    REQUIRE(p.issues.size() == 2);
    CHECK(p.issues[0].key == "model.rope_theta");
    CHECK(p.issues[0].rule == "must be in (0, 1000000000000]");
    CHECK(p.issues[1].key == "training.lr");
    CHECK(p.issues[1].rule == "must be in (0, 1]");
  }
}

TEST_CASE("a file's out-of-range values are reported beside its reading problems", "[config][validate][ranges]") {
  // An unknown key and a wrong type hid every range: `odyssey check` printed one problem of three.
  // The rules that combine keys still wait (a key that failed holds its default).
  const LoadedPreset p = load_preset_text(
      "[model]\nflavor = \"tiny\"\nn_layers = \"four\"\n[training]\nseq_len = 1024\nlr = 5.0\n[memory]\nbogus = 1\n",
      "mixed.toml");
  std::vector<std::string> keys;
  for (const ConfigIssue& issue : p.issues) keys.push_back(issue.key);
  CHECK(keys == std::vector<std::string>{"model.n_layers", "training.lr", "memory.bogus"});  // in file order
  REQUIRE(p.issues.size() == 3);
  CHECK(p.issues[1].rule == "must be in (0, 1]");
  CHECK(p.issues[1].loc.line == 6);
}

TEST_CASE("range rules read as the math does", "[config][validate][ranges]") {
  CHECK(find_key_spec("training.lr")->range->rule(KeyKind::Float) == "must be in (0, 1]");
  CHECK(find_key_spec("model.n_layers")->range->rule(KeyKind::Int) == "must be between 1 and 1024");
  CHECK(find_key_spec("training.seq_len")->range->rule(KeyKind::Size) ==
        "must be between 2 and 16G (one input and one label at least)");
  CHECK(find_key_spec("parallel.timeout_s")->range->rule(KeyKind::Float) ==
        "must be a number of seconds in [0.001, 604800] (a collective's timeout is whole milliseconds, and 0 ms "
        "would wait forever)");
  CHECK(find_key_spec("training.seed")->range->rule(KeyKind::Int) == "must not be negative");
  CHECK(find_key_spec("training.beta2")->range->rule(KeyKind::Float) == "must be in [0, 1)");
}

TEST_CASE("a huge value is refused by its range before any rule or hint walks it", "[config][validate][ranges]") {
  const LoadedPreset base = load_preset(std::string(ODYSSEY_SOURCE_DIR) + "/presets/qwen3-32b-16xh100.toml");
  REQUIRE(base.ok());
  for (const char* key : {"model.n_heads", "model.n_kv_heads", "parallel.ulysses_degree", "parallel.world_size",
                          "memory.heads_per_stage"}) {
    INFO(key);
    Override o;
    ConfigIssue issue;
    REQUIRE(parse_override(std::string(key) + "=1099511627776", 1, &o, &issue));
    const auto t0 = std::chrono::steady_clock::now();
    const LoadedPreset bad = apply_overrides(base.config, {o});
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 0.5);
    REQUIRE(bad.issues.size() == 1);  // the range alone: no rule combining it with other keys ran
    CHECK(bad.issues[0].key == key);
    CHECK(bad.issues[0].rule.rfind("must be between", 0) == 0);
  }
}

TEST_CASE("heads_per_stage and mlp_tile_tokens = \"auto\" load, print, save and override as the word",
          "[config][overrides]") {
  const std::string text =
      "[model]\nflavor = \"llama3.2-1b\"\n[training]\nseq_len = \"32K\"\n[memory]\nuntied_ulysses = true\n"
      "heads_per_stage = \"auto\"\n";
  const LoadedPreset loaded = load_preset_text(text, "auto.toml");
  REQUIRE(loaded.ok());
  CHECK(loaded.config.memory.heads_per_stage == kHeadsPerStageAuto);
  const KeySpec* spec = find_key_spec("memory.heads_per_stage");
  REQUIRE(spec);
  CHECK(spec->holds_word(loaded.config));
  CHECK(spec->in_range(loaded.config));
  CHECK(value_text(*spec, loaded.config) == "\"auto\"");
  CHECK(toml_literal(*spec, loaded.config) == "\"auto\"");
  // saved and loaded back: the word, not its stored -1
  const std::string saved = preset_to_toml(loaded.config);
  CHECK(saved.find("heads_per_stage = \"auto\"") != std::string::npos);
  const LoadedPreset again = load_preset_text(saved, "saved.toml");
  REQUIRE(again.ok());
  CHECK(again.config == loaded.config);
  // --set takes the bare word and a count back
  Override o;
  ConfigIssue issue;
  REQUIRE(parse_override("memory.heads_per_stage=4", 1, &o, &issue));
  const LoadedPreset fixed = apply_overrides(loaded.config, {o});
  REQUIRE(fixed.ok());
  CHECK(fixed.config.memory.heads_per_stage == 4);
  CHECK_FALSE(spec->holds_word(fixed.config));
  REQUIRE(parse_override("memory.heads_per_stage=auto", 1, &o, &issue));
  const LoadedPreset back = apply_overrides(fixed.config, {o});
  REQUIRE(back.ok());
  CHECK(back.config.memory.heads_per_stage == kHeadsPerStageAuto);
  // the MLP tile takes the same word (a Size key: "auto" besides counts such as 8K)
  REQUIRE(parse_override("memory.mlp_tile_tokens=auto", 1, &o, &issue));
  const LoadedPreset tile = apply_overrides(loaded.config, {o});
  REQUIRE(tile.ok());
  CHECK(tile.config.memory.mlp_tile_tokens == kMlpTileTokensAuto);
  const KeySpec* tile_spec = find_key_spec("memory.mlp_tile_tokens");
  REQUIRE(tile_spec);
  CHECK(toml_literal(*tile_spec, tile.config) == "\"auto\"");
  CHECK(preset_to_toml(tile.config).find("mlp_tile_tokens = \"auto\"") != std::string::npos);
  REQUIRE(parse_override("memory.mlp_tile_tokens=8K", 1, &o, &issue));
  CHECK(apply_overrides(tile.config, {o}).config.memory.mlp_tile_tokens == 8192);
  REQUIRE(parse_override("memory.mlp_tile_tokens=automatic", 1, &o, &issue));
  const LoadedPreset misspelt = apply_overrides(tile.config, {o});
  REQUIRE_FALSE(misspelt.ok());
  CHECK(
      misspelt.issues[0].format() ==
      "--set:1:1: memory.mlp_tile_tokens = \"automatic\": must be a whole count such as 4096, 512K or 3M, or \"auto\"");
  CHECK_THROWS_WITH(mlp_sequence_tile(kMlpTileTokensAuto, 64, 1, 1024),
                    Catch::Contains("the planner picks one (planned_mlp_tile_tokens)"));
  // the stage rule has nothing to say about the word (the planner picks a valid size); the
  // layout refuses it unresolved, naming the rule that resolves it
  CHECK_FALSE(heads_per_stage_rule(32, 1, kHeadsPerStageAuto));
  CHECK_THROWS_WITH(effective_heads_per_stage(kHeadsPerStageAuto, 1),
                    Catch::Contains("the planner picks one (planned_heads_per_stage)"));
}

TEST_CASE("a key of 150,000 dotted parts or values nested past 64 are refused with their position, never a signal",
          "[config][presets][reliability]") {
  // toml++ builds and destroys a dotted key's tables recursively: 150,000 parts (a 300 KB file,
  // under the 1 MiB limit) overflowed the stack in every command and the studio.
  std::string deep = "[model]\nflavor = \"custom\"\n";
  for (int i = 0; i < 150000; ++i) deep += "a.";
  deep += "b = 1\n";
  LoadedPreset r = load_preset_text(deep, "deep.toml");
  REQUIRE(r.issues.size() == 1);
  CHECK(r.issues[0].format() ==
        "deep.toml:3:128: a key of more than 64 dotted parts (TOML syntax) (Odyssey's keys are "
        "section.key; is this a preset?)");
  // The same depth of arrays and inline tables, and of table headers.
  for (const std::string& nested :
       {"x = " + std::string(100000, '[') + std::string(100000, ']') + "\n", "x = " + std::string(100000, '{') + "\n",
        "[" + std::string(20000, 'a') + "]\n", "[" + [] {
          std::string t;
          for (int i = 0; i < 20000; ++i) t += "t.";
          return t + "u";
        }() + "]\n"}) {
    r = load_preset_text(nested, "nested.toml");
    REQUIRE_FALSE(r.issues.empty());
    INFO(r.issues[0].format());
    CHECK(r.issues[0].loc.line == 1);
  }
  CHECK_THAT(load_preset_text("x = " + std::string(65, '[') + std::string(65, ']') + "\n", "n.toml").issues[0].format(),
             Catch::Contains("nested more than 64 deep"));
  // Dots and brackets inside strings and comments are text, not structure.
  const std::string quoted = "description = \"" + std::string(300, '.') + std::string(300, '[') + "\"  # " +
                             std::string(300, '.') + "\n[model]\nflavor = 'llama3.2-1b' # {{{{\n";
  r = load_preset_text(quoted, "quoted.toml");
  for (const auto& issue : r.issues) CHECK_THAT(issue.format(), !Catch::Contains("TOML syntax"));
  const std::string multiline = "description = \"\"\"a\n" + std::string(300, '.') + "\\\"\"\"\n" +
                                std::string(300, '[') + "\"\"\"\n[model]\nflavor = 'llama3.2-1b'\n";
  r = load_preset_text(multiline, "multi.toml");
  for (const auto& issue : r.issues) CHECK_THAT(issue.format(), !Catch::Contains("TOML syntax"));
}

TEST_CASE("list_presets skips a symlink loop and links to nothing instead of throwing",
          "[config][presets][reliability]") {
  // std::filesystem's iterator threw filesystem_error on such an entry, and the studio aborted.
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/preset_listing";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/good.toml") << "[model]\nflavor = \"llama3.2-1b\"\n";
  fs::create_symlink("loop.toml", dir + "/loop.toml");
  fs::create_symlink("nowhere.toml", dir + "/dangling.toml");
  fs::create_directory(dir + "/folder.toml");
  const std::vector<std::string> found = list_presets(dir);
  REQUIRE(found.size() == 1);
  CHECK(found[0] == dir + "/good.toml");
  CHECK(list_presets(dir + "/missing").empty());
}

TEST_CASE("a [hardware] table without a profile plans at the h100-sxm profile it is labelled with",
          "[config][presets]") {
  const std::optional<HardwareConfig> h100 = find_hardware_profile("h100-sxm");
  REQUIRE(h100.has_value());
  CHECK(HardwareConfig{} == *h100);
}

TEST_CASE("a float prints as the shortest \"%g\" that reads back as it, units written out below a million",
          "[config][sizes]") {
  // The reference: every precision from 1 up, the first whose text reads back. RawValue::floating
  // starts at the shortest round trip's digit count instead; the two agree on every double (no
  // fewer digits can read back). glibc's printf and strtod round correctly whatever the CPU, so the
  // texts compared are the same on every machine.
  auto reference = [](double v) {
    char buf[40];
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*g", precision, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    // A whole-looking value below a million is written out: "%g" with the digits up to its units.
    if (const char* e = std::strchr(buf, 'e'); e != nullptr && std::atoi(e + 1) >= 0 && std::atoi(e + 1) < 6)
      std::snprintf(buf, sizeof buf, "%.*g", std::atoi(e + 1) + 1, v);
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  };
  std::vector<double> values = {0.0,
                                -0.0,
                                0.473,
                                1e-3,
                                5e-324,
                                1e308,
                                989e12,
                                0.1,
                                2.5,
                                1e15,
                                120000.0,
                                std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::min()};
  for (int e = -1074; e <= 1023; ++e) {  // every power of two: where the nearest decimal may not read back
    const double p = std::ldexp(1.0, e);
    values.insert(values.end(), {p, std::nextafter(p, 0.0), std::nextafter(p, 2 * p + 1), -p});
  }
  std::mt19937_64 bits(20261129);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t b = bits();
    double v;
    std::memcpy(&v, &b, sizeof v);
    if (std::isfinite(v)) values.push_back(v);
  }
  for (int i = 1; i <= 20000; ++i) values.push_back(i / 1000.0);  // short decimals, as presets hold
  int differing = 0;
  for (double v : values)
    if (RawValue::floating(v).text != reference(v) && ++differing <= 5)
      FAIL_CHECK(RawValue::floating(v).text << " against " << reference(v) << " for the double of bits 0x" << std::hex
                                            << std::bit_cast<uint64_t>(v));
  CHECK(differing == 0);
  CHECK(RawValue::floating(0.473).text == "0.473");
  CHECK(RawValue::floating(1e-3).text == "0.001");
  CHECK(RawValue::floating(300.0).text == "300.0");  // not 3e+02
  CHECK(RawValue::floating(1e6).text == "1e+06");
}
