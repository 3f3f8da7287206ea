// Declaration-only stand-in for Gloo's gloo/rendezvous/store.h: the abstract Store that the inline
// ProcessGroupGloo::GlooStore overrides, with the same virtuals in the same order as Gloo's.
// See ../README.md. defines: gloo::rendezvous::Store, GLOO_STORE_HAS_STORE_V2
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

// Gloo defines this in its store.h; ProcessGroupGloo.hpp declares the v2 overrides under it.
#define GLOO_STORE_HAS_STORE_V2 1

namespace gloo::rendezvous {

/// Key-value rendezvous store. Odyssey never derives from, constructs or calls it: GlooStore is
/// constructed inside libtorch_cpu.so with libtorch's own vtables.
class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::seconds(30);

  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) = 0;

  virtual bool has_v2_support() { return false; }
  virtual std::vector<std::vector<char>> multi_get(const std::vector<std::string>& keys) {
    throw std::logic_error("gloo shim: multi_get is never called from Odyssey");
  }
  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<std::vector<char>>& values) {
    throw std::logic_error("gloo shim: multi_set is never called from Odyssey");
  }
  virtual void append(const std::string& key, const std::vector<char>& data) {
    throw std::logic_error("gloo shim: append is never called from Odyssey");
  }
  virtual int64_t add(const std::string& key, int64_t value) {
    throw std::logic_error("gloo shim: add is never called from Odyssey");
  }
};

}  // namespace gloo::rendezvous
