// Noting each buffer the engine preallocates under the planner term that predicts it, so a test can
// hold the planner to the engine's bytes tensor by tensor. defines: PlannedBufferLog, note_planned_buffer
// Off (one relaxed atomic load per note) unless a PlannedBufferLog is alive.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "engine/layout/planned_buffers.h"

namespace odyssey {

/// While alive, collects every note from every thread (rank threads included): the distinct byte
/// counts seen under each tag. One log at a time.
///   PlannedBufferLog log;  trainer.step();  log.seen()[PlannedBuffer::UntiedQStage]
class PlannedBufferLog {
 public:
  PlannedBufferLog();  ///< throws std::logic_error when another log is alive
  ~PlannedBufferLog();
  PlannedBufferLog(const PlannedBufferLog&) = delete;
  PlannedBufferLog& operator=(const PlannedBufferLog&) = delete;

  std::map<PlannedBuffer, std::set<int64_t>> seen() const;
  void note(PlannedBuffer tag, int64_t bytes);

 private:
  mutable std::mutex mutex_;
  std::map<PlannedBuffer, std::set<int64_t>> seen_;
};

/// Notes `buffer`'s bytes (numel x element size) under `tag` in the live log, if any. Tag Count
/// (a buffer no planner term names) and undefined tensors are ignored.
void note_planned_buffer(PlannedBuffer tag, const at::Tensor& buffer);

}  // namespace odyssey
