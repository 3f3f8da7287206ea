// Phase scopes and the per-rank recorder: paths, wall times, bytes at both edges and the exact
// peak inside each phase (a MemoryTracker peak window per open phase). defines: the members of
// PhaseRecorder and PhaseScope, telemetry_now_s
#include "engine/telemetry/phase.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>

namespace odyssey {

namespace {
thread_local PhaseRecorder* t_recorder = nullptr;
constexpr std::string_view kRootStepName = "step";
}  // namespace

double telemetry_now_s() {
  using Clock = std::chrono::steady_clock;
  static const Clock::time_point zero = Clock::now();
  return std::chrono::duration<double>(Clock::now() - zero).count();
}

/// One open phase.
struct PhaseRecorder::Open {
  std::string path;
  bool root_step = false;  // an outermost "step": not prefixed to its children's paths
  int depth = 0;
  int window = 0;          // the tracker's peak window
  int uncaught = 0;        // std::uncaught_exceptions() at open
  double t_begin_s = 0;
  int64_t device_begin = 0;
  int64_t host_begin = 0;
};

PhaseRecorder::PhaseRecorder(int rank, int slot) : rank_(rank), slot_(slot < 0 ? rank : slot) {
  if (slot_ < 0 || slot_ >= kMaxTrackedRanks)
    throw std::out_of_range("PhaseRecorder: tracker slot " + std::to_string(slot_) + " outside [0, " +
                            std::to_string(kMaxTrackedRanks) + ")");
}

PhaseRecorder::~PhaseRecorder() {
  // A recorder destroyed with open phases (a bug upstream) still closes its tracker windows so
  // the rank's later windows stay balanced.
  MemoryTracker& tracker = MemoryTracker::instance();
  while (!stack_.empty()) {
    Open* open = stack_.back();
    stack_.pop_back();
    try {
      tracker.close_peak_window(slot_, open->window);
    } catch (...) {
    }
    delete open;
  }
  if (t_recorder == this) t_recorder = nullptr;
}

void PhaseRecorder::add_sink(std::function<void(const PhaseRecord&)> sink) {
  sinks_.push_back(std::move(sink));
}

void PhaseRecorder::add_edge_sink(std::function<void(const PhaseEdge&)> sink) {
  edge_sinks_.push_back(std::move(sink));
}

std::vector<PhaseRecord> PhaseRecorder::take_records() {
  std::vector<PhaseRecord> out;
  out.swap(finished_);
  return out;
}

PhaseRecorder::Bind::Bind(PhaseRecorder* recorder) : previous_(t_recorder) { t_recorder = recorder; }
PhaseRecorder::Bind::~Bind() { t_recorder = previous_; }
PhaseRecorder* PhaseRecorder::current() { return t_recorder; }

const std::string& PhaseRecorder::current_path() const {
  return stack_.empty() ? empty_ : stack_.back()->path;
}

void PhaseRecorder::note_sink_error(const char* what) {
  if (sink_errors_++ == 0) first_sink_error_ = what;
}

void PhaseRecorder::emit_edge(const Open& open, bool begin, double t_s) {
  if (edge_sinks_.empty()) return;
  PhaseEdge edge;
  edge.rank = rank_;
  edge.step = step_;
  edge.depth = open.depth;
  edge.begin = begin;
  edge.path = &open.path;
  edge.t_s = t_s;
  const MemorySnapshot s = MemoryTracker::instance().snapshot(slot_);
  edge.device_bytes = s.device_bytes;
  edge.host_bytes = s.host_bytes;
  edge.category_bytes = s.category_bytes;
  for (auto& sink : edge_sinks_) {
    try {
      sink(edge);
    } catch (const std::exception& e) {
      note_sink_error(e.what());
    } catch (...) {
      note_sink_error("unknown exception");
    }
  }
}

void PhaseRecorder::push(std::string_view name) {
  MemoryTracker& tracker = MemoryTracker::instance();
  auto* open = new Open();
  try {
    if (stack_.empty()) {
      open->path = std::string(name);
      open->root_step = name == kRootStepName;
    } else if (stack_.back()->root_step && stack_.size() == 1) {
      open->path = std::string(name);
    } else {
      open->path.reserve(stack_.back()->path.size() + 1 + name.size());
      open->path.append(stack_.back()->path).append("/").append(name);
    }
    open->depth = static_cast<int>(std::count(open->path.begin(), open->path.end(), '/'));
    open->uncaught = std::uncaught_exceptions();
    open->window = tracker.open_peak_window(slot_);
  } catch (...) {
    delete open;
    throw;
  }
  open->device_begin = tracker.device_bytes(slot_);
  open->host_begin = tracker.host_bytes(slot_);
  open->t_begin_s = telemetry_now_s() - epoch_s_;
  stack_.push_back(open);
  tracker.set_phase_name(slot_, open->path);
  emit_edge(*open, /*begin=*/true, open->t_begin_s);
}

void PhaseRecorder::pop() {
  if (stack_.empty())
    throw std::logic_error("PhaseRecorder::pop: rank " + std::to_string(rank_) + " has no open phase");
  MemoryTracker& tracker = MemoryTracker::instance();
  Open* open = stack_.back();
  stack_.pop_back();
  PhaseRecord r;
  try {
    const PeakWindow window = tracker.close_peak_window(slot_, open->window);
    r.device_peak = window.device_peak;
    r.host_peak = window.host_peak;
    r.category_at_peak = window.category_at_peak;
  } catch (...) {
    delete open;
    throw;
  }
  r.t_end_s = telemetry_now_s() - epoch_s_;
  r.device_end = tracker.device_bytes(slot_);
  r.host_end = tracker.host_bytes(slot_);
  r.rank = rank_;
  r.step = step_;
  r.depth = open->depth;
  r.t_begin_s = open->t_begin_s;
  r.device_begin = open->device_begin;
  r.host_begin = open->host_begin;
  r.unwound = std::uncaught_exceptions() > open->uncaught;
  tracker.set_phase_name(slot_, current_path());
  emit_edge(*open, /*begin=*/false, r.t_end_s);
  r.path = std::move(open->path);
  delete open;
  for (auto& sink : sinks_) {
    try {
      sink(r);
    } catch (const std::exception& e) {
      note_sink_error(e.what());
    } catch (...) {
      note_sink_error("unknown exception");
    }
  }
  if (keep_records_) finished_.push_back(std::move(r));
}

PhaseScope::PhaseScope(std::string_view name) : recorder_(PhaseRecorder::current()) {
  if (recorder_ != nullptr) recorder_->push(name);
}

PhaseScope::~PhaseScope() {
  if (recorder_ == nullptr) return;
  try {
    recorder_->pop();
  } catch (...) {
    // Only a broken nesting (a window closed out of order) lands here; a destructor must not
    // throw, and the tracker's window stack was already checked by close_peak_window.
  }
}

}  // namespace odyssey
