// Declaration-only stand-in for Gloo's gloo/context.h: the one member ProcessGroupGloo.hpp names
// inline (setTimeout, never emitted by Odyssey). See ../README.md. defines: gloo::Context (decl.)
#pragma once

#include <chrono>

namespace gloo {

/// Held only through shared_ptr by ProcessGroupGloo; the real class lives in libtorch_cpu.so.
/// Never constructed, sized or called here: the inline ProcessGroupGloo::setTimeout that names
/// setTimeout is virtual with its vtable in libtorch (the key function is the out-of-line
/// destructor), so this declaration is never odr-used by Odyssey.
class Context {
 public:
  Context() = delete;
  void setTimeout(std::chrono::milliseconds timeout);
};

}  // namespace gloo
