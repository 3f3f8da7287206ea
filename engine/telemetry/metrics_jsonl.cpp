// metrics.jsonl: the per-step JSON line and a line-flushed writer. defines: metrics_json_line,
// MetricsJsonlWriter members, write_metrics_jsonl, fill_peaks_from_tracker
#include "engine/telemetry/metrics_jsonl.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase_peaks.h"
#include "engine/util/files.h"
#include "engine/util/json.h"
#include "engine/util/json_read.h"

namespace odyssey {

namespace {
void write_list(JsonWriter& w, const std::vector<int64_t>& values) {
  w.begin_array();
  for (int64_t v : values) w.value(v);
  w.end_array();
}

std::string io_error(const std::string& what, const std::string& path) {
  return "metrics.jsonl: cannot " + what + " " + path + ": " + std::strerror(errno);
}

/// A kept line read back (the inverse of metrics_json_line; phase_peak_bytes is not kept). A
/// field that is absent or not of its type reads as StepMetrics' default; a null loss as NaN.
StepMetrics step_metrics_from_json(const Json& v) {
  StepMetrics m;
  auto number = [&](const char* key, double fallback) {
    return v.contains(key) && v.at(key).is_number() ? v.at(key).get<double>() : fallback;
  };
  auto whole = [&](const char* key) {
    return v.contains(key) && v.at(key).is_number_integer() ? v.at(key).get<int64_t>() : int64_t{0};
  };
  auto list = [&](const char* key) {
    std::vector<int64_t> out;
    if (v.contains(key) && v.at(key).is_array())
      for (const Json& x : v.at(key)) out.push_back(x.is_number_integer() ? x.get<int64_t>() : 0);
    return out;
  };
  m.step = whole("step");
  m.loss = number("loss", std::nan(""));
  m.loss_meaningful =
      !(v.contains("loss_meaningful") && v.at("loss_meaningful").is_boolean()) || v.at("loss_meaningful").get<bool>();
  m.tokens_per_s = number("tokens_per_s", 0);
  m.step_time_s = number("step_time_s", 0);
  m.peak_bytes = whole("peak_bytes");
  m.rank_peak_bytes = list("rank_peak_bytes");
  m.rank_host_peak_bytes = list("rank_host_peak_bytes");
  m.lr = number("lr", 0);
  m.grad_norm = number("grad_norm", 0);
  m.mfu = number("mfu", 0);
  m.config_version = whole("config_version");
  m.has_answers = v.contains("answer_loss");
  m.answer_loss = number("answer_loss", 0);
  m.answer_accuracy = number("answer_accuracy", 0);
  return m;
}
}  // namespace

std::string metrics_json_line(const StepMetrics& m, const PhasePeakTable* phase_peaks) {
  std::string out;
  JsonWriter w(out);
  const int64_t host_peak = m.rank_host_peak_bytes.empty()
                                ? 0
                                : *std::max_element(m.rank_host_peak_bytes.begin(), m.rank_host_peak_bytes.end());
  w.begin_object();
  w.key("step").value(m.step);
  w.key("loss").value(m.loss);
  w.key("loss_meaningful").value(m.loss_meaningful);
  w.key("tokens_per_s").value(m.tokens_per_s);
  w.key("step_time_s").value(m.step_time_s);
  w.key("peak_bytes").value(m.peak_bytes);
  w.key("rank_peak_bytes");
  write_list(w, m.rank_peak_bytes);
  w.key("host_peak_bytes").value(host_peak);
  w.key("rank_host_peak_bytes");
  write_list(w, m.rank_host_peak_bytes);
  w.key("lr").value(m.lr);
  w.key("grad_norm").value(m.grad_norm);
  w.key("mfu").value(m.mfu);
  w.key("config_version").value(m.config_version);
  if (m.has_answers) {  // the long-range task: how well the answers far back are recalled
    w.key("answer_loss").value(m.answer_loss);
    w.key("answer_accuracy").value(m.answer_accuracy);
  }
  if (phase_peaks != nullptr) {
    w.key("phase_peak_bytes");
    phase_peaks->write_peaks_json(w);
  }
  w.end_object();
  return out;
}

MetricsJsonlWriter::MetricsJsonlWriter(const std::string& path, int64_t keep_through_step) : path_(path) {
  // A device where a link leads (/dev/null: the metrics discarded) has no lines to keep.
  if (keep_through_step >= 0 && path_exists(path) && !is_character_device(path)) {
    // Checked on the descriptor: a FIFO or device planted in the run directory is refused, not read.
    std::FILE* in = ::fdopen(open_regular_file(path, "metrics.jsonl"), "rb");
    if (in == nullptr) throw std::runtime_error(io_error("read", path));
    std::string kept, line;
    for (int c = std::fgetc(in);; c = std::fgetc(in)) {
      if (c != EOF && c != '\n') {
        line.push_back(static_cast<char>(c));
        continue;
      }
      // A line without its newline was cut by the kill; a line that does not parse, or names a
      // step after the checkpoint, is dropped.
      const bool whole = c == '\n';
      const auto v = whole ? parse_json(line) : std::nullopt;
      if (v && v->is_object() && v->contains("step") && v->at("step").is_number_integer() &&
          v->at("step").get<int64_t>() <= keep_through_step) {
        kept += line;
        kept += '\n';
        kept_steps_.push_back(step_metrics_from_json(*v));
        if (v->contains("first_of_process") && v->at("first_of_process") == true)
          kept_process_starts_.push_back(kept_steps_.back().step);
        ++lines_;
      } else if (!line.empty()) {
        ++dropped_;
      }
      line.clear();
      if (c == EOF) break;
    }
    std::fclose(in);
    try {
      write_file_atomically(resolve_path(path), kept);  // where a link leads, as a fresh run writes (a shell's `>`)
    } catch (const FileWriteError& e) {
      throw std::runtime_error(std::string("metrics.jsonl: ") + e.what());
    }
  }
  file_ = open_output_stream(path, keep_through_step >= 0 ? "ab" : "wb");
  if (file_ == nullptr) throw std::runtime_error(io_error("open", path));
}

MetricsJsonlWriter::~MetricsJsonlWriter() {
  try {
    close();
  } catch (...) {
  }
}

void MetricsJsonlWriter::write(const StepMetrics& m, const PhasePeakTable* phase_peaks) {
  std::string line = metrics_json_line(m, phase_peaks);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!wrote_) line.insert(line.size() - 1, ",\"first_of_process\":true");  // inside the object's closing brace
  line += '\n';
  if (file_ == nullptr) throw std::runtime_error("metrics.jsonl: " + path_ + " is already closed");
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw std::runtime_error(io_error("write", path_));
  ++lines_;
  wrote_ = true;
}

void MetricsJsonlWriter::sync() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  // A device or a pipe where a link leads (/dev/null) has nothing to put on a disk: fsync refuses it.
  if (std::fflush(file_) != 0 || (is_regular_file(file_) && ::fsync(::fileno(file_)) != 0))
    throw std::runtime_error(io_error("sync", path_));
}

void MetricsJsonlWriter::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) throw std::runtime_error(io_error("close", path_));
}

int64_t MetricsJsonlWriter::lines() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_;
}

void fill_peaks_from_tracker(StepMetrics& m, const std::vector<int>& ranks) {
  m.rank_peak_bytes.clear();
  m.rank_host_peak_bytes.clear();
  m.peak_bytes = 0;
  for (int rank : ranks) {
    const MemorySnapshot s = MemoryTracker::instance().snapshot(rank);
    m.rank_peak_bytes.push_back(s.device_peak);
    m.rank_host_peak_bytes.push_back(s.host_peak);
    m.peak_bytes = std::max(m.peak_bytes, s.device_peak);
  }
}

bool write_metrics_jsonl(const std::string& path, const std::vector<StepMetrics>& metrics, std::string* error) {
  try {
    MetricsJsonlWriter out(path);
    for (const auto& m : metrics) out.write(m);
    out.close();
    return true;
  } catch (const std::exception& e) {
    if (error != nullptr) *error = e.what();
    return false;
  }
}

}  // namespace odyssey
