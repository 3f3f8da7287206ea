// Every rank's phase records and memory edges of one step, brought to rank 0: serialised, then
// all-gathered over ctx.world as bytes, so the process that writes trace.json, metrics.jsonl and
// summary.json sees all ranks also when they run in other processes (torchrun).
// defines: EdgeRecord, RankStepRecords, EdgeBuffer, gather_step_records
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "engine/parallel/comm.h"
#include "engine/telemetry/phase.h"

namespace odyssey {

/// A PhaseEdge that owns its path (PhaseEdge::path is valid during the sink call only).
struct EdgeRecord {
  PhaseEdge edge;
  std::string path;
  /// The edge with `path` pointing into this record (valid while the record lives).
  const PhaseEdge& view();
};

/// One rank's step: its finished phases and, while the step is traced, its phase edges and its
/// device spans (offload copies).
struct RankStepRecords {
  std::vector<PhaseRecord> records;
  std::vector<EdgeRecord> edges;
  std::vector<DeviceSpan> spans;
};

/// Collects a rank's phase edges and device spans while `capture` is on (sinks on its recorder).
class EdgeBuffer {
 public:
  /// Installs the sinks; the buffer must outlive the recorder's use.
  void attach(PhaseRecorder& recorder);
  void set_capture(bool on) { capture_ = on; }
  std::vector<EdgeRecord> take();
  std::vector<DeviceSpan> take_spans();

 private:
  bool capture_ = false;
  std::vector<EdgeRecord> edges_;
  std::vector<DeviceSpan> spans_;
};

/// Collective over ctx.world: every rank calls it after each step with its own records. Rank 0
/// returns every rank's, in rank order; the other ranks return an empty vector. A group of one
/// (or rank emulation: the other ranks do not exist) returns `mine` alone, without communication.
/// Two all-gathers: the byte counts, then the bytes (padded to the longest).
std::vector<RankStepRecords> gather_step_records(const RankContext& ctx, RankStepRecords mine);

/// The byte form (tests): serialise, and read back (throws std::runtime_error when malformed).
std::string serialize_step_records(const RankStepRecords& records);
RankStepRecords deserialize_step_records(const std::string& bytes);

}  // namespace odyssey
