// A fixed-capacity ring buffer that training threads write and the studio reads by cursor without
// holding the writers up: the oldest entries are overwritten, readers copy out in short chunks.
// No LibTorch. defines: RingBuffer
#pragma once

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace odyssey {

/// Usage: RingBuffer<MemorySample> ring(1 << 20); ring.push(s);
///        size_t cursor = 0; cursor = ring.read_since(cursor, &out);  // everything new since
/// A cursor counts entries ever written; read_since returns the cursor to pass next time.
/// Thread-safe for any number of writers and readers. A writer waits at most for one reader
/// chunk (kReadChunk entries copied under the lock), never for a whole read.
template <class T>
class RingBuffer {
 public:
  static constexpr size_t kReadChunk = 4096;

  explicit RingBuffer(size_t capacity) : slots_(capacity) {
    if (capacity == 0) throw std::invalid_argument("RingBuffer: capacity must be positive");
  }

  void push(const T& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_[written_ % slots_.size()] = value;
    ++written_;
  }
  void push(T&& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_[written_ % slots_.size()] = std::move(value);
    ++written_;
  }

  /// Appends to *out the entries written after `cursor` that are still held (at most
  /// `max_items`), oldest first, and returns the new cursor. Entries overwritten before they
  /// were read are skipped and counted in *dropped (when given). A cursor beyond the writes so
  /// far (a buffer cleared since) restarts at the oldest held entry. Entries written while the
  /// read is under way are left for the next call.
  size_t read_since(size_t cursor, std::vector<T>* out, size_t* dropped = nullptr,
                    size_t max_items = static_cast<size_t>(-1)) const {
    size_t lost = 0;
    size_t target = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      target = written_;
      const size_t oldest = oldest_locked();
      if (cursor > target) cursor = oldest;
      if (cursor < oldest) {
        lost += oldest - cursor;
        cursor = oldest;
      }
    }
    const size_t limit = max_items == static_cast<size_t>(-1) ? target : std::min(target, cursor + max_items);
    while (cursor < limit) {
      std::lock_guard<std::mutex> lock(mutex_);
      const size_t oldest = oldest_locked();
      if (cursor < oldest) {  // overwritten while we were away
        lost += oldest - cursor;
        cursor = oldest;
        if (cursor >= limit) break;
      }
      const size_t n = std::min(kReadChunk, limit - cursor);
      out->reserve(out->size() + n);
      for (size_t i = 0; i < n; ++i) out->push_back(slots_[(cursor + i) % slots_.size()]);
      cursor += n;
    }
    if (dropped != nullptr) *dropped = lost;
    return cursor;
  }

  /// Entries ever written (the cursor a reader that has seen everything holds).
  size_t written() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return written_;
  }
  /// Entries held now (at most capacity).
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return written_ - oldest_locked();
  }
  size_t capacity() const { return slots_.size(); }

  /// Forgets every entry; cursors continue from the same count, so readers see nothing old.
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    cleared_at_ = written_;
  }

 private:
  size_t oldest_locked() const {
    const size_t by_capacity = written_ > slots_.size() ? written_ - slots_.size() : 0;
    return std::max(by_capacity, cleared_at_);
  }

  mutable std::mutex mutex_;
  std::vector<T> slots_;
  size_t written_ = 0;
  size_t cleared_at_ = 0;
};

}  // namespace odyssey
