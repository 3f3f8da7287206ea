// The Perfetto / Chrome JSON trace writer: event formatting (timestamps in microseconds from
// integer nanoseconds, so nested events stay nested), per-rank process metadata, step peak
// instants, buffered streaming and a close that always leaves valid JSON. defines: TraceWriter
#include "engine/telemetry/trace_writer.h"

#include <stdio_ext.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/telemetry/phase_peaks.h"
#include "engine/util/files.h"
#include "engine/util/json.h"
#include "engine/util/json_read.h"

namespace odyssey {

namespace {

int64_t to_ns(double t_s) { return std::llround(t_s * 1e9); }

/// An event of an earlier trace that the resume may keep: every field it reads has its type (a
/// hand-edited or corrupt line with "step": "3" is dropped, not a type error that ends the run).
bool well_formed_event(const Json& e) {
  if (!e.is_object() || !e.contains("ph") || !e.at("ph").is_string()) return false;
  if (e.contains("args")) {
    const Json& args = e.at("args");
    if (!args.is_object()) return false;
    if (args.contains("step") && !args.at("step").is_number_integer()) return false;
    if (args.contains("name") && !args.at("name").is_string()) return false;
  }
  for (const char* key : {"ts", "dur"})
    if (e.contains(key) && !e.at(key).is_number()) return false;
  for (const char* key : {"pid", "tid"})
    if (e.contains(key) && !e.at(key).is_number_integer()) return false;
  return !e.contains("name") || e.at("name").is_string();
}

/// Microseconds with three decimals, printed from integer nanoseconds: exact, so that a child's
/// ts + dur never rounds past its parent's.
std::string us_text(int64_t ns) {
  const bool negative = ns < 0;
  const int64_t a = negative ? -ns : ns;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%lld.%03lld", negative ? "-" : "", static_cast<long long>(a / 1000),
                static_cast<long long>(a % 1000));
  return buf;
}

std::string leaf_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// Opens one event object: ph, pid, tid, ts (and the name). tid 0: the rank's phases.
void begin_event(JsonWriter& w, const char* ph, std::string_view name, int pid, double t_s, int tid = 0) {
  w.begin_object();
  w.key("name").value(name);
  w.key("ph").value(ph);
  w.key("pid").value(pid);
  w.key("tid").value(tid);
  w.key("ts").raw(us_text(to_ns(t_s)));
}

/// A thread_name metadata event: the name Perfetto shows for row `tid` of process `pid`.
std::string thread_name_event(int pid, int tid, const std::string& name) {
  std::string out;
  JsonWriter w(out);
  w.begin_object().key("name").value("thread_name").key("ph").value("M").key("pid").value(pid);
  w.key("tid").value(tid);
  w.key("args").begin_object().key("name").value(name).end_object().end_object();
  return out;
}

std::string complete_event(const std::string& path, int rank, int64_t step, int depth, double t_begin, double t_end,
                           int64_t device_begin, int64_t device_end, int64_t device_peak, int64_t host_peak,
                           bool unwound, const std::array<int64_t, kMemCategoryCount>* categories) {
  std::string out;
  JsonWriter w(out);
  begin_event(w, "X", leaf_of(path), rank, t_begin);
  w.key("dur").raw(us_text(to_ns(t_end) - to_ns(t_begin)));
  w.key("cat").value("phase");
  w.key("args").begin_object();
  w.key("path").value(path);
  w.key("step").value(step);
  w.key("depth").value(depth);
  w.key("device_begin").value(device_begin);
  w.key("device_end").value(device_end);
  w.key("device_peak").value(device_peak);
  w.key("host_peak").value(host_peak);
  if (unwound) w.key("unwound").value(true);
  if (categories != nullptr) {
    w.key("category_at_peak");
    write_categories_json(w, *categories);
  }
  w.end_object();
  w.end_object();
  return out;
}

std::string memory_counter(int rank, double t_s, int64_t device, int64_t host) {
  std::string out;
  JsonWriter w(out);
  begin_event(w, "C", "memory", rank, t_s);
  w.key("args").begin_object().key("device_bytes").value(device).key("host_bytes").value(host).end_object();
  w.end_object();
  return out;
}

}  // namespace

namespace {

/// Truncates a regular file at its stream's position; anything else (a device, a pipe) is left
/// as it is. False with errno set when the truncation fails.
bool cut_at_position(std::FILE* file) {
  if (!is_regular_file(file)) return true;
  return ::ftruncate(::fileno(file), ::ftell(file)) == 0;
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path) : path_(path) { open_fresh(); }

void TraceWriter::open_fresh() {
  file_ = open_output_stream(path_, "wb");
  if (file_ == nullptr) throw std::runtime_error("trace: cannot create " + path_ + ": " + std::strerror(errno));
  closes_on_disk_ = is_regular_file(file_);
  pending_ = "{\"traceEvents\":[\n";
  flush_locked();  // an empty trace, closed: a process killed before its first step leaves valid JSON
}

namespace {

/// What the resume reads of one event line of the old trace: where its text lies in the file and
/// the fields that decide whether it stays. Kept instead of the text and its parsed form (about
/// six times the file's size for a long run's trace): the kept lines are copied from the file.
struct OldTraceEvent {
  int64_t offset = 0;  ///< the line's first byte in the old file
  int64_t length = 0;  ///< the event's text, without the ",\n" around it
  bool metadata = false;
  bool step_counter = false;  ///< the "step" counter, written after all phases of its step
  std::optional<int64_t> step;
  double ts_us = 0;   ///< 0 where the event has no "ts"
  double end_us = 0;  ///< ts + dur
};

/// The longest line of an earlier trace read as an event: this writer's longest (a phase with its
/// categories) is under 2 KiB, so a longer line is something else and is dropped unread.
constexpr size_t kMaxEventLine = size_t(1) << 20;

/// The line's event text: trailing ',', ' ' and '\r' dropped (the writer puts ",\n" between events).
std::string_view event_text(std::string_view line) {
  while (!line.empty() && (line.back() == ',' || line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
  return line;
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path, int64_t keep_through_step) : path_(path) {
  // A device where a link leads (/dev/null: the trace discarded): no events to keep, written as a
  // fresh run writes it. A FIFO or a folder is refused below, as ever.
  if (is_character_device(path)) {
    open_fresh();
    return;
  }
  // The old file: one event per line between the header and the closing line (see emit_locked).
  // Read twice, one line at a time: first what decides the cut, then the kept lines copied out.
  std::vector<OldTraceEvent> events;
  // Checked on the descriptor: a FIFO or device planted in the run directory is refused, not read.
  const int old_fd = path_exists(path) ? open_regular_file(path, "trace") : -1;
  struct ClosesOldFile {
    int fd;
    ~ClosesOldFile() {
      if (fd >= 0) ::close(fd);
    }
  } closes_old_file{old_fd};
  // One line of the old file: a well-formed event recorded (its metadata's ranks and tracks taken
  // now: metadata always stays), anything else dropped.
  auto record_old_event = [&](std::string_view text, int64_t offset) {
    const std::optional<Json> v = text.front() == '{' ? parse_json(text) : std::nullopt;
    if (!v || !well_formed_event(*v)) {
      ++dropped_;
      return;
    }
    const Json& e = *v;
    OldTraceEvent event;
    event.offset = offset;
    event.length = static_cast<int64_t>(text.size());
    event.metadata = e.at("ph").get<std::string>() == "M";
    event.step_counter =
        e.at("ph").get<std::string>() == "C" && e.contains("name") && e.at("name").get<std::string>() == "step";
    if (e.contains("args") && e.at("args").contains("step")) event.step = e.at("args").at("step").get<int64_t>();
    if (e.contains("ts")) event.ts_us = e.at("ts").get<double>();
    event.end_us = event.ts_us + (e.contains("dur") ? e.at("dur").get<double>() : 0);
    if (event.metadata && e.contains("pid")) ranks_.insert(static_cast<int>(e.at("pid").get<int64_t>()));
    // A kept track's thread keeps its tid: this process's spans on that track go on it, and a new
    // track takes a tid of its own (named once, not a second name on a kept tid).
    if (event.metadata && e.contains("name") && e.at("name") == "thread_name" && e.contains("pid") &&
        e.contains("tid") && e.contains("args") && e.at("args").contains("name"))
      tracks_.emplace(
          std::make_pair(static_cast<int>(e.at("pid").get<int64_t>()), e.at("args").at("name").get<std::string>()),
          static_cast<int>(e.at("tid").get<int64_t>()));
    events.push_back(event);
  };
  if (old_fd >= 0) {
    std::FILE* in = ::fdopen(::dup(old_fd), "rb");
    if (in == nullptr) throw std::runtime_error("trace: cannot read " + path + ": " + std::strerror(errno));
    // One line at a time, at most kMaxEventLine bytes of it: a longer line is no event this writer
    // wrote (a file replaced by something else), dropped without holding it.
    std::string line;
    bool overlong = false;
    int64_t offset = 0, line_offset = 0;
    for (int c = getc_unlocked(in);; c = getc_unlocked(in)) {
      if (c != EOF && c != '\n') {
        ++offset;
        if (line.size() < kMaxEventLine)
          line.push_back(static_cast<char>(c));
        else
          overlong = true;
        continue;
      }
      // The last line may lack its newline: a process killed after a flush (events are written
      // ",\n" first) leaves its last event so. A line the kill tore never parses as an event.
      const std::string_view text = event_text(line);
      // The header and the closing lines are this writer's own; every other line is an event or dropped.
      const bool own_line = text.empty() || text == "{\"traceEvents\":[" || text.front() == ']';
      if (!own_line && !overlong) record_old_event(text, line_offset);
      if (!own_line && overlong) ++dropped_;
      if (c == EOF) break;
      line.clear();
      overlong = false;
      line_offset = ++offset;
    }
    const bool read_failed = std::ferror(in) != 0;
    std::fclose(in);
    if (read_failed) throw std::runtime_error("trace: cannot read " + path + ": " + std::strerror(errno));
  }
  // Everything up to step keep_through_step's "step" counter (written after all its phases)
  // stays; an event that names a later step goes whatever its time.
  double cut_us = -1;
  int64_t last_step = 0;
  for (const OldTraceEvent& e : events) {
    if (!e.step) continue;
    last_step = std::max(last_step, *e.step);
    if (e.step_counter && *e.step <= keep_through_step) cut_us = std::max(cut_us, e.ts_us);
  }
  if (last_step <= keep_through_step) cut_us = std::numeric_limits<double>::infinity();
  // The kept events, closed, replace the old file whole (temporary, fsync, rename): a process
  // ended before it writes more (a signal while loading) leaves a valid trace of them, and a
  // write that fails leaves the old file. Truncating it in place lost every earlier step to a
  // kill or a full disk before the first flush. This process writes over the closing lines.
  // Through a link, as a fresh run writes (a shell's `>`): the file it leads to is replaced.
  int64_t head_bytes = 0;
  double kept_until_us = -1;
  try {
    AtomicFile out(resolve_path(path));
    std::string chunk = "{\"traceEvents\":[\n";
    std::string text;
    for (const OldTraceEvent& e : events) {
      if (!e.metadata && ((e.step && *e.step > keep_through_step) || e.ts_us > cut_us)) {
        ++dropped_;
        continue;
      }
      if (!e.metadata) kept_until_us = std::max(kept_until_us, e.end_us);
      text.resize(static_cast<size_t>(e.length));
      // read where the first pass found it: the same descriptor, the run directory locked
      const ssize_t read = ::pread(old_fd, text.data(), text.size(), e.offset);
      if (read < 0) throw std::runtime_error("trace: cannot read " + path + ": " + std::strerror(errno));
      if (read != static_cast<ssize_t>(text.size()))
        throw std::runtime_error("trace: cannot read " + path + ": it was cut while the resume read it");
      chunk += first_event_ ? "" : ",\n";
      chunk += text;
      first_event_ = false;
      ++events_;
      if (chunk.size() >= kFlushBytes) {
        out.write(chunk);
        head_bytes += static_cast<int64_t>(chunk.size());
        chunk.clear();
      }
    }
    out.write(chunk);
    head_bytes += static_cast<int64_t>(chunk.size());
    out.write(closing_locked());
    out.commit();
  } catch (const FileWriteError& e) {
    throw std::runtime_error(std::string("trace: ") + e.what());
  }
  if (kept_until_us >= 0) offset_s_ = kept_until_us * 1e-6 + 1e-3;  // 1 ms after the last kept event
  file_ = open_output_stream(path, "r+b");
  if (file_ == nullptr || std::fseek(file_, static_cast<long>(head_bytes), SEEK_SET) != 0) {
    const std::string why = std::strerror(errno);
    if (file_ != nullptr) std::fclose(file_);
    file_ = nullptr;
    throw std::runtime_error("trace: cannot write " + path + ": " + why);
  }
  closes_on_disk_ = true;  // written above as a regular file
  closed_at_ = static_cast<long>(head_bytes);
  closing_on_disk_ = closing_locked();
}

TraceWriter::~TraceWriter() {
  std::lock_guard<std::mutex> lock(mutex_);
  close_locked();
}

void TraceWriter::attach(PhaseRecorder& recorder) {
  recorder.add_edge_sink([this](const PhaseEdge& e) { on_edge(e); });
  recorder.add_sink([this](const PhaseRecord& r) { on_record(r); });
  recorder.add_span_sink([this](const DeviceSpan& s) { on_device_span(s); });
}

void TraceWriter::on_device_span(const DeviceSpan& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  ensure_rank_locked(s.rank);
  // One trace thread per (rank, track), named once: Perfetto draws it as a row under the rank.
  const auto key = std::make_pair(s.rank, s.track);
  auto it = tracks_.find(key);
  if (it == tracks_.end()) {
    int next_tid = 1;  // one more than any tid of this rank in use (a resumed trace's kept tracks included)
    for (const auto& [known, tid] : tracks_)
      if (known.first == s.rank) next_tid = std::max(next_tid, tid + 1);
    it = tracks_.emplace(key, next_tid).first;
    emit_locked(thread_name_event(s.rank, next_tid, s.track));
  }
  const int tid = it->second;
  std::string out;
  {
    JsonWriter w(out);
    begin_event(w, "X", s.name, s.rank, s.t_begin_s + offset_s_, tid);
    w.key("dur").raw(us_text(to_ns(s.t_end_s + offset_s_) - to_ns(s.t_begin_s + offset_s_)));
    w.key("cat").value(s.category);
    w.key("args").begin_object().key("step").value(s.step).key("bytes").value(s.bytes).end_object();
    w.end_object();
  }
  emit_locked(out);
  last_t_s_ = std::max(last_t_s_, s.t_end_s + offset_s_);
}

void TraceWriter::write_pending_locked() {
  if (error_.empty() && std::fwrite(pending_.data(), 1, pending_.size(), file_) != pending_.size())
    error_ = "trace: cannot write " + path_ + ": " + std::strerror(errno);
  pending_.clear();
}

void TraceWriter::flush_locked() {
  if (file_ == nullptr || pending_.empty()) return;
  write_pending_locked();
  // The closing lines after the events on disk, and the position back before them: the next
  // events are written over them, and a process killed (SIGKILL, the OOM killer: no destructor
  // runs) leaves a whole document that Perfetto opens. A device or a pipe gets them at close.
  if (!closes_on_disk_) return;
  if (error_.empty()) {
    const long events_end = std::ftell(file_);
    const std::string closing = closing_locked();
    if (events_end < 0 || std::fwrite(closing.data(), 1, closing.size(), file_) != closing.size() ||
        std::fflush(file_) != 0)
      error_ = "trace: cannot write " + path_ + ": " + std::strerror(errno);
    else {
      closed_at_ = events_end;  // on disk: the events, then the closing lines
      closing_on_disk_ = closing;
    }
    if (error_.empty() && (!cut_at_position(file_) || std::fseek(file_, events_end, SEEK_SET) != 0))
      error_ = "trace: cannot write " + path_ + ": " + std::strerror(errno);
  }
  if (!error_.empty()) restore_closing_locked();
}

void TraceWriter::restore_closing_locked() {
  if (!closes_on_disk_ || closed_at_ < 0 || restored_) return;
  restored_ = true;
  __fpurge(file_);  // what the stream still holds of the failed write is not written at close
  // The very lines that were there: their bytes are on the disk already (a full disk has no room
  // for longer ones, and otherData may have grown since).
  const std::string& closing = closing_on_disk_;
  const int fd = ::fileno(file_);
  if (::pwrite(fd, closing.data(), closing.size(), closed_at_) == static_cast<ssize_t>(closing.size()))
    (void)::ftruncate(fd, closed_at_ + static_cast<off_t>(closing.size()));
}

void TraceWriter::emit_locked(const std::string& event) {
  if (file_ == nullptr) return;  // closed: late events are dropped
  if (!first_event_) pending_ += ",\n";
  first_event_ = false;
  pending_ += event;
  ++events_;
  if (pending_.size() >= kFlushBytes) flush_locked();
}

void TraceWriter::ensure_rank_locked(int rank) {
  if (!ranks_.insert(rank).second) return;
  std::string out;
  {
    JsonWriter w(out);
    w.begin_object().key("name").value("process_name").key("ph").value("M").key("pid").value(rank);
    w.key("args").begin_object().key("name").value("rank " + std::to_string(rank)).end_object().end_object();
  }
  emit_locked(out);
  out.clear();
  {
    JsonWriter w(out);
    w.begin_object().key("name").value("process_sort_index").key("ph").value("M").key("pid").value(rank);
    w.key("args").begin_object().key("sort_index").value(rank).end_object().end_object();
  }
  emit_locked(out);
  emit_locked(thread_name_event(rank, 0, "phases"));
}

void TraceWriter::emit_peak_locked(int rank, PeakCandidate& c) {
  if (!c.valid) return;
  std::string out;
  JsonWriter w(out);
  begin_event(w, "i", "step " + std::to_string(c.step) + " peak", rank, c.t_s);
  w.key("s").value("p");
  w.key("cat").value("peak");
  w.key("args").begin_object();
  w.key("step").value(c.step).key("device_peak").value(c.device_peak).key("phase").value(c.path);
  w.end_object();
  w.end_object();
  emit_locked(out);
  c.valid = false;
}

void TraceWriter::on_record(const PhaseRecord& r) {
  const std::string event =
      complete_event(r.path, r.rank, r.step, r.depth, r.t_begin_s + offset_s_, r.t_end_s + offset_s_, r.device_begin,
                     r.device_end, r.device_peak, r.host_peak, r.unwound, &r.category_at_peak);
  std::lock_guard<std::mutex> lock(mutex_);
  ensure_rank_locked(r.rank);
  emit_locked(event);
  last_t_s_ = std::max(last_t_s_, r.t_end_s + offset_s_);
  // The step's peak instant goes where the peak happened: the deepest phase that reached the
  // highest device peak of the step (known exactly), at that phase's end.
  PeakCandidate& c = peaks_[r.rank];
  if (c.valid && c.step != r.step) emit_peak_locked(r.rank, c);
  if (!c.valid || r.device_peak > c.device_peak || (r.device_peak == c.device_peak && r.depth > c.depth)) {
    c.valid = true;
    c.step = r.step;
    c.device_peak = r.device_peak;
    c.depth = r.depth;
    c.t_s = r.t_end_s + offset_s_;
    c.path = r.path;
  }
}

void TraceWriter::on_edge(const PhaseEdge& e) {
  std::string events = memory_counter(e.rank, e.t_s + offset_s_, e.device_bytes, e.host_bytes);
  std::string categories;
  {
    JsonWriter w(categories);
    begin_event(w, "C", "categories", e.rank, e.t_s + offset_s_);
    w.key("args");
    write_categories_json(w, e.category_bytes);
    w.end_object();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ensure_rank_locked(e.rank);
  emit_locked(events);
  emit_locked(categories);
  last_t_s_ = std::max(last_t_s_, e.t_s + offset_s_);
}

void TraceWriter::on_step(const StepMetrics& m) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [rank, c] : peaks_)
    if (c.valid && c.step == m.step) emit_peak_locked(rank, c);
  const int pid = ranks_.empty() ? 0 : *ranks_.begin();
  ensure_rank_locked(pid);
  std::string out;
  JsonWriter w(out);
  begin_event(w, "C", "step", pid, last_t_s_);
  w.key("args").begin_object();
  w.key("step").value(m.step);  // also what a resume cuts the trace at
  w.key("loss").value(std::isfinite(m.loss) ? m.loss : 0.0);
  w.key("tokens_per_s").value(m.tokens_per_s).key("step_time_s").value(m.step_time_s);
  w.end_object();
  w.end_object();
  emit_locked(out);
}

void TraceWriter::on_span(const PhaseSpan& s, const std::string& path) {
  const std::string event = complete_event(path, s.rank, s.step, s.depth, s.t_begin_s, s.t_end_s, s.device_begin,
                                           s.device_end, s.device_peak, s.host_peak, false, nullptr);
  std::lock_guard<std::mutex> lock(mutex_);
  ensure_rank_locked(s.rank);
  emit_locked(event);
  last_t_s_ = std::max(last_t_s_, s.t_end_s);
}

void TraceWriter::on_sample(const MemorySample& s) {
  const std::string event = memory_counter(s.rank, s.t_s, s.device_bytes, s.host_bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ensure_rank_locked(s.rank);
  emit_locked(event);
  last_t_s_ = std::max(last_t_s_, s.t_s);
}

std::string TraceWriter::closing_locked() const {
  std::string other;
  {
    JsonWriter w(other);
    w.begin_object().key("producer").value("odyssey");
    for (const auto& [key, words] : other_data_) {
      w.key(key).begin_array();
      for (const std::string& word : words) w.value(word);
      w.end_array();
    }
    w.end_object();
  }
  return "\n],\"displayTimeUnit\":\"ms\",\"otherData\":" + other + "}\n";
}

void TraceWriter::close_locked() {
  if (file_ == nullptr) return;
  for (auto& [rank, c] : peaks_) emit_peak_locked(rank, c);
  pending_ += closing_locked();
  write_pending_locked();
  // A resumed trace was written over its kept closing lines: whatever of them is left goes. Only
  // a regular file has a length to cut: a trace linked to /dev/null or a terminal has none.
  if (error_.empty() && (std::fflush(file_) != 0 || !cut_at_position(file_)))
    error_ = "trace: cannot write " + path_ + ": " + std::strerror(errno);
  if (!error_.empty()) restore_closing_locked();
  if (std::fclose(file_) != 0 && error_.empty()) error_ = "trace: cannot close " + path_ + ": " + std::strerror(errno);
  file_ = nullptr;
}

void TraceWriter::set_other_data(const std::string& key, const std::vector<std::string>& words) {
  std::lock_guard<std::mutex> lock(mutex_);
  other_data_[key] = words;
}

void TraceWriter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
  if (file_ != nullptr && error_.empty() && std::fflush(file_) != 0)
    error_ = "trace: cannot write " + path_ + ": " + std::strerror(errno);
}

void TraceWriter::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  close_locked();
  if (!error_.empty()) throw std::runtime_error(error_);
}

bool TraceWriter::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return file_ == nullptr;
}

int64_t TraceWriter::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

std::string TraceWriter::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

}  // namespace odyssey
