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

/// Calls every sink with `value`; a sink's exception goes to `on_error` and the others still run
/// (a phase edge must not throw from a destructor).
template <typename T, typename OnError>
void call_sinks(const std::vector<std::function<void(const T&)>>& sinks, const T& value, OnError on_error) {
  for (const auto& sink : sinks) {
    try {
      sink(value);
    } catch (const std::exception& e) {
      on_error(e.what());
    } catch (...) {
      on_error("unknown exception");
    }
  }
}
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
  int window = 0;    // the tracker's peak window
  int uncaught = 0;  // std::uncaught_exceptions() at open
  double t_begin_s = 0;
  int64_t device_begin = 0;
  int64_t host_begin = 0;
  int mark_begin = -1;  // the device timeline's mark at open
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

void PhaseRecorder::add_sink(std::function<void(const PhaseRecord&)> sink) { sinks_.push_back(std::move(sink)); }

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

const std::string& PhaseRecorder::current_path() const { return stack_.empty() ? empty_ : stack_.back()->path; }

void PhaseRecorder::note_sink_error(const char* what) {
  if (sink_errors_++ == 0) first_sink_error_ = what;
}

int PhaseRecorder::mark_now() {
  if (device_ == nullptr) return -1;
  if (last_mark_ < 0) host_at_first_mark_ = telemetry_now_s() - epoch_s_;
  last_mark_ = device_->mark();
  return last_mark_;
}

int PhaseRecorder::mark_stream(void* native_stream) {
  if (device_ == nullptr || last_mark_ < 0) return -1;  // no step clock yet: mark 0 is a phase edge
  return device_->mark_on(native_stream);
}

void PhaseRecorder::add_device_span(DeviceSpan span, int mark_begin, int mark_end) {
  if (device_ == nullptr || mark_begin < 0 || mark_end < 0) return;
  span.rank = rank_;
  span.step = step_;
  held_spans_.push_back({std::move(span), mark_begin, mark_end});
}

void PhaseRecorder::add_host_span(DeviceSpan span) {
  span.rank = rank_;
  span.step = step_;
  span.t_begin_s -= epoch_s_;
  span.t_end_s -= epoch_s_;
  deliver_span(span);
}

void PhaseRecorder::add_span_sink(std::function<void(const DeviceSpan&)> sink) {
  span_sinks_.push_back(std::move(sink));
}

void PhaseRecorder::deliver_span(const DeviceSpan& span) {
  call_sinks(span_sinks_, span, [this](const char* what) { note_sink_error(what); });
}

void PhaseRecorder::deliver_edge(const PhaseEdge& edge) {
  call_sinks(edge_sinks_, edge, [this](const char* what) { note_sink_error(what); });
}

void PhaseRecorder::deliver_record(PhaseRecord&& r) {
  call_sinks(sinks_, r, [this](const char* what) { note_sink_error(what); });
  if (keep_records_) finished_.push_back(std::move(r));
}

std::optional<double> PhaseRecorder::settle() {
  if (device_ == nullptr || last_mark_ < 0) return std::nullopt;
  device_->settle();
  auto at = [&](int mark) { return host_at_first_mark_ + device_->since_first(mark); };
  for (HeldEdge& h : held_edges_) {
    h.edge.t_s = at(h.mark);
    h.edge.path = &h.path;
    deliver_edge(h.edge);
  }
  for (HeldRecord& h : held_records_) {
    h.record.t_begin_s = at(h.mark_begin);
    h.record.t_end_s = at(h.mark_end);
    deliver_record(std::move(h.record));
  }
  for (HeldSpan& h : held_spans_) {
    h.span.t_begin_s = at(h.mark_begin);
    h.span.t_end_s = at(h.mark_end);
    deliver_span(h.span);
  }
  const double span = device_->since_first(last_mark_);
  drop_held();
  return span;
}

void PhaseRecorder::deliver_held_on_host_clock() noexcept {
  try {
    for (HeldEdge& h : held_edges_) {
      h.edge.path = &h.path;  // t_s: the host time emit_edge took
      deliver_edge(h.edge);
    }
    for (HeldRecord& h : held_records_) deliver_record(std::move(h.record));  // pop()'s host times
  } catch (const std::exception&) {  // out of host memory keeping a record: the step's own failure is reported
  }
  drop_held();
}

void PhaseRecorder::drop_held() {
  held_edges_.clear();
  held_records_.clear();
  held_spans_.clear();
  last_mark_ = -1;
  if (device_ != nullptr) device_->restart();
}

void PhaseRecorder::emit_edge(const Open& open, bool begin, double t_s, int mark) {
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
  if (device_ != nullptr) {  // held until settle() knows the device time
    held_edges_.push_back({edge, open.path, mark});
    held_edges_.back().edge.path = nullptr;
    return;
  }
  deliver_edge(edge);
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
  open->mark_begin = mark_now();
  if (device_ != nullptr) device_->range_push(open->path);
  stack_.push_back(open);
  tracker.set_phase_name(slot_, open->path);
  emit_edge(*open, /*begin=*/true, open->t_begin_s, open->mark_begin);
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
  const int mark_end = mark_now();
  if (device_ != nullptr) device_->range_pop();
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
  emit_edge(*open, /*begin=*/false, r.t_end_s, mark_end);
  r.path = std::move(open->path);
  const int mark_begin = open->mark_begin;
  delete open;
  if (device_ != nullptr) {
    held_records_.push_back({std::move(r), mark_begin, mark_end});
    return;
  }
  deliver_record(std::move(r));
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
