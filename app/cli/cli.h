// The odyssey CLI's shared pieces: the argument parser every subcommand uses (--set, --json,
// --steps, --out, --resume), preset loading that prints every issue, and the command table.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/preset.h"
#include "engine/util/command_line.h"

namespace odyssey::cli {

/// Exit codes of the CLI contract.
constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitBadInput = 2;

/// Parsed arguments of one subcommand.
struct Args {
  std::vector<std::string> positional;  ///< preset paths
  std::vector<Override> overrides;      ///< --set section.key=value, in order
  bool json = false;                    ///< --json: one JSON object on stdout
  std::optional<int64_t> steps;         ///< --steps N
  std::string out;                      ///< --out DIR
  std::string resume;                   ///< --resume DIR
  bool quiet = false;                   ///< --quiet: no progress output
  bool no_checkpoint = false;           ///< --no-checkpoint: write no checkpoint (benchmarks)
  std::string memory_snapshot;          ///< --memory-snapshot FILE (CUDA allocator history)
  std::string kernel_profile;           ///< --kernel-profile FILE (Kineto trace of the last step)
  bool overwrite = false;               ///< --overwrite: replace the run in --out
  bool force = false;                   ///< --force: start what the planner says does not fit
  std::string output;                   ///< -o FILE / --output FILE: a file the command writes
  std::string headroom;                 ///< --headroom 5% | 4GiB: device memory tune keeps free (as given)
};

/// Which options a subcommand accepts.
struct ArgSpec {
  bool set = false, json = false, steps = false, out = false, resume = false, quiet = false, no_checkpoint = false,
       memory_snapshot = false, kernel_profile = false, overwrite = false, force = false, output = false,
       headroom = false;
  int min_positional = 1;
  int max_positional = 1;
};

/// Parses argv[first..]; on a problem prints it to `err` and returns nullopt (exit code 2). Options
/// take their value as the next argument or after '=' (--out=DIR); "--" ends the options (a preset
/// named -x.toml); path values are cleaned of trailing and doubled slashes (clean_path).
std::optional<Args> parse_args(const std::string& command, const ArgSpec& spec, int argc, char** argv, int first,
                               std::ostream& err);

/// What load_or_report reads besides the preset.
enum class PresetData {
  Planned,  ///< a documents preset's lengths for the planner (read_planned_documents): train, bench
  Checked,  ///< those, and the file as train opens it (check_dataset): plan, ladder, maxlen and tune
            ///< refuse what check and train refuse (one-token documents under masking, say)
  Skip,     ///< nothing: `prepare --preset` writes that file
};

/// Loads and validates a preset with the overrides and reads its data as `data` says; prints every
/// issue to `err` and returns nullopt when there is any.
std::optional<LoadedPreset> load_or_report(const std::string& path, const std::vector<Override>& overrides,
                                           std::ostream& err, PresetData data = PresetData::Planned);

/// A documents preset's file read for the planner (the lengths its step time counts) into
/// `loaded.config.document_lengths`; the issue, at training.dataset_path's line, when it cannot be.
std::optional<ConfigIssue> read_planned_documents(LoadedPreset& loaded);

/// The preset's data file opened as `odyssey train` opens it (make_dataset: the file's header and
/// fields, every token below the vocabulary, tokens for one sequence, the packing's rule, a target
/// in every sequence under document masking); the issue, at training.dataset_path's line, when
/// train would refuse it. Nothing for the built-in long-range task (the validator's rules).
std::optional<ConfigIssue> check_dataset(const LoadedPreset& loaded);

/// A subcommand: `run` gets argv with argv[first] being the first argument after its name.
struct Command {
  int order;  ///< position in --help (the CLI contract's order)
  const char* name;
  const char* usage;    ///< e.g. "check PRESET..."
  const char* summary;  ///< one line for --help
  std::function<int(int argc, char** argv, int first)> run;
  /// What `odyssey NAME --help` prints (ending in a newline): every option with what it does.
  /// Null: the usage and the summary (the usage then names every option the command takes).
  const char* help = nullptr;
};

/// All registered subcommands, sorted by `order`.
const std::vector<Command>& commands();

/// Each cmd_*.cpp registers its subcommand with a static CommandRegistration.
struct CommandRegistration {
  explicit CommandRegistration(Command command);
};

}  // namespace odyssey::cli
