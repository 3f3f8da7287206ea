// odyssey export RUN_DIR --hf OUT_DIR: a run's latest checkpoint as a Hugging Face model directory
// (config.json + safetensors, sharded with an index above --max-shard-size) that transformers loads.
#include <cctype>
#include <charconv>
#include <iostream>
#include <limits>

#include "app/cli/cli.h"
#include "engine/train/hf_checkpoint.h"
#include "engine/util/files.h"
#include "engine/util/json.h"

namespace odyssey::cli {
namespace {

/// "5GB", "500MB", "2GiB", "2000000" -> bytes, as transformers' max_shard_size reads them
/// (convert_file_size_to_int: GiB, MiB, KiB binary; GB, MB, KB decimal; units in any case, and a
/// lowercase final "b" counts bits, 5Gb = 625000000 bytes); nullopt for anything else, zero, or a
/// count past int64 ("9300000000GB" once wrapped to a negative size and wrote one tensor per file).
std::optional<int64_t> parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  int64_t number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + i, number);
  if (i == 0 || error != std::errc() || end != text.data() + i || number <= 0) return std::nullopt;
  std::string unit = text.substr(i);
  const bool bits = unit.size() == 2 && unit.back() == 'b';  // "Gb": transformers' bits
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::pair<const char*, int64_t> units[] = {{"", 1},
                                                   {"B", 1},
                                                   {"KB", 1000},
                                                   {"MB", 1000'000},
                                                   {"GB", 1000'000'000},
                                                   {"KIB", int64_t{1} << 10},
                                                   {"MIB", int64_t{1} << 20},
                                                   {"GIB", int64_t{1} << 30}};
  for (const auto& [name, scale] : units) {
    int64_t bytes = 0;
    if (unit == name && !__builtin_mul_overflow(number, scale, &bytes)) {
      if (bits) bytes /= 8;
      return bytes > 0 ? std::optional<int64_t>(bytes) : std::nullopt;
    }
  }
  return std::nullopt;
}

/// export_hf's messages begin "export: ", which the command's own prefix already says.
std::string without_prefix(const std::string& what) { return what.rfind("export: ", 0) == 0 ? what.substr(8) : what; }

int run_export(int argc, char** argv, int first) {
  std::string run_dir, out_dir;
  HfExportOptions options;
  bool json = false;
  auto bad = [](const std::string& why) {
    std::cerr << "odyssey export: " << why
              << "\nusage: odyssey export RUN_DIR --hf OUT_DIR [--dtype float32|bfloat16] "
                 "[--max-shard-size 5GB] [--tokenizer HF_DIR] [--json]\n";
    return kExitBadInput;
  };
  OnceFlags given;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    // --flag=value is --flag value, as every other subcommand's parser takes it (cli.cpp parse_args).
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0)
      if (const size_t eq = arg.find('='); eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    std::string option_as_value;  // the next argument is an option, not this flag's value
    auto value = [&]() -> std::optional<std::string> {
      if (inline_value) return inline_value;
      if (i + 1 >= argc) return std::nullopt;
      if (option_as_value = option_taken_as_value(arg, argv[i + 1]); !option_as_value.empty()) return std::nullopt;
      return std::string(argv[++i]);
    };
    if (arg == "--json") {
      if (inline_value) return bad("--json takes no value (got " + std::string(argv[i]) + ")");
      json = true;
    } else if (arg == "--hf" || arg == "--dtype" || arg == "--max-shard-size" || arg == "--tokenizer") {
      const auto v = value();
      if (!option_as_value.empty()) return bad(option_as_value);
      if (!v || v->empty()) return bad(arg + " needs a value");
      if (const std::string twice = given.give(arg, *v); !twice.empty()) return bad(twice);
      if (arg == "--hf") out_dir = *v;
      if (arg == "--dtype") {
        if (*v != "float32" && *v != "bfloat16") return bad("--dtype " + *v + ": must be float32 or bfloat16");
        options.dtype = *v;
      }
      if (arg == "--max-shard-size") {
        const auto bytes = parse_bytes(*v);
        if (!bytes)
          return bad("--max-shard-size " + *v +
                     ": must be a positive size such as 5GB, 500MB, 2GiB or 2000000 (units as transformers' "
                     "max_shard_size), of at most " +
                     std::to_string(std::numeric_limits<int64_t>::max()) + " bytes");
        options.max_shard_bytes = *bytes;
      }
      if (arg == "--tokenizer") options.tokenizer_dir = *v;
    } else if (!arg.empty() && arg[0] == '-') {
      return bad("unknown option " + std::string(argv[i]));
    } else if (run_dir.empty()) {
      run_dir = arg;
    } else {
      return bad("one run directory only (got " + run_dir + " and " + arg + ")");
    }
  }
  if (run_dir.empty()) return bad("no run directory");
  if (out_dir.empty()) return bad("--hf OUT_DIR is required (the only export format)");
  // a tokenizer.json or tokenizer.model named itself stands for its folder (as eval --tokenizer takes it)
  if (const std::string name = options.tokenizer_dir.substr(options.tokenizer_dir.find_last_of('/') + 1);
      (name == "tokenizer.json" || name == "tokenizer.model") && path_exists(options.tokenizer_dir) &&
      !is_directory(options.tokenizer_dir))
    options.tokenizer_dir = folder_of(options.tokenizer_dir);
  if (!options.tokenizer_dir.empty() && !path_exists(options.tokenizer_dir))
    return bad("--tokenizer " + options.tokenizer_dir + ": does not exist");
  if (!options.tokenizer_dir.empty() && !is_directory(options.tokenizer_dir))
    return bad("--tokenizer " + options.tokenizer_dir +
               ": not a directory (name the folder of tokenizer.json, or the file itself)");
  // A directory without a tokenizer would export none, and drop the one the run carries.
  if (!options.tokenizer_dir.empty() && !path_exists(join_path(options.tokenizer_dir, "tokenizer.json")) &&
      !path_exists(join_path(options.tokenizer_dir, "tokenizer.model")))
    return bad("--tokenizer " + options.tokenizer_dir +
               ": holds no tokenizer.json or tokenizer.model; name the model directory the tokenizer is in");
  try {
    const HfExport done = export_hf(run_dir, out_dir, options);
    if (json) {
      std::string text;
      JsonWriter w(text);
      w.begin_object()
          .key("ok")
          .value(true)
          .key("step")
          .value(done.step)
          .key("out")
          .value(out_dir)
          .key("dtype")
          .value(done.dtype)
          .key("tensor_bytes")
          .value(done.tensor_bytes)
          .key("files")
          .begin_array();
      for (const auto& f : done.files) w.value(f);
      w.end_array().end_object();
      std::cout << text << "\n";
    } else {
      std::cout << "exported step " << done.step << " of " << run_dir << " to " << out_dir << " (" << done.dtype << ", "
                << done.tensor_bytes << " bytes of weights):";
      for (const auto& f : done.files) std::cout << " " << f;
      std::cout << "\n";
    }
    if (const std::string note = done.no_tokenizer_note(); !note.empty())
      std::cerr << "odyssey export: " << note << "\n";
    return kExitOk;
  } catch (const CheckpointError& e) {
    std::cerr << "odyssey export: " << without_prefix(e.what()) << "\n";
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {
    std::cerr << "odyssey export: " << without_prefix(e.what()) << "\n";
    return kExitBadInput;
  }
}

const CommandRegistration registration{
    Command{75, "export", "export RUN_DIR --hf OUT_DIR [--dtype D] [--max-shard-size 5GB] [--tokenizer DIR] [--json]",
            "write a run's latest checkpoint as a Hugging Face model (config.json, safetensors and the "
            "tokenizer files the run carries; --tokenizer DIR: DIR's instead)",
            run_export}};

}  // namespace
}  // namespace odyssey::cli
