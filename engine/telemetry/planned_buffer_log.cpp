// The log of tagged engine buffers (engine/telemetry/planned_buffer_log.h): one global pointer,
// read with one atomic load per note, so untested runs pay nothing measurable.
#include "engine/telemetry/planned_buffer_log.h"

#include <atomic>
#include <stdexcept>

namespace odyssey {
namespace {
std::atomic<PlannedBufferLog*> g_log{nullptr};
}  // namespace

PlannedBufferLog::PlannedBufferLog() {
  PlannedBufferLog* none = nullptr;
  if (!g_log.compare_exchange_strong(none, this))
    throw std::logic_error("PlannedBufferLog: another log is already collecting");
}

PlannedBufferLog::~PlannedBufferLog() { g_log.store(nullptr); }

std::map<PlannedBuffer, std::set<int64_t>> PlannedBufferLog::seen() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seen_;
}

void PlannedBufferLog::note(PlannedBuffer tag, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  seen_[tag].insert(bytes);
}

void note_planned_buffer(PlannedBuffer tag, const at::Tensor& buffer) {
  PlannedBufferLog* log = g_log.load(std::memory_order_relaxed);
  if (log == nullptr || tag == PlannedBuffer::Count || !buffer.defined()) return;
  log->note(tag, buffer.numel() * static_cast<int64_t>(buffer.element_size()));
}

}  // namespace odyssey
