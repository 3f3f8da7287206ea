// Phase scopes: RAII markers that nest into paths ("fwd/block.3/attn") and record, per rank and
// step, start/end time, device and host bytes at both edges and the peak inside. Records flow to
// the ring buffer (studio), metrics.jsonl and the Perfetto trace. defines: PhaseScope,
// PhaseRecord, PhaseEdge, DeviceSpan, PhaseRecorder, telemetry_now_s
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/telemetry/device_timeline.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {

/// One finished phase of one rank.
struct PhaseRecord {
  int rank = 0;
  int64_t step = 0;
  int depth = 0;         ///< 0 for "step", 1 for "fwd/embed", ...
  std::string path;      ///< "fwd/block.3/attn"
  double t_begin_s = 0;  ///< seconds since the recorder's epoch
  double t_end_s = 0;
  int64_t device_begin = 0, device_end = 0, device_peak = 0;
  int64_t host_begin = 0, host_end = 0, host_peak = 0;
  std::array<int64_t, kMemCategoryCount> category_at_peak{};  ///< device+host bytes per category at the peak
  bool unwound = false;  ///< closed while an exception was unwinding (the phase failed)
};

/// One edge (open or close) of a phase with the rank's bytes at that instant: the memory
/// timeline's samples. Delivered to edge sinks in time order.
struct PhaseEdge {
  int rank = 0;
  int64_t step = 0;
  int depth = 0;
  bool begin = true;                  ///< true when the phase opens
  const std::string* path = nullptr;  ///< valid during the sink call only
  double t_s = 0;                     ///< seconds since the recorder's epoch
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
  std::array<int64_t, kMemCategoryCount> category_bytes{};  ///< device+host bytes per category
};

/// Device work beside the phases, timed on their clock: an offload copy on a copy stream. The trace
/// draws each span on a track of its own under the rank, so copies show against compute.
struct DeviceSpan {
  int rank = 0;
  int64_t step = 0;
  std::string name;      ///< "d2h block.3"
  std::string category;  ///< "copy"
  std::string track;     ///< "offload d2h": one trace thread per track
  double t_begin_s = 0;  ///< seconds since the recorder's epoch
  double t_end_s = 0;
  int64_t bytes = 0;
};

/// Seconds on the process-wide telemetry clock (steady; zero at its first use). Recorders of all
/// ranks share it, so their records line up in one trace.
double telemetry_now_s();

/// Records the phases of one rank. The rank's thread binds it with PhaseRecorder::Bind; scopes on
/// that thread then record into it. Sinks receive each record as it finishes.
///
/// Paths join the open names with '/'. One exception: an outermost phase named "step" is a root
/// whose name is not prefixed, so { step { fwd { embed } } } records "step", "fwd" and
/// "fwd/embed" (docs/architecture.md's names). depth = the number of '/' in the path.
/// Each scope opens a peak window in the MemoryTracker (exact peaks, children included) and sets
/// the tracker's phase name for OOM messages. A recorder is used from its rank's thread only.
class PhaseRecorder {
 public:
  /// `rank`: the global rank its records carry; `slot`: its counters in this process's memory
  /// tracker (RankContext::slot; -1 = the rank itself, as for rank threads).
  explicit PhaseRecorder(int rank, int slot = -1);
  ~PhaseRecorder();
  PhaseRecorder(const PhaseRecorder&) = delete;
  PhaseRecorder& operator=(const PhaseRecorder&) = delete;
  PhaseRecorder(PhaseRecorder&&) noexcept = default;
  PhaseRecorder& operator=(PhaseRecorder&&) noexcept = default;
  int rank() const { return rank_; }

  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  /// Called for every finished phase (ring buffer, trace writer). Sinks run on the rank thread.
  void add_sink(std::function<void(const PhaseRecord&)> sink);

  /// Called at every phase edge, in time order, with the bytes at that instant (memory samples).
  void add_edge_sink(std::function<void(const PhaseEdge&)> sink);

  /// Records finished since the last take_records (the trainer takes them at each step end).
  std::vector<PhaseRecord> take_records();
  /// false: finished records go to the sinks only (long runs that never call take_records).
  void set_keep_records(bool keep) { keep_records_ = keep; }

  /// Times are seconds since `epoch_s` on telemetry_now_s()'s clock (default 0: the clock's own
  /// zero, shared by every recorder of the process).
  void set_epoch_s(double epoch_s) { epoch_s_ = epoch_s; }
  double epoch_s() const { return epoch_s_; }

  /// Open phases now.
  int open_depth() const { return static_cast<int>(stack_.size()); }

  /// Times phases on a device clock (a GPU rank; the timeline outlives the recorder's use of it;
  /// nullptr: the host clock, as on the CPU). With one, edges and records are held back until
  /// settle(), which gives them device times and only then hands them to the sinks and to
  /// take_records(); every phase is also a named range (NVTX).
  void set_device_timeline(DeviceTimeline* timeline) { device_ = timeline; }
  /// At the end of a step (after its work was synchronised): waits for the device's last mark,
  /// turns every held edge and record into device time (the host time of the step's first mark
  /// plus the device's elapsed time since it) and delivers them. Returns the device time from the
  /// step's first mark to its last; nullopt without a device timeline or marks.
  std::optional<double> settle();
  /// Drops held edges, records and spans, and restarts the device clock.
  void drop_held();
  /// A failed step (its device may be in error, so no device time is read): delivers the held
  /// edges and records with the host times taken at their edges, drops the held spans (timed on
  /// the device only), then as drop_held(). Phases that close later, as the error unwinds further,
  /// are held again: call it once more before take_records(). Never throws (out of host memory,
  /// what is left is dropped).
  void deliver_held_on_host_clock() noexcept;

  /// A timestamp in the order of another stream of the device (DeviceTimeline::mark_on: a copy
  /// stream), for a DeviceSpan's edges; -1 without a device timeline, before the step's first mark,
  /// or where the timeline has no other streams.
  int mark_stream(void* native_stream);
  /// A span between two mark_stream() marks (its rank and step are this recorder's): held, like
  /// the phases, and delivered with device times at settle(); dropped when a mark is -1.
  void add_device_span(DeviceSpan span, int mark_begin, int mark_end);
  /// A span timed on the host clock (t_begin_s/t_end_s as telemetry_now_s() gave them: the CPU's
  /// synchronous copies), delivered now.
  void add_host_span(DeviceSpan span);
  /// Called for every span (trace writer). Sinks run on the rank thread.
  void add_span_sink(std::function<void(const DeviceSpan&)> sink);
  /// Sink exceptions are caught (a phase edge must not throw from a destructor); the count and the
  /// first message are kept here.
  int64_t sink_errors() const { return sink_errors_; }
  const std::string& first_sink_error() const { return first_sink_error_; }

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
  int slot_;
  int64_t step_ = 0;
  std::vector<Open*> stack_;
  std::vector<PhaseRecord> finished_;
  std::vector<std::function<void(const PhaseRecord&)>> sinks_;
  std::string empty_;
  // --- extensions ---
  std::vector<std::function<void(const PhaseEdge&)>> edge_sinks_;
  bool keep_records_ = true;
  double epoch_s_ = 0;
  int64_t sink_errors_ = 0;
  std::string first_sink_error_;
  // --- device timing: edges and records held until settle() ---
  struct HeldEdge {
    PhaseEdge edge;
    std::string path;
    int mark = 0;
  };
  struct HeldRecord {
    PhaseRecord record;
    int mark_begin = 0, mark_end = 0;
  };
  DeviceTimeline* device_ = nullptr;
  struct HeldSpan {
    DeviceSpan span;
    int mark_begin = 0, mark_end = 0;
  };
  std::vector<HeldEdge> held_edges_;
  std::vector<HeldRecord> held_records_;
  std::vector<HeldSpan> held_spans_;
  std::vector<std::function<void(const DeviceSpan&)>> span_sinks_;
  int last_mark_ = -1;  ///< the step's last phase-edge mark (compute stream); -1: none yet
  double host_at_first_mark_ = 0;
  int mark_now();
  void emit_edge(const Open& open, bool begin, double t_s, int mark);
  void deliver_edge(const PhaseEdge& edge);
  void deliver_record(PhaseRecord&& r);
  void deliver_span(const DeviceSpan& span);
  void note_sink_error(const char* what);
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
