// The allocation ledger of the planner's liveness walk: device/host totals by category, the
// global and per-phase peaks, and snapshots of the live set at chosen events.
#include "engine/planner/step_walk.h"

#include <stdexcept>

namespace odyssey::planner_detail {

namespace {

/// `total` less `bytes`, except that a total saturated at the planner's ceiling stays there: the
/// bytes it stands for are unknown, and taking a real size off the ceiling would show a plan
/// beyond range with smaller, even negative, figures after its first free.
int64_t sat_sub(int64_t total, int64_t bytes) { return total >= kPlanBytesLimit ? total : total - bytes; }

}  // namespace

std::string phase_name(PhaseCode code) {
  const std::string block = "block." + std::to_string(code.block);
  switch (code.kind) {
    case PhaseKind::FwdEmbed:
      return "fwd/embed";
    case PhaseKind::FwdAttn:
      return "fwd/" + block + "/attn";
    case PhaseKind::FwdMlp:
      return "fwd/" + block + "/mlp";
    case PhaseKind::FwdLoss:
      return "fwd/loss";
    case PhaseKind::BwdLoss:
      return "bwd/loss";
    case PhaseKind::BwdRecompute:
      return "bwd/" + block + "/recompute";
    case PhaseKind::BwdMlp:
      return "bwd/" + block + "/mlp";
    case PhaseKind::BwdAttn:
      return "bwd/" + block + "/attn";
    case PhaseKind::BwdReduceScatter:
      return "bwd/" + block + "/reduce_scatter";
    case PhaseKind::BwdEmbed:
      return "bwd/embed";
    case PhaseKind::Optimizer:
      return "optimizer";
    case PhaseKind::None:
      break;
  }
  return "step";
}

LiveSet::LiveSet(bool record_phases) : record_phases_(record_phases) {
  entries_.reserve(256);
  free_slots_.reserve(64);
}

void LiveSet::snapshot_at(PhaseCode phase, int64_t device_bytes, int64_t host_bytes) {
  snapshots_ = true;
  snapshot_phase_ = phase;
  snapshot_device_ = device_bytes;
  snapshot_host_ = host_bytes;
}

std::vector<LiveEntry> LiveSet::live_entries(int except, int except_too) const {
  std::vector<LiveEntry> live;
  live.reserve(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].live && static_cast<int>(i) != except && static_cast<int>(i) != except_too)
      live.push_back(entries_[i]);
  return live;
}

int LiveSet::alloc(const char* name, TensorKind kind, PlanCategory category, int64_t bytes, int32_t count, bool host) {
  int handle;
  if (!free_slots_.empty()) {
    handle = free_slots_.back();
    free_slots_.pop_back();
  } else {
    handle = static_cast<int>(entries_.size());
    entries_.emplace_back();
  }
  // written field by field in place: the walk's hottest line (a whole-entry copy from the stack
  // stalls on its own byte-sized stores)
  LiveEntry& e = entries_[handle];
  e.name = name;
  e.bytes = sat_mul(bytes, count);
  e.count = count;
  e.kind = kind;
  e.category = category;
  e.host = host;
  e.live = true;
  const int64_t device_total = host ? device_ : sat_add(device_, e.bytes);
  const int64_t host_total = host ? sat_add(host_, e.bytes) : host_;
  device_ = device_total;
  host_ = host_total;
  categories_[static_cast<int>(category)] = sat_add(categories_[static_cast<int>(category)], e.bytes);
  after_change(device_total, host_total);
  return handle;
}

void LiveSet::free(int handle) {
  if (handle < 0) return;
  if (handle >= static_cast<int>(entries_.size()) || !entries_[handle].live)
    throw std::logic_error("planner walk: free of a tensor that is not live (handle " + std::to_string(handle) + ")");
  LiveEntry& e = entries_[handle];
  take_off(e, e.bytes);
  e.live = false;
  free_slots_.push_back(handle);
  ++event_;
}

void LiveSet::take_off(const LiveEntry& e, int64_t bytes) {
  int64_t& pool = e.host ? host_ : device_;
  pool = sat_sub(pool, bytes);
  int64_t& category = categories_[static_cast<int>(e.category)];
  category = sat_sub(category, bytes);
}

void LiveSet::retag(int handle, PlanCategory category, const char* name) {
  if (handle < 0) return;
  LiveEntry& e = entries_.at(handle);
  if (!e.live) throw std::logic_error("planner walk: retag of a tensor that is not live");
  if (name) e.name = name;
  int64_t& from = categories_[static_cast<int>(e.category)];
  from = sat_sub(from, e.bytes);
  e.category = category;
  categories_[static_cast<int>(category)] = sat_add(categories_[static_cast<int>(category)], e.bytes);
}

bool LiveSet::shrink(int handle, int64_t bytes) {
  if (handle < 0) return false;
  LiveEntry& e = entries_.at(handle);
  if (!e.live || e.bytes < bytes || e.count < 1)
    throw std::logic_error("planner walk: shrink beyond an entry's bytes (handle " + std::to_string(handle) + ")");
  if (e.count == 1 || e.bytes == bytes) {
    free(handle);
    return true;
  }
  take_off(e, bytes);
  e.bytes -= bytes;
  e.count -= 1;
  ++event_;
  return false;
}

void LiveSet::after_change(int64_t device, int64_t host) {
  // the totals come in registers: reloading them just after storing them stalls the walk
  if (in_phase_ && device > current_.device_peak) {
    current_.device_peak = device;
    current_.host_at_peak = host;
    if (record_phases_) current_.categories = categories_;
  }
  if (device > device_peak) {
    device_peak = device;
    device_peak_phase = in_phase_ ? current_.code : PhaseCode{};
  }
  if (host > host_peak) host_peak = host;
  if (snapshots_) {
    if (!device_snapshot_taken_ && device == snapshot_device_ && in_phase_ &&
        current_.code.kind == snapshot_phase_.kind && current_.code.block == snapshot_phase_.block) {
      device_snapshot = live_entries();
      device_snapshot_taken_ = true;
    }
    if (!host_snapshot_taken_ && host == snapshot_host_) {
      host_snapshot = live_entries();
      host_snapshot_taken_ = true;
    }
  }
  ++event_;
}

void LiveSet::begin_phase(PhaseKind kind, int32_t block) {
  if (in_phase_) end_phase();
  in_phase_ = true;
  current_ = PhasePeak{};
  current_.code = PhaseCode{kind, block};
  current_.device_begin = device_;
  current_.device_peak = device_;
  current_.host_at_peak = host_;
  if (record_phases_) current_.categories = categories_;
}

void LiveSet::end_phase() {
  if (!in_phase_) return;
  in_phase_ = false;
  if (record_phases_) phases.push_back(current_);
}

}  // namespace odyssey::planner_detail
