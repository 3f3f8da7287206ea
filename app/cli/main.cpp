// odyssey: the headless CLI. Dispatches to the subcommands registered by cmd_*.cpp; the contract
// (names, flags, JSON fields, exit codes 0/1/2) is in DESIGN.md and README.md. Built twice:
// `odyssey` (no LibTorch) hands the commands it lacks to `odyssey-engine` (all of them).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "app/cli/cli.h"
#include "app/cli/model_weights_check.h"

namespace {

#ifdef ODYSSEY_CLI_ENGINE_EXE
/// LibTorch reads the caching allocator's settings while its libraries load, before any code of
/// odyssey-engine runs, and aborts on an item without a value ("expandable_segments" for
/// "expandable_segments:True") with an internal assert and a backtrace. Checked here, where no
/// LibTorch is loaded: every comma-separated item (outside [..] lists) must be KEY:VALUE. "" when it is.
std::string allocator_setting_problem(const char* name) {
  const char* set = std::getenv(name);
  if (set == nullptr || *set == '\0') return "";
  const std::string value = set;
  std::string item;
  int depth = 0;
  auto item_ok = [](const std::string& text) {
    const size_t colon = text.find(':');
    return colon != std::string::npos && colon > 0 && colon + 1 < text.size();
  };
  for (size_t i = 0; i <= value.size(); ++i) {
    const char c = i < value.size() ? value[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      if (!item_ok(item))
        return std::string(name) + "=" + value + ": the item \"" + item +
               "\" is not KEY:VALUE (PyTorch's format, e.g. expandable_segments:True); LibTorch aborts on it "
               "before odyssey starts";
      item.clear();
    } else {
      item += c;
    }
  }
  return "";
}

/// OpenMP (libgomp, loaded with LibTorch) reads OMP_NUM_THREADS as positive whole numbers, one per
/// nesting level ("4" or "4,2"; strtoul's spelling: spaces around, a leading "+" or zeros), and
/// ignores any other value with a warning, running on every core; odyssey's own reading
/// (configure_threads, an int) would take "4x" as 4. Checked here for both to agree. "" when it is
/// unset or well formed.
std::string thread_setting_problem() {
  const char* set = std::getenv("OMP_NUM_THREADS");
  if (set == nullptr) return "";
  const std::string value = set;
  size_t i = 0;
  auto skip_spaces = [&] {
    while (i < value.size() && std::isspace(static_cast<unsigned char>(value[i]))) ++i;
  };
  for (bool first = true; first || (i < value.size() && value[i] == ','); first = false) {
    if (!first) ++i;
    skip_spaces();
    if (i < value.size() && value[i] == '+') ++i;
    const size_t digits = i;
    while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i;
    std::string number = value.substr(digits, i - digits);
    number.erase(0, std::min(number.find_first_not_of('0'), number.size()));  // leading zeros
    const std::string most = std::to_string(INT_MAX);
    if (number.empty() || number.size() > most.size() || (number.size() == most.size() && number > most))
      return "OMP_NUM_THREADS=" + value + ": not a thread count (a whole number from 1 to " + most +
             ", or a comma-separated list of them, one per OpenMP nesting level); OpenMP would ignore it and run on "
             "every core. Unset it to let odyssey share the cores between its ranks";
    skip_spaces();
  }
  if (i == value.size()) return "";
  return "OMP_NUM_THREADS=" + value + ": \"" + value.substr(i) +
         "\" follows the thread count (a whole number, or a comma-separated list of them); OpenMP would ignore the "
         "value and run on every core";
}

/// Replaces this process with odyssey-engine from this executable's folder, same arguments: the
/// pid, signals, standard streams and exit code are the command's own, as if it ran here.
/// Returns only when the exec fails, with the exit code of that failure.
int run_in_engine(char** argv) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
  dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
  const std::string engine = dir + "/" + ODYSSEY_CLI_ENGINE_EXE;
  for (const std::string& problem : {allocator_setting_problem("PYTORCH_CUDA_ALLOC_CONF"),
                                     allocator_setting_problem("PYTORCH_ALLOC_CONF"), thread_setting_problem()})
    if (!problem.empty()) {
      std::cerr << (argv[1] == nullptr ? "odyssey" : std::string("odyssey ") + argv[1]) << ": " << problem << "\n";
      return odyssey::cli::kExitBadInput;
    }
  execv(engine.c_str(), argv);
  const std::string what = argv[1] == nullptr ? "odyssey" : std::string("odyssey ") + argv[1];
  std::cerr << what << ": cannot run " << engine << " (" << std::strerror(errno)
            << "): the training commands (train, bench, eval, export) and the full help are in "
            << ODYSSEY_CLI_ENGINE_EXE << ", which is built and installed beside odyssey\n";
  return odyssey::cli::kExitRuntime;
}
#else
/// The full help: every command of this executable (odyssey-engine, which has them all).
void print_help(std::ostream& os) {
  os << "odyssey: long-context training memory studio, headless\n\n"
     << "usage: odyssey COMMAND [ARGS]\n\n";
  for (const auto& c : odyssey::cli::commands()) {
    // The summary starts in column 62; a longer usage puts it on its own line there, so two
    // commands never run into their descriptions.
    constexpr size_t kUsageWidth = 52;
    const std::string usage = c.usage;
    os << "  odyssey " << usage;
    if (usage.size() >= kUsageWidth)
      os << "\n  " << std::string(kUsageWidth + 8, ' ');
    else
      os << std::string(kUsageWidth - usage.size(), ' ');
    os << c.summary << "\n";
  }
  os << "\nCommon options:\n"
     << "  --set section.key=value   override one preset key (repeatable); sizes accept 512K, 3M\n"
     << "  --json                    print one JSON object on stdout\n"
     << "Exit codes: 0 ok, 1 runtime failure, 2 bad input (every problem printed as FILE:LINE:COL: ...).\n"
     << "Run `odyssey COMMAND --help` for a command's own options.\n";
}
#endif

}  // namespace

int main(int argc, char** argv) {
  // A file size limit (ulimit -f) would end the process with SIGXFSZ mid-write, without a word and
  // with temporaries left; ignored, the write fails with EFBIG and the file's writer says which.
  std::signal(SIGXFSZ, SIG_IGN);
  // Descriptors 0-2 closed by the caller (`2>&-`) would be the next files opened: a documents
  // file's temporary, a run's lock, which then received stderr's text. /dev/null holds them.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0 && null_fd != fd) ::close(null_fd);  // taken in order: it is fd unless that was open
    }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
#ifdef ODYSSEY_CLI_ENGINE_EXE
    return run_in_engine(argv);  // the help lists every command
#else
    print_help(std::cout);
    return argc < 2 ? odyssey::cli::kExitBadInput : odyssey::cli::kExitOk;
#endif
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "odyssey " ODYSSEY_VERSION "\n";
    return 0;
  }
  for (const auto& c : odyssey::cli::commands()) {
    if (c.name != std::string(argv[1])) continue;
    for (int i = 2; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {  // after "--", -h is a file's name
      if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
        if (c.help)
          std::cout << c.help;
        else
          std::cout << "usage: odyssey " << c.usage << "\n\n" << c.summary << "\n";
        return 0;
      }
    }
    int code = odyssey::cli::kExitRuntime;
    try {
      code = c.run(argc, argv, 2);
    } catch (const std::exception& e) {
      std::cerr << "odyssey " << c.name << ": " << e.what() << "\n";
      return odyssey::cli::kExitRuntime;
    }
    if (code == odyssey::cli::kRunInEngine) {  // it needs what only odyssey-engine has, said before any output
#ifdef ODYSSEY_CLI_ENGINE_EXE
      return run_in_engine(argv);
#else
      std::cerr << "odyssey " << c.name << ": asked for odyssey-engine, which this is\n";
      return odyssey::cli::kExitRuntime;
#endif
    }
    // Output the system refused (a full disk, a closed pipe's reader gone) is the command's
    // failure: a script reading a plan or JSON from a file must not take a cut one for a success.
    std::cout.flush();
    errno = 0;
    const bool flushed = std::fflush(stdout) == 0;
    const int flush_errno = errno;
    if (!std::cout.good() || !flushed || std::ferror(stdout)) {
      // the reason is the failed call's: a write that failed earlier in the run left no errno
      // that still holds (a long command makes many calls after it)
      const std::string reason = !flushed && flush_errno != 0 ? std::strerror(flush_errno) : "an earlier write failed";
      std::cerr << "odyssey " << c.name << ": cannot write to standard output (" << reason << ")\n";
      return code == odyssey::cli::kExitOk ? odyssey::cli::kExitRuntime : code;
    }
    return code;
  }
#ifdef ODYSSEY_CLI_ENGINE_EXE
  return run_in_engine(argv);  // a training command, or one neither knows (the engine says so)
#else
  std::cerr << "odyssey: unknown command '" << argv[1] << "'\n\n";
  print_help(std::cerr);
  return odyssey::cli::kExitBadInput;
#endif
}
