// The SIGINT and SIGTERM handler of one command for its life (train, eval, prepare): installs it and
// puts the previous handlers back when the scope ends, so a command's stop rule never outlives it.
#pragma once

#include <csignal>

/// Installs `handler` for SIGINT and SIGTERM; the destructor restores what was there before.
/// restart: SA_RESTART, so a read or write the signal interrupts goes on (the handler records or
/// acts); without it a blocking call returns EINTR at once (a loop that polls sees the stop).
///   StopSignalScope signals(on_stop_signal, /*restart=*/true);
class StopSignalScope {
 public:
  StopSignalScope(void (*handler)(int), bool restart) {
    struct sigaction on {};
    on.sa_handler = handler;
    on.sa_flags = restart ? SA_RESTART : 0;
    ::sigemptyset(&on.sa_mask);
    ::sigaction(SIGINT, &on, &previous_int_);
    ::sigaction(SIGTERM, &on, &previous_term_);
  }
  ~StopSignalScope() {
    ::sigaction(SIGINT, &previous_int_, nullptr);
    ::sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  struct sigaction previous_int_ {
  }, previous_term_{};
};
