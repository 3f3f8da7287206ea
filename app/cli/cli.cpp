// Argument parsing and preset loading shared by every odyssey subcommand, and the command registry.
#include "app/cli/cli.h"

#include <algorithm>
#include <cstdint>
#include <iostream>

#include "engine/config/sizes.h"
#include "engine/train/dataset.h"
#include "engine/train/documents_file.h"
#include "engine/util/files.h"

namespace odyssey::cli {

namespace {
std::vector<Command>& registry() {
  static std::vector<Command> all;
  return all;
}
}  // namespace

CommandRegistration::CommandRegistration(Command command) {
  auto& all = registry();
  all.push_back(std::move(command));
  std::sort(all.begin(), all.end(), [](const Command& a, const Command& b) { return a.order < b.order; });
}

const std::vector<Command>& commands() { return registry(); }

std::optional<Args> parse_args(const std::string& command, const ArgSpec& spec, int argc, char** argv, int first,
                               std::ostream& err) {
  Args args;
  int set_index = 0;
  auto need_value = [&](int& i, const std::string& flag) -> const char* {
    if (i + 1 >= argc) {
      err << "odyssey " << command << ": " << flag << " needs a value\n";
      return nullptr;
    }
    if (const std::string option = option_taken_as_value(flag, argv[i + 1]); !option.empty()) {
      err << "odyssey " << command << ": " << option << "\n";
      return nullptr;
    }
    return argv[++i];
  };
  bool options_ended = false;
  OnceFlags values_given;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (options_ended) {
      args.positional.push_back(a);
      continue;
    }
    if (a == "--") {  // what follows are presets, even when they begin with '-'
      options_ended = true;
      continue;
    }
    std::string inline_value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--set", 0) != 0) {
        inline_value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
    }
    auto value = [&](const std::string& flag) -> const char* {
      const char* v = has_inline ? inline_value.c_str() : need_value(i, flag);
      if (!v) return nullptr;
      if (const std::string twice = values_given.give(flag == "--output" ? "-o" : flag, v); !twice.empty()) {
        err << "odyssey " << command << ": " << twice << "\n";
        return nullptr;
      }
      return v;
    };
    // A switch given a value (--force=no) is refused, not read as on.
    auto switch_on = [&](bool& flag) {
      if (has_inline) {
        err << "odyssey " << command << ": " << a << " takes no value (got " << argv[i] << ")\n";
        return false;
      }
      flag = true;
      return true;
    };
    if (a == "--set" && spec.set) {
      const char* v = need_value(i, a);
      if (!v) return std::nullopt;
      Override o;
      ConfigIssue issue;
      if (!parse_override(v, ++set_index, &o, &issue)) {
        err << issue.format() << "\n";
        return std::nullopt;
      }
      args.overrides.push_back(std::move(o));
    } else if (a.rfind("--set=", 0) == 0 && spec.set) {
      Override o;
      ConfigIssue issue;
      if (!parse_override(a.substr(6), ++set_index, &o, &issue)) {
        err << issue.format() << "\n";
        return std::nullopt;
      }
      args.overrides.push_back(std::move(o));
    } else if (a == "--json" && spec.json) {
      if (!switch_on(args.json)) return std::nullopt;
    } else if (a == "--quiet" && spec.quiet) {
      if (!switch_on(args.quiet)) return std::nullopt;
    } else if (a == "--no-checkpoint" && spec.no_checkpoint) {
      if (!switch_on(args.no_checkpoint)) return std::nullopt;
    } else if (a == "--overwrite" && spec.overwrite) {
      if (!switch_on(args.overwrite)) return std::nullopt;
    } else if (a == "--force" && spec.force) {
      if (!switch_on(args.force)) return std::nullopt;
    } else if (a == "--steps" && spec.steps) {
      const char* v = value(a);
      if (!v) return std::nullopt;
      auto n = parse_size(v);
      const std::string text = v;
      const bool digits =
          !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!n && digits) {
        err << "odyssey " << command << ": --steps " << v << ": out of range (at most " << INT64_MAX << ")\n";
        return std::nullopt;
      }
      if (!n || *n < 1) {
        err << "odyssey " << command << ": --steps " << v << ": must be a positive integer\n";
        return std::nullopt;
      }
      args.steps = *n;
    } else if (a == "--out" && spec.out) {
      const char* v = value(a);
      if (!v) return std::nullopt;
      if (!*v) {
        err << "odyssey " << command << ": --out needs a directory, got an empty value\n";
        return std::nullopt;
      }
      args.out = clean_path(v);
    } else if ((a == "-o" || a == "--output") && spec.output) {
      const char* v = value(a);
      if (!v) return std::nullopt;
      if (!*v) {
        err << "odyssey " << command << ": " << a << " needs a file name, got an empty value\n";
        return std::nullopt;
      }
      args.output = v;
    } else if (a == "--headroom" && spec.headroom) {
      const char* v = value(a);
      if (!v) return std::nullopt;
      if (!*v) {
        err << "odyssey " << command << ": --headroom needs a share of the device (5%) or bytes (4GiB), got an "
            << "empty value\n";
        return std::nullopt;
      }
      args.headroom = v;  // read by the command (parse_headroom in cmd_tune.cpp), which knows the device
    } else if (a == "--memory-snapshot" && spec.memory_snapshot) {
      const char* v = value(a);
      if (!v) return std::nullopt;
      if (!*v) {
        err << "odyssey " << command << ": --memory-snapshot needs a file name, got an empty value\n";
        return std::nullopt;
      }
      args.memory_snapshot = v;
    } else if (a == "--kernel-profile" && spec.kernel_profile) {
      const char* v = value(a);
      if (!v) return std::nullopt;
      if (!*v) {
        err << "odyssey " << command << ": --kernel-profile needs a file name, got an empty value\n";
        return std::nullopt;
      }
      args.kernel_profile = v;
    } else if (a == "--resume" && spec.resume) {
      const char* v = value(a);
      if (!v) return std::nullopt;
      if (!*v) {
        err << "odyssey " << command << ": --resume needs a run directory, got an empty value\n";
        return std::nullopt;
      }
      args.resume = clean_path(v);
    } else if (a.size() > 1 && a[0] == '-') {
      err << "odyssey " << command << ": unknown option " << argv[i] << " (see odyssey " << command << " --help)\n";
      return std::nullopt;
    } else {
      args.positional.push_back(a);
    }
  }
  const int n = static_cast<int>(args.positional.size());
  if (n < spec.min_positional || (spec.max_positional >= 0 && n > spec.max_positional)) {
    err << "odyssey " << command << ": expected " << (spec.max_positional == 1 ? "one preset" : "one or more presets")
        << ", got " << n << " (see odyssey " << command << " --help)\n";
    return std::nullopt;
  }
  return args;
}

std::optional<LoadedPreset> load_or_report(const std::string& path, const std::vector<Override>& overrides,
                                           std::ostream& err, PresetData data) {
  LoadedPreset loaded = load_preset(path, overrides);
  if (!loaded.ok()) {
    for (const auto& issue : loaded.issues) err << issue.format() << "\n";
    return std::nullopt;
  }
  if (data == PresetData::Skip) return loaded;
  // The file train opens, checked where the planner reads it anyway (a documents file's lengths);
  // a preset whose data lives elsewhere (a cluster's) is still planned without it.
  std::optional<ConfigIssue> issue;
  if (data == PresetData::Checked && plans_document_lengths(loaded.config.training)) issue = check_dataset(loaded);
  if (!issue) issue = read_planned_documents(loaded);
  if (issue) {
    err << issue->format() << "\n";
    return std::nullopt;
  }
  return loaded;
}

namespace {

/// The preset's data file refused: the issue at training.dataset_path's line, with `rule` and `hint`.
ConfigIssue dataset_path_issue(const LoadedPreset& loaded, const std::string& rule, const std::string& hint) {
  const auto at = loaded.sources.find("training.dataset_path");
  return ConfigIssue{at != loaded.sources.end() ? at->second : SourceLoc{}, "training.dataset_path",
                     "\"" + loaded.config.training.dataset_path + "\"", rule, hint};
}

}  // namespace

std::optional<ConfigIssue> check_dataset(const LoadedPreset& loaded) {
  const TrainingConfig& training = loaded.config.training;
  if (training.dataset == DatasetKind::LongRange) return std::nullopt;
  try {
    make_dataset(training, loaded.config.model);  // opened, checked and closed
    return std::nullopt;
  } catch (const std::runtime_error& e) {  // DataError; DataChangedError: the file changed while read
    return dataset_path_issue(loaded, e.what(),
                              "odyssey train opens the data file with these checks before its first step");
  }
}

std::optional<ConfigIssue> read_planned_documents(LoadedPreset& loaded) {
  RunConfig& cfg = loaded.config;
  if (!plans_document_lengths(cfg.training)) return std::nullopt;
  // the planner counts each document's attention (its step time) from the file's lengths
  try {
    cfg.document_lengths = read_document_lengths(cfg.training.dataset_path, cfg.model.vocab_size);
    return std::nullopt;
  } catch (const DataError& e) {
    return dataset_path_issue(loaded, e.what(), "the planner reads the documents' lengths from this file");
  }
}

}  // namespace odyssey::cli
