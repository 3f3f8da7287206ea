// odyssey tune PRESET [--set k=v]... [--headroom 5%|4GiB] [-o OUT.toml [--overwrite]] [--json]: the
// fastest [memory] table that fits (engine/planner tune()) with the headroom free, the runner-up, the
// changes against the preset, and the tuned preset written with -o. Nothing fits: exit 2 with the
// advisor's word (the input must change).
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "app/cli/cli.h"
#include "app/cli/planner_format.h"
#include "engine/config/config_diff.h"
#include "engine/config/sizes.h"
#include "engine/util/files.h"
#include "engine/util/printf_string.h"
#include "engine/util/publish_file.h"

namespace odyssey::cli {
namespace {

/// Where -o may write: not an existing file unless --overwrite, never a directory, and into a
/// directory that exists. "" when it may, else why not.
std::string output_problem(const std::string& path, bool overwrite) {
  if (std::string why = output_file_refusal(path, overwrite, "pass --overwrite to replace it"); !why.empty())
    return why;
  struct stat st {};
  const std::string tmp = AtomicFile::temporary_path(path);
  if (::lstat(tmp.c_str(), &st) == 0)
    return tmp + " exists, and -o writes through that name before renaming it: remove it, or choose another name";
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  if (!is_directory(dir)) return "the directory " + dir + " of " + path + " does not exist";
  // The temporary's name is the file's and 4 bytes more: a name the folder takes, its temporary not.
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  const size_t tmp_name = tmp.size() - (slash == std::string::npos ? 0 : slash + 1);
  if (name_max > 0 && tmp_name > static_cast<size_t>(name_max))
    return path + ": a file name of " + std::to_string(tmp_name - 4) + " bytes, and -o writes through " +
           tmp.substr(slash == std::string::npos ? 0 : slash + 1) + ", longer than the " + std::to_string(name_max) +
           " bytes a name may have there: choose a shorter name";
  return "";
}

/// --headroom's value: a share of the device's memory ("5%", at most 50%) or bytes ("4GiB", "512MiB").
/// nullopt with why not in `why`.
std::optional<TuneOptions> parse_headroom(const std::string& text, std::string* why) {
  // a decimal number (digits, a point, an exponent: strtod alone also takes hex, "inf" and spaces)
  const size_t digits = text.find_first_not_of("0123456789.eE+-");
  const std::string number_text = text.substr(0, digits);
  const char* begin = number_text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  const std::string unit = digits == std::string::npos ? "" : text.substr(digits);
  const bool read = !number_text.empty() &&
                    (std::isdigit(static_cast<unsigned char>(number_text[0])) || number_text[0] == '.') &&
                    end == begin + number_text.size() && std::isfinite(number) && number >= 0;
  TuneOptions options;
  if (read && unit == "%" && number <= 50) {
    options.headroom_share = number / 100;
    return options;
  }
  const double unit_bytes = unit == "GiB" ? 1024.0 * 1024 * 1024 : unit == "MiB" ? 1024.0 * 1024 : 0;
  if (read && unit_bytes > 0 && number * unit_bytes < 9.0e18) {
    options.headroom_bytes = static_cast<int64_t>(std::llround(number * unit_bytes));
    return options;
  }
  *why = "--headroom " + text + ": give the device memory to keep free as a share of it, from 0% to 50% (5%), or " +
         "as bytes in GiB or MiB (4GiB, 512MiB)";
  return std::nullopt;
}

int run_tune(int argc, char** argv, int first) {
  ArgSpec spec;
  spec.set = spec.json = spec.output = spec.overwrite = spec.headroom = true;
  auto args = parse_args("tune", spec, argc, argv, first, std::cerr);
  if (!args) return kExitBadInput;
  if (args->overwrite && args->output.empty()) {
    std::cerr << "odyssey tune: --overwrite needs -o OUT.toml (it replaces that file)\n";
    return kExitBadInput;
  }
  TuneOptions options;
  if (!args->headroom.empty()) {
    std::string why;
    const std::optional<TuneOptions> given = parse_headroom(args->headroom, &why);
    if (!given) {
      std::cerr << "odyssey tune: " << why << "\n";
      return kExitBadInput;
    }
    options = *given;
  }
  const std::string& path = args->positional.front();
  auto loaded = load_or_report(path, args->overrides, std::cerr, PresetData::Checked);
  if (!loaded) return kExitBadInput;
  if (!args->output.empty()) {  // refuse before the search: a refused file is the user's to fix first
    if (const std::string why = output_problem(args->output, args->overwrite); !why.empty()) {
      std::cerr << "odyssey tune: -o " << why << "\n";
      return kExitBadInput;
    }
  }
  const RunConfig& cfg = loaded->config;
  // In bytes as in a share: at most half the device (beyond it the headroom, not the techniques,
  // decides what fits).
  if (const double device = cfg.hardware.device_memory_gib * kGiB;
      options.headroom_bytes >= 0 && static_cast<double>(options.headroom_bytes) > 0.5 * device) {
    std::cerr << "odyssey tune: --headroom " << args->headroom << ": more than half the device's "
              << printf_string("%.2f", cfg.hardware.device_memory_gib)
              << " GiB (hardware.device_memory_gib); keep at most 50% of it free\n";
    return kExitBadInput;
  }

  const auto t0 = std::chrono::steady_clock::now();
  const TuneResult tuned = tune(cfg, options);
  const double search_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const TuneCandidate* choice = tuned.chosen();
  if (!choice) {
    // Nothing the memory techniques can do: the preset asks for more than the hardware holds, an
    // input to change (exit 2), with what the advisor would change beyond [memory].
    // what the plan fits but the headroom does not, where there is any: the user's call (a smaller
    // --headroom), not the advisor's
    const TuneCandidate* closest = closest_to_fitting(tuned);
    const bool into_headroom = closest && closest->peak.fits();
    std::cerr << "odyssey tune: nothing fits: none of the " << tuned.candidates.size() << " technique sets for " << path
              << " fits (" << setup_line(cfg) << ")";
    if (closest) std::cerr << "; the lowest peak, with " << closest->summary() << ": " << closest->verdict();
    if (into_headroom)
      std::cerr << "; --headroom sets the memory kept free\n";
    else
      std::cerr << "." << advice_text(advise(cfg)) << "\n";
    return kExitBadInput;
  }
  const std::vector<KeyChange> changes = config_changes(cfg, choice->config);
  std::string written;
  if (!args->output.empty()) {
    std::string error;
    if (!save_preset(args->output, choice->config, &error, args->overwrite)) {
      std::cerr << "odyssey tune: " << error << "\n";
      return kExitRuntime;
    }
    written = args->output;
  }

  if (args->json) {
    std::string out;
    JsonWriter w(out);
    w.begin_object().key("preset").value(path).key("tune");
    write_tune_json(w, cfg, tuned, /*all_dropped=*/true);
    w.key("search_ms").value(search_ms).key("written");
    if (written.empty())
      w.null();
    else
      w.value(written);
    w.end_object();
    std::cout << out << "\n";
    return kExitOk;
  }
  std::cout << path << ": " << setup_line(cfg) << "\n";
  print_tune(std::cout, cfg, tuned, /*dropped_shown=*/5);
  if (changes.empty()) {
    std::cout << "changes against the preset: none (it already runs the fastest memory that fits)\n";
  } else {
    std::cout << "changes against the preset:\n";
    for (const KeyChange& change : changes) std::cout << "  " << change.describe() << "\n";
  }
  std::cout << "searched " << tuned.evaluated << " memory tables (" << tuned.candidates.size() << " technique sets) in "
            << static_cast<int64_t>(search_ms + 0.5) << " ms\n";
  if (!written.empty()) std::cout << "wrote " << written << " (odyssey plan " << written << " shows it)\n";
  return kExitOk;
}

const CommandRegistration registration{
    Command{45, "tune", "tune PRESET [--set k=v]... [--headroom 5%|4GiB] [-o OUT.toml [--overwrite]] [--json]",
            "the fastest memory techniques that fit with 3% of the device (or --headroom) free, the runner-up and "
            "the changes; -o writes the tuned preset; exit 2 when nothing fits",
            run_tune}};

}  // namespace
}  // namespace odyssey::cli
