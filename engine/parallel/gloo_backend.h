// Construction of c10d's Gloo backend without Gloo's headers (the PyPI wheel ships none): the only
// translation unit that sees ProcessGroupGloo.hpp is gloo_backend.cpp. See docs/gloo.md.
// defines: make_gloo_backend
#pragma once

#include <chrono>
#include <string>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace odyssey {

/// A ProcessGroupGloo over `store` (one PrefixStore per group; every member calls this with the
/// same store prefix, its rank in the group and the group size). The group's TCP device binds to
/// `interface` if given (GLOO_SOCKET_IFNAME), else to `hostname` ("127.0.0.1" for in-process ranks
/// and loopback runs), else (both empty) to this machine's hostname.
/// `timeout` bounds the rendezvous and every Gloo operation inside the backend.
/// Blocks until all `size` members have joined. Throws c10::Error on a failed rendezvous.
///   auto pg = make_gloo_backend(prefix_store, rank, 4, std::chrono::seconds(30));
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& hostname = "127.0.0.1",
                                                    const std::string& interface = "");

}  // namespace odyssey
