// The allocation ledger of the planner's liveness walk: device/host totals by category, the
// global and per-phase peaks, and snapshots of the live set at chosen events.
#include "engine/planner/step_walk.h"

#include <stdexcept>

namespace odyssey::planner_detail {

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
  LiveEntry e;
  e.name = name;
  e.bytes = sat_mul(bytes, count);
  e.count = count;
  e.kind = kind;
  e.category = category;
  e.host = host;
  e.live = true;
  int handle;
  if (!free_slots_.empty()) {
    handle = free_slots_.back();
    free_slots_.pop_back();
    entries_[handle] = e;
  } else {
    handle = static_cast<int>(entries_.size());
    entries_.push_back(e);
  }
  int64_t& pool = host ? host_ : device_;
  pool = sat_add(pool, e.bytes);
  categories_[static_cast<int>(category)] = sat_add(categories_[static_cast<int>(category)], e.bytes);
  after_change();
  return handle;
}

void LiveSet::free(int handle) {
  if (handle < 0) return;
  if (handle >= static_cast<int>(entries_.size()) || !entries_[handle].live)
    throw std::logic_error("planner walk: free of a tensor that is not live (handle " + std::to_string(handle) + ")");
  LiveEntry& e = entries_[handle];
  (e.host ? host_ : device_) -= e.bytes;
  categories_[static_cast<int>(e.category)] -= e.bytes;
  e.live = false;
  free_slots_.push_back(handle);
  ++event_;
}

void LiveSet::retag(int handle, PlanCategory category, const char* name) {
  if (handle < 0) return;
  LiveEntry& e = entries_.at(handle);
  if (!e.live) throw std::logic_error("planner walk: retag of a tensor that is not live");
  if (name) e.name = name;
  categories_[static_cast<int>(e.category)] -= e.bytes;
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
  (e.host ? host_ : device_) -= bytes;
  categories_[static_cast<int>(e.category)] -= bytes;
  e.bytes -= bytes;
  e.count -= 1;
  ++event_;
  return false;
}

void LiveSet::after_change() {
  if (in_phase_ && device_ > current_.device_peak) {
    current_.device_peak = device_;
    current_.host_at_peak = host_;
    if (record_phases_) current_.categories = categories_;
  }
  if (device_ > device_peak) {
    device_peak = device_;
    device_peak_phase = in_phase_ ? current_.code : PhaseCode{};
  }
  if (host_ > host_peak) host_peak = host_;
  if (snapshots_) {
    if (!device_snapshot_taken_ && device_ == snapshot_device_ && in_phase_ &&
        current_.code.kind == snapshot_phase_.kind && current_.code.block == snapshot_phase_.block) {
      device_snapshot = live_entries();
      device_snapshot_taken_ = true;
    }
    if (!host_snapshot_taken_ && host_ == snapshot_host_) {
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
