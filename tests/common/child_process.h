// Part of a test run in a forked child, so that a memory limit, a crash or a hang ends the child and
// not the test runner; what the child says comes back as text. defines: text_from_child, limit_address_space_growth
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace odyssey::test {

/// In the child: its address space (RLIMIT_AS) may grow past what it maps now by `room` bytes
/// only; an allocation past that fails (std::bad_alloc, a thread that cannot start). False when
/// the limit could not be set.
inline bool limit_address_space_growth(rlim_t room) {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0;
  statm >> pages;
  if (pages <= 0) return false;
  const rlim_t mapped = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
  const rlimit memory{mapped + room, mapped + room};
  return ::setrlimit(RLIMIT_AS, &memory) == 0;
}

/// `body` run in a forked child: the text it returns, "(exception) WHAT" when it throws,
/// "(timeout)" when it runs past `seconds` (the child is killed) and "(crash)" when a signal ends
/// it. The child never returns into the test runner (it leaves by _exit). `body` must not use
/// Catch2's assertions: they belong to the parent.
inline std::string text_from_child(const std::function<std::string()>& body, double seconds = 60) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return "(no pipe)";
  const pid_t pid = ::fork();
  if (pid < 0) return "(no fork)";
  if (pid == 0) {
    ::close(pipefd[0]);
    std::string text;
    try {
      text = body();
    } catch (const std::exception& e) {
      text = std::string("(exception) ") + e.what();
    } catch (...) {  // nothing leaves the child into the test runner
      text = "(exception)";
    }
    (void)!::write(pipefd[1], text.data(), text.size());
    ::_exit(0);
  }
  ::close(pipefd[1]);
  // Read while waiting: a child with more to say than the pipe holds (64 KiB) waits for a reader.
  ::fcntl(pipefd[0], F_SETFL, ::fcntl(pipefd[0], F_GETFL) | O_NONBLOCK);
  std::string text;
  char buffer[4096];
  auto read_available = [&] {
    for (ssize_t n; (n = ::read(pipefd[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  bool done = false;
  while (!(done = ::waitpid(pid, &status, WNOHANG) == pid) && std::chrono::steady_clock::now() < deadline) {
    read_available();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  read_available();  // the rest, the child gone
  ::close(pipefd[0]);
  if (!done) return "(timeout)";
  if (!WIFEXITED(status)) return "(crash)";
  return text;
}

}  // namespace odyssey::test
