// EnginePhase: phase scopes whose names survive exception unwinding, so OOM and NaN reports name
// the phase they happened in (see step_runtime.h). defines: EnginePhase, reset_engine_phases,
// failing_phase
#include "engine/model/step_runtime.h"

#include <array>
#include <exception>
#include <mutex>
#include <utility>

namespace odyssey {
namespace {

struct PhaseStacks {
  std::mutex mutex;
  std::array<std::vector<std::string>, kMaxTrackedRanks> stacks;
};

PhaseStacks& phase_stacks() {
  static PhaseStacks stacks;
  return stacks;
}

size_t slot(int rank) { return static_cast<size_t>(rank) % kMaxTrackedRanks; }

}  // namespace

EnginePhase::EnginePhase(int rank, const std::string& name)
    : scope_(name), rank_(rank), uncaught_(std::uncaught_exceptions()) {
  auto& s = phase_stacks();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stacks[slot(rank_)].push_back(name);
}

EnginePhase::~EnginePhase() {
  if (std::uncaught_exceptions() > uncaught_) return;  // unwinding: keep the failing phase on top
  auto& s = phase_stacks();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto& stack = s.stacks[slot(rank_)];
  if (!stack.empty()) stack.pop_back();
}

void reset_engine_phases(int rank) {
  auto& s = phase_stacks();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stacks[slot(rank)].clear();
}

std::string failing_phase(int rank) {
  auto& s = phase_stacks();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto& stack = s.stacks[slot(rank)];
  return stack.empty() ? std::string() : stack.back();
}

void StepRuntime::finish_pending_gradient() {
  if (pending_group == nullptr) return;
  FlatParamGroup* group = std::exchange(pending_group, nullptr);
  FlatParamGroup::PendingGradient g = std::move(pending_gradient);
  pending_gradient = {};
  if (g.pending) g.pending->finish();   // CPU: the host waits; GPU: the stream waits
  group->accumulate_gradient(g.shard);  // into the gradient, on the device or the host
}

}  // namespace odyssey
