// The two device slots that hold restored block inputs during backward, as a state machine: pure
// logic, header-only and CUDA-free, so the engine's offload store runs it on every device.
// defines: SlotRotation
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernel_host.h"

namespace odyssey::kernels {

/// Bookkeeping of the two device slots that hold restored block inputs during backward. Block i
/// always uses slot i % 2: backward walks blocks downwards, so while block i computes from its slot,
/// block i-1 is prefetched into the other one, whose previous occupant (block i+1) was released.
/// Every misuse throws KernelError naming block, slot and occupant.
///   rot.begin_fill(i - 1); rot.acquire(i); ... rot.release(i);
class SlotRotation {
 public:
  enum class State { Free, Filling, InUse };
  static constexpr int kSlots = 2;

  static int slot_for(int64_t block) { return static_cast<int>(block % kSlots); }

  /// A prefetch of `block` starts: its slot must be Free. Returns the slot.
  int begin_fill(int64_t block) {
    const int slot = checked_slot("begin_fill", block);
    require(states_[slot] == State::Free,
            story("begin_fill", block, slot) + "; release that block before prefetching into its slot");
    states_[slot] = State::Filling;
    occupants_[slot] = block;
    return slot;
  }
  /// Compute starts reading `block` from its slot: it must be Filling with this block. Returns the slot.
  int acquire(int64_t block) {
    const int slot = checked_slot("acquire", block);
    require(states_[slot] == State::Filling && occupants_[slot] == block,
            story("acquire", block, slot) + "; only a block being prefetched into the slot can be acquired");
    states_[slot] = State::InUse;
    return slot;
  }
  /// Compute is done with `block`: its slot must be InUse by it; the slot becomes Free.
  int release(int64_t block) {
    const int slot = checked_slot("release", block);
    require(states_[slot] == State::InUse && occupants_[slot] == block,
            story("release", block, slot) + "; only the block in use can be released");
    states_[slot] = State::Free;
    occupants_[slot] = -1;
    return slot;
  }

  State state(int slot) const { return states_[slot]; }
  /// Block held by the slot, -1 when Free.
  int64_t occupant(int slot) const { return occupants_[slot]; }
  /// True when `block` is Filling or InUse in its slot.
  bool holds(int64_t block) const {
    if (block < 0) return false;
    const int slot = slot_for(block);
    return states_[slot] != State::Free && occupants_[slot] == block;
  }
  /// Back to both slots free (a step that failed half-way; the caller has stopped every copy).
  void reset() { *this = SlotRotation(); }

 private:
  static int checked_slot(const char* op, int64_t block) {
    require(block >= 0, std::string("SlotRotation::") + op + ": block = " + std::to_string(block) + " must be >= 0");
    return slot_for(block);
  }
  static const char* state_name(State s) {
    switch (s) {
      case State::Free:
        return "free";
      case State::Filling:
        return "filling";
      case State::InUse:
        return "in use";
    }
    return "?";
  }
  std::string story(const char* op, int64_t block, int slot) const {
    return std::string("SlotRotation::") + op + ": block " + std::to_string(block) + " needs slot " +
           std::to_string(slot) + ", which is " + state_name(states_[slot]) +
           (occupants_[slot] >= 0 ? " (block " + std::to_string(occupants_[slot]) + ")" : std::string());
  }
  State states_[kSlots] = {State::Free, State::Free};
  int64_t occupants_[kSlots] = {-1, -1};
};

}  // namespace odyssey::kernels
