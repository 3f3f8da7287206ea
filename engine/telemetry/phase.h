// Phase scopes: RAII markers that nest into paths ("fwd/block.3/attn") and record, per rank and
// step, start/end time, device and host bytes at both edges and the peak inside. Records flow to
// the ring buffer (studio), metrics.jsonl and the Perfetto trace. defines: PhaseScope,
// PhaseRecord, PhaseRecorder
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

/// One finished phase of one rank.
struct PhaseRecord {
  int rank = 0;
  int64_t step = 0;
  int depth = 0;              ///< 0 for "step", 1 for "fwd/embed", ...
  std::string path;           ///< "fwd/block.3/attn"
  double t_begin_s = 0;       ///< seconds since the recorder's epoch
  double t_end_s = 0;
  int64_t device_begin = 0, device_end = 0, device_peak = 0;
  int64_t host_begin = 0, host_end = 0, host_peak = 0;
  std::array<int64_t, kMemCategoryCount> category_at_peak{};  ///< device+host bytes per category at the peak
};

/// Records the phases of one rank. The rank's thread binds it with PhaseRecorder::Bind; scopes on
/// that thread then record into it. Sinks receive each record as it finishes.
class PhaseRecorder {
 public:
  explicit PhaseRecorder(int rank);
  int rank() const { return rank_; }

  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  /// Called for every finished phase (ring buffer, trace writer). Sinks run on the rank thread.
  void add_sink(std::function<void(const PhaseRecord&)> sink);

  /// Records finished since the last take_records (the trainer takes them at each step end).
  std::vector<PhaseRecord> take_records();

  /// Binds a recorder to the current thread for the guard's life.
  class Bind {
   public:
    explicit Bind(PhaseRecorder* recorder);
    ~Bind();
    Bind(const Bind&) = delete;
    Bind& operator=(const Bind&) = delete;

   private:
    PhaseRecorder* previous_;
  };
  /// The recorder bound to this thread, or nullptr.
  static PhaseRecorder* current();

  // Used by PhaseScope.
  void push(std::string_view name);
  void pop();
  const std::string& current_path() const;

 private:
  struct Open;
  int rank_;
  int64_t step_ = 0;
  std::vector<Open*> stack_;
  std::vector<PhaseRecord> finished_;
  std::vector<std::function<void(const PhaseRecord&)>> sinks_;
  std::string empty_;
};

/// Marks a phase on the current thread's recorder (no-op when none is bound). Nest freely:
/// { PhaseScope fwd("fwd"); { PhaseScope b("block.3"); { PhaseScope a("attn"); ... } } }
class PhaseScope {
 public:
  explicit PhaseScope(std::string_view name);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseRecorder* recorder_;
};

}  // namespace odyssey
