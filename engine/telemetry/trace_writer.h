// The Perfetto / Chrome JSON trace: one process per rank, phases as complete ("X") events, memory
// as counter ("C") events at every phase edge (device, host and every category), an instant ("i")
// at each step's peak, offload copies on tracks of their own. Streams to disk; the file is valid
// JSON after every flush, a killed run's too. No LibTorch.
// defines: TraceWriter
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>
#include <set>
#include <string>
#include <vector>

#include "engine/telemetry/samples.h"
#include "engine/telemetry/phase.h"

namespace odyssey {

/// Usage: TraceWriter trace(dir + "/trace.json"); trace.attach(recorder);  // per rank
///        ... trace.on_step(metrics);  // per step;  trace.close();  // or the destructor
/// Thread-safe: rank threads write concurrently. Events are buffered up to kFlushBytes (or the
/// next flush()) and then written out with the closing lines after them, so a long run never holds
/// its trace in memory and a run killed without unwinding leaves a document Perfetto opens, with
/// every event of its last flush. Write errors never throw from a
/// sink: the first one is kept (error()) and later events are dropped. The file opens in
/// ui.perfetto.dev and chrome://tracing.
class TraceWriter {
 public:
  static constexpr size_t kFlushBytes = size_t(1) << 20;

  /// Creates (truncates) `path`; throws std::runtime_error naming it when it cannot.
  explicit TraceWriter(const std::string& path);
  /// Continues the trace of a resumed run in its own directory: keeps the old file's events up
  /// to the end of step `keep_through_step` (a killed run's later steps are run again; a line
  /// torn by the kill is dropped) and shifts this process's times to follow them, so the file
  /// reads as one run and no step appears twice. A missing old file starts afresh, as does a link
  /// to a device (/dev/null). The kept events, closed, replace the old file
  /// (where a link leads) atomically before anything is written after them: a
  /// kill or a full disk afterwards loses none of them, and a process that ends before its first
  /// flush leaves them as valid JSON (throws std::runtime_error naming the file, the old one left).
  TraceWriter(const std::string& path, int64_t keep_through_step);
  /// Closes the file (valid JSON), also while an exception unwinds. Never throws.
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  /// Installs this writer's sinks on a rank's recorder (the writer must outlive it).
  void attach(PhaseRecorder& recorder);
  /// A finished phase: an "X" event on the rank's process; tracked for the step's peak instant.
  void on_record(const PhaseRecord& record);
  /// A phase edge: "C" events "memory" {device_bytes, host_bytes} and "categories" {all}.
  void on_edge(const PhaseEdge& edge);
  /// End of a step (all ranks): each rank's peak instant for that step, and a "step" counter
  /// {loss, tokens_per_s, step_time_s} on the lowest rank's process at the latest time seen.
  void on_step(const StepMetrics& metrics);

  /// Device work beside the phases (an offload copy): an "X" event of the span's category on a
  /// thread of the rank's process named after its track.
  void on_device_span(const DeviceSpan& span);

  /// The studio's ring-buffer forms (Session::export_trace): spans and samples carry no
  /// category breakdown, so only the "memory" counter is written for them.
  void on_span(const PhaseSpan& span, const std::string& path);
  void on_sample(const MemorySample& sample);

  /// A list of words under the trace's otherData (Perfetto's trace metadata), written at close:
  /// "attention_kernels": the kernels the run's attention ran. A key set twice keeps the last.
  void set_other_data(const std::string& key, const std::vector<std::string>& words);

  /// Writes the buffered events to the file now (a checkpoint's steps then survive a kill: a
  /// resume keeps them). A failure is kept as error(), as the sinks' are. Never throws.
  void flush();
  /// Writes the pending peak instants and the closing brackets. Idempotent; throws
  /// std::runtime_error when the file could not be completed.
  void close();
  bool closed() const;
  const std::string& path() const { return path_; }
  /// Events written so far (metadata included; a resumed trace's kept events counted).
  int64_t events() const;
  /// A resumed trace: the old file's lines not kept (events of later steps, which run again, and
  /// lines cut or unreadable). 0 for a fresh trace.
  int64_t dropped() const { return dropped_; }
  /// The first write error ("" when none).
  std::string error() const;

 private:
  struct PeakCandidate {
    bool valid = false;
    int64_t step = 0;
    int64_t device_peak = 0;
    int depth = -1;
    double t_s = 0;
    std::string path;
  };
  /// Creates (truncates) path_ and writes the empty trace, closed (both constructors).
  void open_fresh();
  void emit_locked(const std::string& event);
  void ensure_rank_locked(int rank);
  void emit_peak_locked(int rank, PeakCandidate& candidate);
  void write_pending_locked();
  /// A write failed (a full disk): the closing lines written again right after the last whole
  /// flush's events, straight to the descriptor (the stream's buffer, which may hold part of the
  /// failed write, dropped), and the file cut there: it stays the document that flush left, the
  /// events since lost. Once; best effort (a failure here leaves the file as it is).
  void restore_closing_locked();
  /// The pending events, then (a regular file) the closing lines, the position left before them.
  void flush_locked();
  void close_locked();
  /// The lines after the last event: the events' array closed, the display unit, otherData.
  std::string closing_locked() const;

  std::string path_;
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::string>> other_data_;  ///< set_other_data's lists
  std::FILE* file_ = nullptr;
  std::string pending_;
  bool first_event_ = true;
  int64_t events_ = 0;
  double last_t_s_ = 0;
  double offset_s_ = 0;  ///< added to every time written (after the kept events of a resume)
  std::set<int> ranks_;
  std::map<std::pair<int, std::string>, int> tracks_;  ///< (rank, track) -> tid (1, 2, ...)
  std::map<int, PeakCandidate> peaks_;
  std::string error_;
  /// A regular file: every flush leaves the closing lines after the events, so the file on disk
  /// is a whole document between flushes (false for a device or a pipe: written at close only).
  bool closes_on_disk_ = false;
  int64_t dropped_ = 0;          ///< set by the resume constructor only (read without the lock)
  std::string closing_on_disk_;  ///< the closing lines last written after the events
  long closed_at_ = -1;          ///< where the closing lines on disk begin (the last whole flush's events end)
  bool restored_ = false;        ///< restore_closing_locked ran
};

}  // namespace odyssey
