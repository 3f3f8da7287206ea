// Parsing of odyssey-studio's arguments; every bad argument is named with the rule it breaks.
// defines: parse_assignment, parse_studio_args, studio_usage, panel_from_name
#include "app/studio/cli_options.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "engine/config/schema.h"
#include "engine/util/command_line.h"
#include "engine/util/files.h"

namespace odyssey::studio {

namespace {
template <typename T>
bool parse_number(const std::string& text, T* out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && p == end;
}
/// A finite number spelled out whole ("nan", "inf" and trailing text are refused: every range
/// check below compares, and a NaN passes every comparison).
bool parse_float(const std::string& text, double* out) {
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() && std::isfinite(*out);
}
/// Every --panel name, joined: "config, plan, ..." with `last` before the final one.
std::string panel_names(const char* separator, const char* last) {
  std::string out;
  for (int i = 0; i < kPanelCount; ++i)
    out += std::string(i == 0 ? "" : i + 1 == kPanelCount ? last : separator) + panel_name(static_cast<PanelId>(i));
  return out;
}
}  // namespace

bool parse_assignment(const std::string& assignment, Override* out, std::string* error) {
  ConfigIssue issue;
  if (!parse_override(assignment, 0, out, &issue)) {
    if (error) *error = issue.format();
    return false;
  }
  const std::string key = out->section.empty() ? out->key : out->section + "." + out->key;
  const KeySpec* spec = find_key_spec(out->section, out->key);
  if (!spec) {
    if (error) *error = "unknown key " + key;
    return false;
  }
  std::string rule;
  if (!coerce_value(*spec, out->value, &rule)) {
    if (error) *error = key + " = " + out->value.text + ": " + rule;
    return false;
  }
  return true;
}

std::optional<PanelId> panel_from_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (int i = 0; i < kPanelCount; ++i)
    if (lower == panel_name(static_cast<PanelId>(i))) return static_cast<PanelId>(i);
  return std::nullopt;
}

std::string studio_usage() {
  return "usage: odyssey-studio [PRESET] [--screenshot FILE [--frames N]] [--run-steps N] [--scale S]\n"
         "                      [--panel " +
         panel_names("|", "|") +
         "] [--size WxH]\n"
         "                      [--set section.key=value]... [--change-at STEP:section.key=value]...\n"
         "                      [--timeout SECONDS] [--bench-samples N]\n"
         "  PRESET          preset file to open (default presets/tiny-cpu.toml)\n"
         "  --screenshot F  render, write a PNG to F and exit 0 (1 if the window or the run fails);\n"
         "                  an existing F must be a PNG (an earlier screenshot)\n"
         "  --frames N      screenshot mode: frames rendered before the screenshot (default 5)\n"
         "  --run-steps N   screenshot mode: train N steps first and wait for them (at most training.steps)\n"
         "  --scale S       UI scale, 0.5 to 4 (also View > Scale)\n"
         "  --panel NAME    focus one panel: it fills the area beside the configuration\n"
         "  --size WxH      window size (default 1600x1000)\n"
         "  --set k=v       override a preset key, as `odyssey train --set`\n"
         "  --change-at S:k=v  screenshot mode: when the run reaches step S (before --run-steps), edit key k\n"
         "                  as if through the UI (a live toggle, or a restart for model/parallel keys)\n"
         "  --timeout S     screenshot mode: stop waiting for the run after S seconds (default 600)\n"
         "  --bench-samples N  benchmark: fill the timeline with N synthetic memory samples (no\n"
         "                  engine; at most 10000000) to measure the frame time of the plot path\n";
}

bool parse_studio_args(int argc, const char* const* argv, StudioOptions* out, std::string* error) {
  StudioOptions o;
  bool preset_given = false;
  std::vector<std::string> screenshot_only;  // the options screenshot mode reads, as given
  auto fail = [&](const std::string& msg) {
    if (error) *error = msg;
    return false;
  };
  // An option that takes one value, given twice: refused as odyssey's commands refuse it (the
  // last one silently won). --set and --change-at repeat.
  static const std::set<std::string> kOnce = {"--screenshot", "--frames", "--run-steps",     "--scale",
                                              "--panel",      "--size",   "--bench-samples", "--timeout"};
  OnceFlags given;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool takes_value = kOnce.count(arg) || arg == "--set" || arg == "--change-at";
    // `--screenshot --panel plan` would write a PNG named "--panel" and lose the option.
    if (takes_value && i + 1 < argc)
      if (const std::string option = option_taken_as_value(arg, argv[i + 1]); !option.empty()) return fail(option);
    if (kOnce.count(arg))
      if (const std::string twice = given.give(arg, i + 1 < argc ? argv[i + 1] : ""); !twice.empty())
        return fail(twice);
    auto value = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "-h" || arg == "--help") {
      o.help = true;
    } else if (arg == "--screenshot") {
      if (!value(&v) || v.empty()) return fail("--screenshot needs a file name");
      // Checked now, not after the frames (and --run-steps' training) were spent on a picture
      // that cannot be written.
      const std::string folder = folder_of(v);
      if (is_directory(v)) return fail("--screenshot " + v + ": is a folder; name the PNG file to write");
      if (!is_directory(folder)) return fail("--screenshot " + v + ": the folder " + folder + " does not exist");
      // A screenshot replaces only an earlier picture: never a preset (the one opened, say), and
      // never a FIFO (writing it waits for a reader) or a device.
      struct stat st {};
      if (::lstat(v.c_str(), &st) == 0) {
        if (!S_ISREG(st.st_mode))
          return fail("--screenshot " + v +
                      ": is not a regular file (a link, FIFO, socket or device); name a PNG file");
        std::string head;
        try {
          head = read_file_bounded(v, int64_t{1} << 30, "screenshot").substr(0, 8);
        } catch (const std::exception& e) {
          return fail("--screenshot " + v + ": " + e.what());
        }
        if (head != std::string("\x89PNG\r\n\x1a\n", 8))
          return fail("--screenshot " + v +
                      ": exists and is not a PNG; a screenshot replaces only an earlier picture: remove it, or name "
                      "another file");
      }
      o.screenshot = v;
    } else if (arg == "--frames") {
      screenshot_only.push_back(arg);
      if (!value(&v) || !parse_number(v, &o.frames) || o.frames < 1 || o.frames > 100000)
        return fail("--frames " + v + ": needs a whole number between 1 and 100000");
    } else if (arg == "--run-steps") {
      screenshot_only.push_back(arg);
      if (!value(&v) || !parse_number(v, &o.run_steps) || o.run_steps < 0)
        return fail("--run-steps " + v + ": needs a whole number of steps, 0 or more");
    } else if (arg == "--scale") {
      double s = 0;
      if (!value(&v) || !parse_float(v, &s) || s < 0.5 || s > 4)
        return fail("--scale " + v + ": needs a number between 0.5 and 4");
      o.scale = static_cast<float>(s);
    } else if (arg == "--panel") {
      if (!value(&v)) return fail("--panel needs a name: " + panel_names(", ", " or "));
      o.panel = panel_from_name(v);
      if (!o.panel) return fail("--panel " + v + ": unknown panel (" + panel_names(", ", ", ") + ")");
    } else if (arg == "--size") {
      const auto x = (value(&v) ? v.find('x') : std::string::npos);
      if (x == std::string::npos || !parse_number(v.substr(0, x), &o.width) ||
          !parse_number(v.substr(x + 1), &o.height) || o.width < 320 || o.height < 240 || o.width > 8192 ||
          o.height > 8192)
        return fail("--size " + v + ": needs WIDTHxHEIGHT between 320x240 and 8192x8192, e.g. 1600x1000");
    } else if (arg == "--set") {
      if (!value(&v) || v.find('=') == std::string::npos) return fail("--set " + v + ": needs section.key=value");
      o.sets.push_back(v);
    } else if (arg == "--change-at") {
      screenshot_only.push_back(arg);
      const auto colon = value(&v) ? v.find(':') : std::string::npos;
      ScriptedChange c;
      if (colon == std::string::npos || !parse_number(v.substr(0, colon), &c.step) || c.step < 0 ||
          v.find('=', colon) == std::string::npos)
        return fail("--change-at " + v + ": needs STEP:section.key=value, e.g. 20:memory.tiled_mlp=false");
      c.assignment = v.substr(colon + 1);
      Override checked;
      if (std::string why; !parse_assignment(c.assignment, &checked, &why))
        return fail("--change-at " + v + ": " + why);
      o.changes.push_back(c);
    } else if (arg == "--bench-samples") {
      // Every sample is built in memory before the history's caps apply: about 190 B each.
      if (!value(&v) || !parse_number(v, &o.bench_samples) || o.bench_samples < 1 || o.bench_samples > kMaxBenchSamples)
        return fail("--bench-samples " + v + ": needs a sample count between 1 and " +
                    std::to_string(kMaxBenchSamples) + " (about 190 bytes each)");
    } else if (arg == "--timeout") {
      screenshot_only.push_back(arg);
      if (!value(&v) || !parse_float(v, &o.timeout_s) || o.timeout_s <= 0)
        return fail("--timeout " + v + ": needs a positive number of seconds");
    } else if (!arg.empty() && arg[0] == '-') {
      return fail("unknown option " + arg);
    } else if (!preset_given) {
      o.preset = arg;
      preset_given = true;
    } else {
      return fail("unexpected argument " + arg + " (one preset at most)");
    }
  }
  // Read by screenshot mode only: without --screenshot they would be dropped unseen.
  if (o.screenshot.empty() && !screenshot_only.empty())
    return fail(screenshot_only.front() + " works in screenshot mode only: add --screenshot FILE (or leave it out)");
  if (o.run_steps == 0 && !o.changes.empty())
    return fail("--change-at needs --run-steps N: its edits are made while those steps train");
  for (const ScriptedChange& c : o.changes)
    if (c.step >= o.run_steps)
      return fail("--change-at " + std::to_string(c.step) + ":" + c.assignment + ": step " + std::to_string(c.step) +
                  " is not before --run-steps " + std::to_string(o.run_steps) +
                  "; the edit must land on a step the run still trains");
  std::stable_sort(o.changes.begin(), o.changes.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  *out = o;
  return true;
}

}  // namespace odyssey::studio
