// config.json as hostile input: a FIFO, a link to /dev/zero, a directory or an oversized file is
// refused at once (each read in a child process, so a regression hangs or fills memory there and
// fails here), and a deterministic mutation fuzzer over real config.json spellings, including
// documents of 100k keys, through the reader the preset loader calls. defines: test cases [config][hf][fuzz]
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/config/hf_config.h"
#include "../common/child_process.h"
#include "engine/util/splitmix.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

std::string fresh(const std::string& name) {
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/hf_config_input_test_" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

/// read_hf_config(dir) in a child process limited to 2 GiB of memory: its error text, or
/// "(timeout)" when it did not finish within `seconds` (the child is then killed), or "(crash)".
std::string refusal_in_child(const std::string& dir, double seconds = 10) {
  return odyssey::test::text_from_child(
      [&]() -> std::string {
        const rlimit memory{rlim_t{2} << 30, rlim_t{2} << 30};
        ::setrlimit(RLIMIT_AS, &memory);
        HfConfigError error;
        return read_hf_config(dir, &error) ? "(accepted)" : error.format();  // bad_alloc: "(exception) ..."
      },
      seconds);
}

const char* const kSeeds[] = {
    // Llama 3.1 as published (transformers 4.x spelling).
    R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "num_hidden_layers": 32,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "vocab_size": 128256,
  "rms_norm_eps": 1e-05,
  "tie_word_embeddings": false,
  "max_position_embeddings": 131072,
  "rope_theta": 500000.0,
  "hidden_act": "silu",
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  }
})",
    // Qwen3 with YaRN (transformers 5 spelling).
    R"({
  "architectures": ["Qwen3ForCausalLM"],
  "model_type": "qwen3",
  "hidden_size": 1024,
  "intermediate_size": 3072,
  "num_hidden_layers": 28,
  "num_attention_heads": 16,
  "num_key_value_heads": 8,
  "head_dim": 128,
  "vocab_size": 151936,
  "rms_norm_eps": 1e-06,
  "tie_word_embeddings": true,
  "max_position_embeddings": 40960,
  "attention_bias": false,
  "use_sliding_window": false,
  "hidden_act": "silu",
  "rope_parameters": {
    "rope_theta": 1000000.0,
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 32768
  }
})",
    // A small Llama without scaling.
    R"({
  "model_type": "llama",
  "hidden_size": 64,
  "intermediate_size": 96,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "vocab_size": 256,
  "rms_norm_eps": 1e-06
})"};

const char* const kValues[] = {"0",
                               "-1",
                               "1e308",
                               "-1e308",
                               "NaN",
                               "Infinity",
                               "9223372036854775807",
                               "18446744073709551616",
                               "1e-308",
                               "0.5",
                               "true",
                               "null",
                               "\"\"",
                               "\"llama\"",
                               "[1, 2]",
                               "{}",
                               "{\"a\": 1}",
                               "4097",
                               "1099511627776",
                               "2.0000001",
                               "-0",
                               "1e400"};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  lines.push_back(text.substr(start));
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

/// One mutant of `text` (kind 0..11).
std::string mutate(const std::string& text, int kind, SplitMix& rng) {
  std::vector<std::string> lines = lines_of(text);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng.below(static_cast<int64_t>(std::max<size_t>(n, 1)))); };
  const size_t at = pick(lines.size());
  switch (kind) {
    case 0:
      lines.erase(lines.begin() + static_cast<long>(at));
      return join(lines);  // a key deleted
    case 1:
      lines.insert(lines.begin() + static_cast<long>(at), lines[at]);
      return join(lines);  // a key duplicated
    case 2:
      std::swap(lines[at], lines[pick(lines.size())]);
      return join(lines);  // keys moved between objects
    case 3:
    case 4: {  // a value replaced by an extreme or another type
      for (size_t tries = 0; tries < lines.size(); ++tries) {
        std::string& l = lines[(at + tries) % lines.size()];
        const size_t colon = l.find("\": ");
        if (colon == std::string::npos) continue;
        const bool comma = !l.empty() && l.back() == ',';
        l = l.substr(0, colon + 3) + kValues[pick(std::size(kValues))] + (comma ? "," : "");
        break;
      }
      return join(lines);
    }
    case 5: {  // NUL, control and non-UTF-8 bytes
      std::string s = text;
      const char bad[] = {'\0', '\x01', '\x1b', '\x7f', '\xff', '\xc0', '\xed'};
      for (int k = 0; k < 3; ++k) s.insert(pick(s.size() + 1), 1, bad[pick(sizeof bad)]);
      return s;
    }
    case 6:
      return text.substr(0, pick(text.size() + 1));  // truncated
    case 7: {                                        // flipped bytes
      std::string s = text;
      for (int k = 0; k < 4; ++k) s[pick(s.size())] ^= static_cast<char>(1 + rng.below(255));
      return s;
    }
    case 8: {  // deep nesting as a value
      const size_t depth = 1 + pick(rng.below(2) ? 100 : 20000);
      lines.insert(lines.begin() + 1, "\"deep\": " + std::string(depth, '[') + std::string(depth, ']') + ",");
      return join(lines);
    }
    case 9: {  // a long string key or value
      const std::string big(50000 + pick(50000), static_cast<char>('a' + rng.below(26)));
      lines.insert(lines.begin() + 1, rng.below(2) ? "\"" + big + "\": 1," : "\"model_type\": \"" + big + "\",");
      return join(lines);
    }
    case 10: {  // tens of thousands of keys within the 1 MiB limit (ordered_json: quadratic)
      std::string keys;
      const int n = 20000 + static_cast<int>(pick(80000));
      for (int i = 0; i < n; ++i) keys += "\"k" + std::to_string(i) + "\":0,";
      lines.insert(lines.begin() + 1, keys);
      return join(lines);
    }
    default: {  // printable garbage
      std::string& l = lines[at];
      l.insert(pick(l.size() + 1), std::string(1 + pick(5), static_cast<char>(33 + rng.below(94))));
      return join(lines);
    }
  }
}

}  // namespace

TEST_CASE("hf config: a FIFO, a link to /dev/zero, a directory or an oversized config.json is refused at once",
          "[config][hf]") {
  // Read through ifstream, the FIFO waited for a writer forever and /dev/zero was read until the
  // memory ran out; each read here runs in a child that the test kills after 10 s.
  const std::string fifo = fresh("fifo");
  REQUIRE(::mkfifo((fifo + "/config.json").c_str(), 0644) == 0);
  CHECK_THAT(refusal_in_child(fifo),
             Catch::StartsWith(fifo + "/config.json: ") && Catch::Contains("is not a regular file"));
  const std::string zero = fresh("zero");
  REQUIRE(::symlink("/dev/zero", (zero + "/config.json").c_str()) == 0);
  CHECK_THAT(refusal_in_child(zero),
             Catch::StartsWith(zero + "/config.json: ") && Catch::Contains("is not a regular file"));
  const std::string dir = fresh("directory");
  REQUIRE(::mkdir((dir + "/config.json").c_str(), 0755) == 0);
  CHECK_THAT(refusal_in_child(dir), Catch::Contains("is a directory"));
  const std::string big = fresh("big");
  const std::string huge = "{\"model_type\": \"" + std::string(2 << 20, 'x') + "\"}";
  std::ofstream(big + "/config.json") << huge;
  CHECK_THAT(refusal_in_child(big),
             Catch::Contains("is " + std::to_string(huge.size()) + " bytes; a config.json is at most 1048576"));
  const std::string missing = fresh("missing");
  CHECK_THAT(refusal_in_child(missing), Catch::Contains("cannot open") && Catch::Contains("beside its safetensors"));
}

TEST_CASE("fuzz: 480 mutated config.json files are read or refused naming the file, each within a second",
          "[config][hf][fuzz]") {
  const std::string dir = fresh("fuzz");
  const std::string file = dir + "/config.json";
  for (const char* seed : kSeeds) {
    std::ofstream(file, std::ios::trunc) << seed;
    HfConfigError error;
    INFO(error.format());
    REQUIRE(read_hf_config(dir, &error).has_value());
  }
  SplitMix rng(20261203);
  constexpr int kMutants = 480;
  int read = 0, refused = 0;
  double slowest = 0;
  for (int i = 0; i < kMutants; ++i) {
    const int kind = i % 12;
    const std::string text = mutate(kSeeds[(i / 12) % std::size(kSeeds)], kind, rng);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
    INFO("mutant " << i << " (kind " << kind << "), " << text.size() << " bytes: " << text.substr(0, 800));
    const auto t0 = std::chrono::steady_clock::now();
    HfConfigError error;
    std::optional<ModelConfig> model;
    REQUIRE_NOTHROW(model = read_hf_config(dir, &error));
    if (model) {
      ++read;
      CHECK(model->n_layers >= 1);
      CHECK(model->d_model >= 1);
      CHECK(model->n_heads >= 1);
      CHECK(model->n_kv_heads >= 1);
      CHECK(model->head_dim >= 1);
      CHECK(model->vocab_size >= 2);
      CHECK(std::isfinite(model->rope_theta));
      CHECK(model->rope_theta > 0);
    } else {
      ++refused;
      CHECK(error.format().rfind(file + ": ", 0) == 0);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    slowest = std::max(slowest, s);
    CHECK(s < 1.0);
  }
  std::printf("config.json fuzz: %d mutants read, %d refused; slowest %.4f s\n", read, refused, slowest);
  CHECK(read > 60);
  CHECK(refused > 150);
}
