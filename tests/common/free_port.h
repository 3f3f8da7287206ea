// A loopback TCP port nobody listens on now, for MASTER_PORT in the torchrun tests (cli_tests and
// parallel_tests spawn processes that meet there). No LibTorch. defines: free_port
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

namespace odyssey::test {

namespace detail {

/// Whether a listening socket could bind 127.0.0.1:port now (SO_REUSEADDR, as TCPStore binds).
inline bool loopback_port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return free;
}

/// The kernel's pick (bind to port 0, read back, release): inside the ephemeral range.
inline int kernel_picked_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace detail

/// A port free on 127.0.0.1 now, below the kernel's ephemeral range (ip_local_port_range). The
/// port is released before the child process binds it, and a port the kernel picks lies inside
/// that range, where the Gloo listeners and outgoing connections of a test running beside this one
/// (ctest -j) bind port 0 and may take it in between ("address already in use"); below the range
/// only an explicit bind takes a port. Successive calls walk a sequence that starts at an offset
/// drawn from the process id, so test processes running together seldom try the same port, and
/// a port checked here was free at that moment. Falls back to the kernel's pick when the range
/// starts too low to leave room below it.
inline int free_port() {
  constexpr int kLowest = 10000;     // clear of the well-known and registered services below it
  constexpr int kNeededRoom = 4000;  // ports below the ephemeral range this needs to be useful
  int ephemeral_low = 32768;
  int ephemeral_high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (range) range >> ephemeral_low >> ephemeral_high;
  const int room = ephemeral_low - kLowest;
  if (room < kNeededRoom) return detail::kernel_picked_port();
  static std::atomic<int> calls{0};
  const int start = static_cast<int>((static_cast<unsigned>(::getpid()) * 2654435761u) % static_cast<unsigned>(room));
  for (int attempt = 0; attempt < 256; ++attempt) {
    const int port = kLowest + (start + calls.fetch_add(1)) % room;
    if (detail::loopback_port_free(port)) return port;
  }
  return detail::kernel_picked_port();
}

}  // namespace odyssey::test
