// A TCP port nobody listens on now, for MASTER_PORT in the torchrun tests (cli_tests and
// parallel_tests spawn processes that meet there). No LibTorch. defines: free_port, kLowestTestPort,
// kNeededPortRoom
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

namespace odyssey::test {

/// The lowest port free_port takes: clear of the well-known and registered services below it.
constexpr int kLowestTestPort = 10000;
/// The ports between kLowestTestPort and the ephemeral range that free_port needs to use them.
constexpr int kNeededPortRoom = 4000;

namespace detail {

/// Whether a listener could bind `port` on every address now, as TCPStore's server binds it (the
/// IPv6 wildcard, dual-stack, or IPv4's where the host has no IPv6), with SO_REUSEADDR as it sets.
inline bool port_free_everywhere(int port) {
  const int on = 1, off = 0;
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd >= 0) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return free;
  }
  fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return free;
}

/// The kernel's pick (bind 127.0.0.1 to port 0, read back, release): inside the ephemeral range.
inline int kernel_picked_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("free_port: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool picked = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int error = errno;
  ::close(fd);
  if (!picked) throw std::runtime_error(std::string("free_port: no port from the kernel: ") + std::strerror(error));
  return ntohs(addr.sin_port);
}

}  // namespace detail

/// A port free on every address now, below the kernel's ephemeral range (ip_local_port_range).
/// The port is released before the child process binds it, and a port the kernel picks lies inside
/// that range, where the Gloo listeners and outgoing connections of a test running beside this one
/// (ctest -j) bind port 0 and may take it in between ("address already in use"); below the range
/// only an explicit bind takes a port. Successive calls walk a sequence that starts at an offset
/// drawn from the process id, so test processes running together seldom try the same port. Falls
/// back to the kernel's pick when the range starts too low to leave kNeededPortRoom below it.
inline int free_port() {
  int ephemeral_low = 32768;  // Linux's default, where the file cannot be read
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (range) range >> ephemeral_low;
  const int room = ephemeral_low - kLowestTestPort;
  if (room < kNeededPortRoom) return detail::kernel_picked_port();
  static std::atomic<int> calls{0};
  // Knuth's multiplicative hash (2^32 / golden ratio) spreads neighbouring process ids apart.
  const int start = static_cast<int>((static_cast<unsigned>(::getpid()) * 2654435761u) % static_cast<unsigned>(room));
  for (int attempt = 0; attempt < 256; ++attempt) {
    const int port = kLowestTestPort + (start + calls.fetch_add(1)) % room;
    if (detail::port_free_everywhere(port)) return port;
  }
  return detail::kernel_picked_port();
}

}  // namespace odyssey::test
