// Declaration-only stand-in for Gloo's gloo/transport/device.h: ProcessGroupGloo.hpp holds
// devices and unbound buffers only through smart pointers. See ../README.md.
// defines: gloo::transport::Device, gloo::transport::UnboundBuffer (forward declarations)
#pragma once

namespace gloo::transport {

/// A TCP transport endpoint; created by ProcessGroupGloo::createDeviceForHostname in libtorch.
class Device;
/// Send/receive staging used by ProcessGroupGloo's point-to-point work items.
class UnboundBuffer;

}  // namespace gloo::transport
