// Runs the tokenizer process (the project's Python with scripts/prepare_text.py) and reads its record
// stream: one poll loop feeds it the input list, reads its records and keeps its stderr for the
// message if it fails. defines: project_python, run_text_tokenizer
#include "app/cli/text_tokenizer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "engine/util/le_bytes.h"

extern char** environ;

namespace odyssey::cli {

// Generated from scripts/prepare_text.py and the build's Python (app/cli/prepare_text_script.cpp.in).
extern const char* const kPrepareTextScript;
extern const char* const kBuildPython;

namespace {

constexpr size_t kStderrKept = 16 << 10;  // the tail of the process's stderr quoted on failure

std::string stderr_tail(const std::string& err) {
  std::string tail = err.size() > 4000 ? "..." + err.substr(err.size() - 4000) : err;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail.empty() ? "(it printed nothing)" : tail;
}

/// The child and its three pipes; the destructor kills and reaps a child still running.
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  ~Child() {
    for (int fd : {in, out, err})
      if (fd >= 0) ::close(fd);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  /// Waits for the exit and returns its wait status.
  int reap() {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
    return status;
  }
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

/// SIGPIPE ignored while the child's stdin is written (a child that died early is an EPIPE then,
/// and its stderr says why), restored after.
struct IgnoreSigpipe {
  struct sigaction old {};
  IgnoreSigpipe() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old);
  }
  ~IgnoreSigpipe() { ::sigaction(SIGPIPE, &old, nullptr); }
};

}  // namespace

std::string project_python() {
  if (const char* env = std::getenv("ODYSSEY_PYTHON"); env != nullptr && *env != '\0') return env;
  return kBuildPython;
}

int64_t run_text_tokenizer(const std::string& tokenizer_json, const TokenizeOptions& options,
                           const std::vector<TextInput>& inputs, const TokenizerEvents& events) {
  const std::string python = project_python();
  if (python.empty())
    throw PrepareError(1,
                       "no Python to run the tokenizer: this build found none (it records the Python of its "
                       "LibTorch wheel), and ODYSSEY_PYTHON is not set; set ODYSSEY_PYTHON to a Python with the "
                       "tokenizers package");
  IgnoreSigpipe ignore_sigpipe;
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw PrepareError(1, std::string("cannot create pipes for the tokenizer process: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  std::vector<std::string> args = {python, "-c", kPrepareTextScript, "--tokenizer", tokenizer_json};
  if (options.append_eos) args.push_back("--append-eos");
  if (options.match_special_tokens) args.push_back("--match-special-tokens");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Child child;
  const int spawned = ::posix_spawnp(&child.pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  for (int fd : {in[0], out[1], err[1]}) ::close(fd);
  child.in = in[1];
  child.out = out[0];
  child.err = err[0];
  if (spawned != 0) {
    child.pid = -1;
    throw PrepareError(1, "cannot run the project's Python '" + python + "' (" + std::strerror(spawned) +
                              "): set ODYSSEY_PYTHON to a Python with the tokenizers package");
  }
  for (int fd : {child.in, child.out, child.err}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);

  std::string manifest;  // KIND\0PATH\0 per input
  for (const auto& input : inputs) manifest += input.kind + '\0' + input.path + '\0';
  size_t manifest_sent = 0;
  std::string stream, errors, bad_input;
  size_t parsed = 0;  // stream[parsed..] is not yet a whole record
  int64_t documents = 0, documents_said = -1;
  std::vector<uint32_t> ids;
  bool protocol_broken = false;
  auto parse = [&] {
    for (;;) {
      const size_t have = stream.size() - parsed;
      if (have < 1) return;
      const char* p = stream.data() + parsed;
      const char tag = p[0];
      size_t need = 0;
      switch (tag) {
        case 'T':
          need = have >= 21 ? 21 + load_le<uint32_t>(p + 17) : 21;
          break;
        case 'F':
          need = 5;
          break;
        case 'D':
          need = have >= 5 ? 5 + 4 * static_cast<size_t>(load_le<uint32_t>(p + 1)) : 5;
          break;
        case 'P':
          need = 13;
          break;
        case 'E':
          need = have >= 5 ? 5 + load_le<uint32_t>(p + 1) : 5;
          break;
        case 'Z':
          need = 9;
          break;
        default:
          protocol_broken = true;
          return;
      }
      if (have < need) break;
      if (tag == 'T') {
        TokenizerInfo info;
        info.vocab_size = static_cast<int64_t>(load_le<uint64_t>(p + 1));
        info.eos_id = static_cast<int64_t>(load_le<uint64_t>(p + 9));
        info.eos_text.assign(p + 21, load_le<uint32_t>(p + 17));
        if (events.tokenizer) events.tokenizer(info);
      } else if (tag == 'F') {
        if (events.file) events.file(load_le<uint32_t>(p + 1));
      } else if (tag == 'D') {
        const int64_t n = load_le<uint32_t>(p + 1);
        ids.resize(static_cast<size_t>(n));
        std::memcpy(ids.data(), p + 5, 4 * static_cast<size_t>(n));  // copied: the stream is not aligned
        if (events.document) events.document(ids.data(), n);
        ++documents;
      } else if (tag == 'P') {
        if (events.progress) events.progress(load_le<uint32_t>(p + 1), static_cast<int64_t>(load_le<uint64_t>(p + 5)));
      } else if (tag == 'E') {
        bad_input.assign(p + 5, load_le<uint32_t>(p + 1));
      } else {
        documents_said = static_cast<int64_t>(load_le<uint64_t>(p + 1));
      }
      parsed += need;
    }
    if (parsed > (1 << 20) && parsed * 2 > stream.size()) {  // keep the buffer one record long
      stream.erase(0, parsed);
      parsed = 0;
    }
  };

  char chunk[1 << 16];
  while (child.out >= 0 || child.err >= 0) {
    if (const int sig = events.stop_signal ? events.stop_signal() : 0)
      throw PrepareError(128 + sig, std::string("stopped by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
                                        " before the end: nothing was written");
    pollfd fds[3];
    int n = 0;
    for (int fd : {child.in, child.out, child.err})
      if (fd >= 0) fds[n++] = pollfd{fd, static_cast<short>(fd == child.in ? POLLOUT : POLLIN), 0};
    if (::poll(fds, n, 100) < 0 && errno != EINTR) throw PrepareError(1, std::string("poll: ") + std::strerror(errno));
    for (int k = 0; k < n; ++k) {
      if (fds[k].revents == 0) continue;
      if (fds[k].fd == child.in) {
        const ssize_t w = ::write(child.in, manifest.data() + manifest_sent, manifest.size() - manifest_sent);
        if (w > 0) manifest_sent += static_cast<size_t>(w);
        if (manifest_sent == manifest.size() || (w < 0 && errno != EAGAIN && errno != EINTR)) close_fd(child.in);
        continue;
      }
      const ssize_t r = ::read(fds[k].fd, chunk, sizeof chunk);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r <= 0) {
        close_fd(fds[k].fd == child.out ? child.out : child.err);
        continue;
      }
      if (fds[k].fd == child.err) {
        errors.append(chunk, static_cast<size_t>(r));
        if (errors.size() > 2 * kStderrKept) errors.erase(0, errors.size() - kStderrKept);
      } else {
        stream.append(chunk, static_cast<size_t>(r));
        parse();
        if (protocol_broken) close_fd(child.out);
      }
    }
    if (child.in >= 0 && manifest.empty()) close_fd(child.in);
  }
  close_fd(child.in);
  const int status = child.reap();
  if (!bad_input.empty()) throw PrepareError(2, bad_input, true);
  const std::string who = "the tokenizer process (" + python + " running scripts/prepare_text.py)";
  if (WIFSIGNALED(status))
    throw PrepareError(1,
                       who + " was killed by signal " + std::to_string(WTERMSIG(status)) + ": " + stderr_tail(errors));
  if (WEXITSTATUS(status) != 0)
    throw PrepareError(1,
                       who + " failed with exit " + std::to_string(WEXITSTATUS(status)) + ": " + stderr_tail(errors));
  if (protocol_broken || documents_said != documents || parsed != stream.size())
    throw PrepareError(1, who + " ended without a complete record stream (" + std::to_string(documents) +
                              " documents read" +
                              (documents_said >= 0 ? ", " + std::to_string(documents_said) + " said" : "") +
                              "): " + stderr_tail(errors));
  return documents;
}

}  // namespace odyssey::cli
