// The step boundary of the training loop: RunControl (the controller's stop, pause and live
// toggles) and StepBoundary, which every rank decides together before each step.
#include <stdexcept>

#include "engine/train/rank_loop.h"

namespace odyssey {

void RunControl::request_stop() {
  stop_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  cv_.notify_all();
}

void RunControl::pause() { paused_ = true; }

void RunControl::resume() {
  paused_ = false;
  std::lock_guard<std::mutex> lock(mutex_);
  cv_.notify_all();
}

void RunControl::set_memory(const MemoryConfig& memory, int64_t version) {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_history_[version] = memory;
  memory_version_ = std::max(memory_version_, version);
}

int64_t RunControl::memory_version() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return memory_version_;
}

MemoryConfig RunControl::memory_of(int64_t version) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memory_history_.find(version);
  if (it == memory_history_.end())
    throw std::logic_error("run control: no memory toggles with version " + std::to_string(version));
  return it->second;
}

bool RunControl::wait_while_paused(bool notify) {
  if (!paused_) return !stop_;
  if (notify && on_pause_change) on_pause_change(true);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !paused_.load() || stop_.load(); });
  }
  if (notify && on_pause_change) on_pause_change(false);
  return !stop_;
}

// [section] StepBoundary ------------------------------------------------------------------------

StepBoundary::StepBoundary(const RankContext& ctx, RunControl* control, RunLog log)
    : ctx_(ctx), control_(control), log_(std::move(log)) {
  CategoryScope category(MemCategory::Other);
  decision_ = at::zeros({3}, at::TensorOptions().dtype(at::kLong).device(ctx.device));  // [stop, pause, version]
}

bool StepBoundary::next(Trainer& trainer, const RunConfig& cfg) {
  const bool lead = ctx_.rank == 0;
  for (;;) {
    int64_t stop = 0, pause = 0, version = config_version_;
    if (control_) {
      // 1 + the signal's number: the all-reduce's max carries a signal to every process of the job
      stop = control_->stop_requested() ? 1 + control_->stop_signal() : 0;
      if (lead) {
        pause = control_->paused() ? 1 : 0;
        version = control_->memory_version();
      }
    }
    decision_[0] = stop;
    decision_[1] = pause;
    decision_[2] = lead ? version : 0;
    ctx_.world->all_reduce_max(decision_);
    // Every rank is here, so every rank has loaded: a stop now waits for this boundary's checkpoint.
    if (control_) control_->mark_stepping();
    const at::Tensor d = decision_.cpu();
    if (const int64_t stopped = d[0].item<int64_t>()) {
      stop_signal_ = static_cast<int>(stopped - 1);
      return false;
    }
    if (d[1].item<int64_t>()) {
      // Every in-process rank waits on the shared control (a pause comes from the Session, which
      // runs rank threads), then the boundary is decided again.
      if (control_) control_->wait_while_paused(/*notify=*/lead);
      continue;
    }
    const int64_t decided = d[2].item<int64_t>();
    if (decided > config_version_ && control_) {
      const MemoryConfig memory = control_->memory_of(decided);
      config_version_ = decided;
      trainer.set_memory(memory);
      for (const auto& note : trainer.take_notes()) log_(note);
      log_("memory toggles applied from step " + std::to_string(trainer.next_step() + 1) + ": " +
           describe_memory(cfg, memory));
    }
    return true;
  }
}

}  // namespace odyssey
