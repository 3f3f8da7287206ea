// The planner's liveness walk: one training step of rank 0 replayed as tensor allocations and
// frees in the engine's order (docs/architecture.md), giving the device peak, the phase it falls
// in, per-phase peaks by category and the host pool. Internal to engine/planner.
// defines: PhaseKind, PhaseCode, PhasePeak, LiveEntry, LiveSet, walk_step, phase_name
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/planner/plan_shapes.h"
#include "engine/planner/planner.h"

namespace odyssey::planner_detail {

/// The phases of docs/architecture.md, in step order.
enum class PhaseKind : uint8_t {
  FwdEmbed,
  FwdAttn,
  FwdMlp,
  FwdLoss,
  BwdLoss,
  BwdRecompute,
  BwdMlp,
  BwdAttn,
  BwdReduceScatter,
  BwdEmbed,
  Optimizer,
  None,
};

struct PhaseCode {
  PhaseKind kind = PhaseKind::None;
  int32_t block = -1;  ///< block index for per-block phases
};

/// "fwd/block.3/attn", "bwd/loss", "optimizer", ...
std::string phase_name(PhaseCode code);

using CategoryBytes = std::array<int64_t, kPlanCategoryCount>;

/// One phase's record: the device peak inside it and the bytes by category at that moment.
struct PhasePeak {
  PhaseCode code;
  int64_t device_begin = 0;
  int64_t device_peak = 0;
  int64_t host_at_peak = 0;
  CategoryBytes categories{};  ///< device + host bytes per category at the phase's peak
};

/// One live tensor (or `count` identical tensors) of the walk.
struct LiveEntry {
  const char* name = "";
  int64_t bytes = 0;  ///< of all `count` tensors together
  int32_t count = 1;
  TensorKind kind = TensorKind::Hidden;
  PlanCategory category = PlanCategory::Other;
  bool host = false;
  bool live = false;
};

/// The allocation ledger the walk writes into: totals by category and pool, the global and
/// per-phase peaks, and optional snapshots of the live set at given events.
class LiveSet {
 public:
  /// record_phases: keep a PhasePeak per phase (plan_memory); off for the solver's fast path.
  explicit LiveSet(bool record_phases);

  /// Copies the live set the first time the device total reaches `device_bytes` inside phase
  /// `phase` (device_snapshot), and the first time the host total reaches `host_bytes`
  /// (host_snapshot). A second walk with the first walk's peaks gives the live set at each peak.
  void snapshot_at(PhaseCode phase, int64_t device_bytes, int64_t host_bytes);
  bool device_snapshot_taken() const { return device_snapshot_taken_; }

  /// The live entries now but `except` and `except_too` (handles; -1: none): the walk's collapse
  /// compares them around one block.
  std::vector<LiveEntry> live_entries(int except = -1, int except_too = -1) const;

  int alloc(const char* name, TensorKind kind, PlanCategory category, int64_t bytes, int32_t count = 1,
            bool host = false);
  void free(int handle);
  /// Moves a live tensor to another category (the engine's retag_since); `name` renames it.
  void retag(int handle, PlanCategory category, const char* name = nullptr);
  /// Frees `bytes` of an aggregated entry (one of its `count` tensors); true when that was the
  /// last of them and the entry is gone.
  bool shrink(int handle, int64_t bytes);
  void begin_phase(PhaseKind kind, int32_t block = -1);
  void end_phase();

  int64_t device() const { return device_; }
  int64_t host() const { return host_; }
  /// Allocations and frees so far: how much walking a walk took (a collapsed one, far fewer).
  int64_t events() const { return event_; }
  const CategoryBytes& categories() const { return categories_; }

  // results
  int64_t device_peak = 0;
  PhaseCode device_peak_phase;
  int64_t host_peak = 0;
  std::vector<PhasePeak> phases;
  std::vector<LiveEntry> device_snapshot;  ///< live set at the device snapshot target
  std::vector<LiveEntry> host_snapshot;    ///< live set at the host snapshot target

 private:
  /// The peaks and snapshots after an allocation that left the totals at `device` and `host`.
  void after_change(int64_t device, int64_t host);
  /// Takes `bytes` of live entry `e` off its pool's total and its category's.
  void take_off(const LiveEntry& e, int64_t bytes);
  bool record_phases_;
  bool snapshots_ = false, device_snapshot_taken_ = false, host_snapshot_taken_ = false;
  PhaseCode snapshot_phase_;
  int64_t snapshot_device_ = -1, snapshot_host_ = -1;
  std::vector<LiveEntry> entries_;
  std::vector<int> free_slots_;
  int64_t device_ = 0, host_ = 0, event_ = 0;
  CategoryBytes categories_{};
  bool in_phase_ = false;
  PhasePeak current_;
};

/// Replays one training step of rank 0 for `shapes` into `live`. With `collapse`, the blocks
/// inside each run of alike blocks (all of 1..L-2, or, with kept attention in the top blocks only,
/// the recomputing ones and the keeping ones) are not walked one by one: each leaves the same
/// residue and has the same transient, so their residue is added in one entry and the run's walked
/// last block carries their largest peak. The device and host peaks are exactly those of the full
/// walk (tested); phases need the full walk.
void walk_step(const PlanShapes& shapes, LiveSet& live, bool collapse = false);

}  // namespace odyssey::planner_detail
