// Export tests: the Perfetto trace (one process per rank, nested X events, numeric counters with
// every series, a peak instant per rank and step, valid after an exception, streamed),
// metrics.jsonl lines and summary.json, all read back with parse_json.
#include <catch2/catch.hpp>

#include <csignal>
#include <sys/resource.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "../common/child_process.h"
#include "engine/telemetry/metrics_jsonl.h"
#include "engine/telemetry/phase_peaks.h"
#include "engine/telemetry/summary.h"
#include "engine/telemetry/trace_writer.h"
#include "engine/util/json_read.h"
#include "test_paths.h"

using namespace odyssey;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  const fs::path dir = fs::path(ODYSSEY_BINARY_DIR) / "test_out" / "telemetry";
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json parse_file(const std::string& path) {
  std::string error;
  auto v = parse_json(slurp(path), &error);
  INFO(path << ": " << error);
  REQUIRE(v.has_value());
  return *v;
}

at::Tensor floats(int64_t n) { return torch::empty({n}, torch::kFloat32); }

/// Two steps of a small nested workload on one rank.
void run_rank(int rank, TraceWriter& trace, PhasePeakTable& table) {
  RankScope bind_rank(rank);
  PhaseRecorder recorder(rank);
  trace.attach(recorder);
  PhaseRecorder::Bind bind(&recorder);
  for (int64_t step = 0; step < 2; ++step) {
    recorder.set_step(step);
    {
      PhaseScope s("step");
      {
        PhaseScope fwd("fwd");
        CategoryScope cat(MemCategory::SavedActivations);
        at::Tensor a = floats(1000 * (rank - 59));
        PhaseScope attn("attn");
        at::Tensor b = floats(3000);
      }
      PhaseScope opt("optimizer");
      at::Tensor c = floats(500);
    }
    table.add(recorder.take_records());
  }
}

}  // namespace

TEST_CASE("trace has one process per rank, nested phases, counters and peak instants", "[telemetry][trace]") {
  MemoryTracker::instance().install_cpu_allocator();
  const std::string path = temp_path("trace_ranks.json");
  PhasePeakTable table;
  {
    TraceWriter trace(path);
    std::vector<std::thread> ranks;
    for (int r = 60; r < 63; ++r) ranks.emplace_back(run_rank, r, std::ref(trace), std::ref(table));
    for (auto& t : ranks) t.join();
    for (int64_t step = 0; step < 2; ++step) {
      StepMetrics m;
      m.step = step;
      m.loss = 2.5;
      trace.on_step(m);
    }
    trace.close();
    CHECK(trace.closed());
    CHECK(trace.error().empty());
  }
  const Json doc = parse_file(path);
  const auto& events = doc.at("traceEvents");
  REQUIRE_FALSE(events.empty());
  std::map<int64_t, std::string> process_names;
  std::map<int64_t, std::vector<std::pair<double, double>>> spans;  // per pid: [ts, ts+dur]
  std::map<std::pair<int64_t, int64_t>, int64_t> max_peak;          // (pid, step) -> max X peak
  std::map<std::pair<int64_t, int64_t>, int64_t> instants;          // (pid, step) -> instant peak
  int memory_counters = 0, category_counters = 0;
  for (const auto& e : events) {
    const std::string ph = e.at("ph").get<std::string>();
    const int64_t pid = e.at("pid").get<int64_t>();
    if (ph == "M" && e.at("name").get<std::string>() == "process_name")
      process_names[pid] = e.at("args").at("name").get<std::string>();
    if (ph == "X") {
      const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
      CHECK(dur >= 0);
      spans[pid].emplace_back(ts, ts + dur);
      const auto key = std::make_pair(pid, e.at("args").at("step").get<int64_t>());
      max_peak[key] = std::max(max_peak[key], e.at("args").at("device_peak").get<int64_t>());
      CHECK(e.at("args").at("category_at_peak").size() == size_t(kMemCategoryCount));
    }
    if (ph == "C" && e.at("name").get<std::string>() == "memory") {
      ++memory_counters;
      CHECK(e.at("args").at("device_bytes").is_number());
      CHECK(e.at("args").at("host_bytes").is_number());
    }
    if (ph == "C" && e.at("name").get<std::string>() == "categories") {
      ++category_counters;
      CHECK(e.at("args").size() == size_t(kMemCategoryCount));
      for (const auto& [name, v] : e.at("args").items()) CHECK(v.is_number());
    }
    if (ph == "i")
      instants[{pid, e.at("args").at("step").get<int64_t>()}] = e.at("args").at("device_peak").get<int64_t>();
  }
  CHECK(process_names == std::map<int64_t, std::string>{{60, "rank 60"}, {61, "rank 61"}, {62, "rank 62"}});
  // 4 phases (step, fwd, fwd/attn, optimizer) x 2 edges x 2 steps per rank.
  CHECK(memory_counters == 3 * 4 * 2 * 2);
  CHECK(category_counters == memory_counters);
  for (const auto& [pid, list] : spans) {
    INFO("pid " << pid);
    CHECK(list.size() == 8);
    for (size_t i = 0; i < list.size(); ++i)
      for (size_t j = i + 1; j < list.size(); ++j) {
        const auto& a = list[i];
        const auto& b = list[j];
        const bool disjoint = a.second <= b.first || b.second <= a.first;
        const bool nested =
            (a.first <= b.first && b.second <= a.second) || (b.first <= a.first && a.second <= b.second);
        CHECK((disjoint || nested));
      }
  }
  REQUIRE(instants.size() == 6);  // one per rank and step
  for (const auto& [key, bytes] : instants) CHECK(bytes == max_peak[key]);
}

TEST_CASE("trace is valid JSON after an exception and streams while the run goes on", "[telemetry][trace]") {
  const std::string path = temp_path("trace_exception.json");
  try {
    TraceWriter trace(path);
    PhaseEdge edge;
    std::string name = "fwd";
    edge.path = &name;
    edge.rank = 3;
    for (int i = 0; i < 20000; ++i) {  // ~ 5 MB of counters
      edge.t_s = i * 1e-6;
      edge.device_bytes = i;
      trace.on_edge(edge);
    }
    CHECK(fs::file_size(path) >= TraceWriter::kFlushBytes);  // on disk before close
    throw std::runtime_error("the run failed");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "the run failed");
  }
  const Json doc = parse_file(path);
  CHECK(doc.at("traceEvents").size() == 3 + 2 * 20000);  // metadata + two counters each
  CHECK_THROWS_AS(TraceWriter("/nonexistent-dir/trace.json"), std::runtime_error);
}

TEST_CASE("trace on disk is a whole document after every flush, as a killed run leaves it", "[telemetry][trace]") {
  // SIGKILL or the OOM killer runs no destructor: the file left was the open array without its
  // closing lines, which Perfetto and chrome://tracing refuse. Read here while the writer is open.
  const std::string path = temp_path("trace_killed.json");
  TraceWriter trace(path);
  CHECK(parse_file(path).at("traceEvents").empty());  // created: already a document
  PhaseRecord record;
  record.path = "step";
  record.rank = 1;
  record.step = 1;
  record.t_end_s = 0.5;
  trace.on_record(record);
  trace.set_other_data("attention_kernels", {"a_kernel_name_longer_than_what_replaces_it"});
  trace.flush();
  Json doc = parse_file(path);
  CHECK(doc.at("traceEvents").size() == 4);  // 3 metadata events + the phase
  CHECK(doc.at("otherData").at("attention_kernels").size() == 1);
  // More events, with shorter closing lines than the ones on disk: written over, nothing left after.
  trace.set_other_data("attention_kernels", {});
  record.step = 2;
  trace.on_record(record);
  trace.flush();
  doc = parse_file(path);
  CHECK(doc.at("traceEvents").size() == 6);  // the phase and step 1's peak instant (its step ended)
  CHECK(doc.at("otherData").at("attention_kernels").empty());
  trace.close();
  doc = parse_file(path);
  CHECK(doc.at("traceEvents").size() == 7);  // and step 2's peak instant, pending until the close
}

TEST_CASE("a resumed trace keeps each copy track on its own thread", "[telemetry][trace]") {
  const std::string path = temp_path("trace_resumed_tracks.json");
  auto span = [](const std::string& track, const std::string& name, int64_t step, double t) {
    DeviceSpan s;
    s.step = step;
    s.name = name;
    s.category = "copy";
    s.track = track;
    s.t_begin_s = t;
    s.t_end_s = t + 0.01;
    s.bytes = 64;
    return s;
  };
  {
    TraceWriter trace(path);  // the first run: down, then up
    trace.on_device_span(span("offload d2h", "d2h block.1", 1, 0.1));
    trace.on_device_span(span("offload h2d", "h2d block.1", 1, 0.2));
    StepMetrics m;
    m.step = 1;
    m.rank_peak_bytes = {1};
    trace.on_step(m);
  }
  {
    TraceWriter trace(path, /*keep_through_step=*/1);  // the resumed run meets the tracks the other way round
    trace.on_device_span(span("offload h2d", "h2d block.2", 2, 0.1));
    trace.on_device_span(span("offload d2h", "d2h block.2", 2, 0.2));
    trace.on_device_span(span("loss copy", "copy", 2, 0.3));  // a track the first run had not
  }
  const Json doc = parse_file(path);
  std::map<int64_t, std::string> thread_names;  // tid -> its one name (rank 0)
  int names = 0;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph").get<std::string>() == "M" && e.at("name").get<std::string>() == "thread_name") {
      ++names;
      CHECK(thread_names.emplace(e.at("tid").get<int64_t>(), e.at("args").at("name").get<std::string>()).second);
    }
  CHECK(names == 4);  // the rank's phases thread (tid 0) and each of the three tracks, once across both runs
  int spans = 0;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph").get<std::string>() == "X" && e.contains("cat") && e.at("cat").get<std::string>() == "copy") {
      ++spans;
      const std::string name = e.at("name").get<std::string>();
      const std::string track = name.rfind("d2h", 0) == 0   ? "offload d2h"
                                : name.rfind("h2d", 0) == 0 ? "offload h2d"
                                                            : "loss copy";
      INFO(name);
      CHECK(thread_names.at(e.at("tid").get<int64_t>()) == track);
    }
  CHECK(spans == 5);
}

TEST_CASE("a resumed trace is read a line at a time, not held whole in memory", "[telemetry][trace]") {
  // A long run's trace is tens of MB; the resume held every event's text and its parsed form (about
  // six times the file) before it wrote the kept ones. Here a 40 MB trace is resumed in a child
  // whose address space may grow by 96 MB only: its text and parsed events alone need over 200 MB,
  // the line index it keeps now about 10 MB. Byte counts of this writer's own format and of the
  // limit, on any CPU: no kernel of LibTorch runs.
  const std::string path = temp_path("trace_resumed_large.json");
  constexpr int64_t kSteps = 4, kPhasesPerStep = 25000;
  const std::string padding(300, 'p');  // a phase's args are a few hundred bytes, as a real trace's
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "{\"traceEvents\":[\n";
    out << R"({"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}})";
    int64_t t_us = 0;
    for (int64_t step = 1; step <= kSteps; ++step) {
      for (int64_t i = 0; i < kPhasesPerStep; ++i, t_us += 2)
        out << ",\n{\"name\":\"fwd\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":" << t_us << ".000,\"dur\":1.000,"
            << "\"cat\":\"phase\",\"args\":{\"path\":\"step/" << padding << "\",\"step\":" << step << "}}";
      out << ",\n{\"name\":\"step\",\"ph\":\"C\",\"pid\":0,\"tid\":0,\"ts\":" << t_us++
          << ".000,\"args\":{\"step\":" << step << ",\"loss\":1.0}}";
    }
    out << "\n],\"displayTimeUnit\":\"ms\"}\n";
  }
  REQUIRE(fs::file_size(path) > 40'000'000);
  constexpr int64_t kKeptSteps = 2;
  constexpr int64_t kKept = 1 + kKeptSteps * (kPhasesPerStep + 1);  // metadata, then steps 1 and 2 whole
  constexpr int64_t kDropped = (kSteps - kKeptSteps) * (kPhasesPerStep + 1);
  const std::string said = odyssey::test::text_from_child([&]() -> std::string {
    if (!odyssey::test::limit_address_space_growth(rlim_t{96} << 20)) return "(no limit set)";
    TraceWriter trace(path, kKeptSteps);  // std::bad_alloc past the limit: "(exception) ..."
    trace.close();
    return "kept " + std::to_string(trace.events()) + ", dropped " + std::to_string(trace.dropped());
  });
  REQUIRE(said == "kept " + std::to_string(kKept) + ", dropped " + std::to_string(kDropped));
  const Json doc = parse_file(path);  // whole, and exactly steps 1 and 2
  CHECK(static_cast<int64_t>(doc.at("traceEvents").size()) == kKept);
  std::map<int64_t, int64_t> per_step;
  for (const auto& e : doc.at("traceEvents"))
    if (e.contains("args") && e.at("args").contains("step")) ++per_step[e.at("args").at("step").get<int64_t>()];
  CHECK(per_step == std::map<int64_t, int64_t>{{1, kPhasesPerStep + 1}, {2, kPhasesPerStep + 1}});
}

TEST_CASE("a trace whose write fails stays the document its last whole flush left", "[telemetry][trace]") {
  // A full disk (here: the file size limit, its signal ignored as odyssey's main ignores it) in the
  // middle of a flush left the events cut mid-line with no closing lines: no viewer opened it.
  const std::string path = temp_path("trace_write_fails.json");
  PhaseRecord record;
  record.path = "step";
  record.step = 1;
  TraceWriter trace(path);
  trace.on_record(record);
  trace.flush();
  const int64_t whole = static_cast<int64_t>(fs::file_size(path));
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  rlimit limited = saved;
  limited.rlim_cur = static_cast<rlim_t>(whole + 4096);  // room for a few more events, not 1 MiB
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  for (int i = 0; i < 20000 && trace.error().empty(); ++i) {
    record.step = 2;
    record.t_begin_s = record.t_end_s = i * 1e-6;
    trace.on_record(record);
  }
  std::string closed;
  try {
    trace.close();
  } catch (const std::runtime_error& e) {
    closed = e.what();
  }
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
  std::signal(SIGXFSZ, previous_handler);
  CHECK_THAT(closed, Catch::Contains("File too large"));
  const Json doc = parse_file(path);  // whole: step 1's phase and the metadata
  CHECK(doc.at("traceEvents").size() == 4);
}

TEST_CASE("each rank's copy tracks take tids from 1", "[telemetry][trace]") {
  // Rank threads share one writer: rank 1's tracks took tids 3 and 4 after rank 0's 1 and 2.
  const std::string path = temp_path("trace_rank_tracks.json");
  {
    TraceWriter trace(path);
    for (int rank : {0, 1})
      for (const char* track : {"offload d2h", "offload h2d"}) {
        DeviceSpan s;
        s.rank = rank;
        s.step = 1;
        s.name = track;
        s.category = "copy";
        s.track = track;
        trace.on_device_span(s);
      }
  }
  std::map<std::pair<int64_t, int64_t>, std::string> names;  // (pid, tid) -> thread name
  const Json doc = parse_file(path);
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      names[{e.at("pid").get<int64_t>(), e.at("tid").get<int64_t>()}] = e.at("args").at("name").get<std::string>();
  for (int64_t rank : {0, 1}) {
    INFO("rank " << rank);
    CHECK(names[{rank, 1}] == "offload d2h");
    CHECK(names[{rank, 2}] == "offload h2d");
  }
}

TEST_CASE("trace accepts the studio's spans and samples", "[telemetry][trace]") {
  const std::string path = temp_path("trace_spans.json");
  {
    TraceWriter trace(path);
    PhaseSpan span;
    span.rank = 1;
    span.t_begin_s = 0.5;
    span.t_end_s = 0.75;
    span.device_peak = 99;
    trace.on_span(span, "bwd/block.0/mlp");
    MemorySample sample;
    sample.rank = 1;
    sample.device_bytes = 42;
    trace.on_sample(sample);
  }
  const Json doc = parse_file(path);
  bool found = false;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph").get<std::string>() == "X") {
      found = true;
      CHECK(e.at("name").get<std::string>() == "mlp");
      CHECK(e.at("ts").get<double>() == Approx(500000.0));
      CHECK(e.at("dur").get<double>() == Approx(250000.0));
      CHECK(e.at("args").at("path").get<std::string>() == "bwd/block.0/mlp");
    }
  CHECK(found);
}

TEST_CASE("metrics.jsonl has one object per step with the contract's fields", "[telemetry][jsonl]") {
  const std::string path = temp_path("metrics.jsonl");
  PhasePeakTable table;
  PhaseRecord r;
  r.path = "fwd/block.0/attn";
  r.device_peak = 1234;
  table.add(r);
  r.rank = 1;
  r.device_peak = 2000;
  table.add(r);
  {
    MetricsJsonlWriter out(path);
    for (int s = 1; s <= 3; ++s) {
      StepMetrics m;
      m.step = s;
      m.loss = s == 3 ? std::nan("") : 5.0 / s;
      m.tokens_per_s = 1000.0 * s;
      m.step_time_s = 0.25;
      m.rank_peak_bytes = {100 * s, 300 * s};
      m.peak_bytes = 300 * s;
      m.rank_host_peak_bytes = {7, 9};
      m.lr = 1e-3;
      m.loss_meaningful = s != 2;
      m.has_answers = s != 1;  // step 1: a dataset without answer tokens
      m.answer_loss = 2.5;
      m.answer_accuracy = 0.25 * s;
      out.write(m, &table);
    }
    CHECK(out.lines() == 3);
  }
  std::istringstream lines(slurp(path));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    auto v = parse_json(line);
    REQUIRE(v.has_value());
    for (const char* key : {"step", "loss", "tokens_per_s", "step_time_s", "peak_bytes", "rank_peak_bytes",
                            "rank_host_peak_bytes", "lr", "grad_norm", "mfu", "loss_meaningful", "phase_peak_bytes"})
      CHECK(v->contains(key));
    CHECK(v->at("step").get<int64_t>() == n);
    CHECK(v->at("peak_bytes").get<int64_t>() == 300 * n);
    CHECK(v->at("rank_peak_bytes").size() == 2);
    CHECK(v->at("rank_peak_bytes")[1].get<int64_t>() == 300 * n);
    CHECK(v->at("host_peak_bytes").get<int64_t>() == 9);
    CHECK(v->at("phase_peak_bytes").at("fwd/block.0/attn").get<int64_t>() == 2000);
    CHECK(v->at("loss_meaningful").get<bool>() == (n != 2));
    if (n == 3) CHECK(v->at("loss").is_null());
    if (n == 1) CHECK(v->at("loss").get<double>() == Approx(5.0));
    // Answer statistics only where the data has answers.
    CHECK(v->contains("answer_accuracy") == (n != 1));
    CHECK(v->contains("answer_loss") == (n != 1));
    if (n != 1) CHECK(v->at("answer_accuracy").get<double>() == 0.25 * n);
  }
  CHECK(n == 3);
  CHECK_THROWS_AS(MetricsJsonlWriter("/nonexistent-dir/metrics.jsonl"), std::runtime_error);
}

TEST_CASE("step peaks come from the tracker for each local rank", "[telemetry][jsonl]") {
  MemoryTracker& t = MemoryTracker::instance();
  t.install_cpu_allocator();
  for (int r : {58, 59}) t.reset_peak(r);
  {
    RankScope rank(59);
    at::Tensor x = floats(1 << 16);  // 256 KiB on rank 59
    PoolScope host(MemPool::Host);
    at::Tensor h = floats(1 << 10);  // 4 KiB host
  }
  StepMetrics m;
  fill_peaks_from_tracker(m, {58, 59});
  REQUIRE(m.rank_peak_bytes.size() == 2);
  CHECK(m.rank_peak_bytes[1] - m.rank_peak_bytes[0] >= (1 << 18));  // rank 58 idle
  CHECK(m.rank_peak_bytes[1] - t.device_bytes(59) == (1 << 18));
  CHECK(m.rank_host_peak_bytes[1] - t.host_bytes(59) == (1 << 12));
  CHECK(m.peak_bytes == m.rank_peak_bytes[1]);
}

TEST_CASE("summary.json holds final metrics, rank peaks and the phase table", "[telemetry][summary]") {
  const std::string path = temp_path("summary.json");
  PhasePeakTable table;
  PhaseRecord small, big;
  small.path = "fwd/embed";
  small.device_peak = 10;
  big.path = "fwd/block.0/mlp";
  big.device_peak = 500;
  big.category_at_peak[static_cast<size_t>(MemCategory::MlpWorkspace)] = 300;
  table.add(small);
  table.add(big);
  RunSummary s;
  s.preset = "presets/tiny-cpu.toml";
  for (int i = 0; i < 4; ++i) {
    StepMetrics m;
    m.step = i;
    m.loss = 4.0 - i;
    m.tokens_per_s = i == 0 ? 10.0 : 100.0;  // the first step is left out of the mean
    m.rank_peak_bytes = {400, 450 + i};
    m.peak_bytes = 450 + i;
    s.steps.push_back(m);
  }
  MemorySnapshot snap;
  snap.device_peak = 777;
  snap.host_peak = 55;
  s.ranks = {RankPeak::from(0, snap)};
  s.phases = &table;
  s.extra_json = R"({"planner_peak_bytes": 800})";
  std::string error;
  REQUIRE(write_summary_json(path, s, &error));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  const Json doc = parse_file(path);
  CHECK(doc.at("steps").get<int64_t>() == 4);
  CHECK(doc.at("final").at("step").get<int64_t>() == 3);
  CHECK(doc.at("loss_first").get<double>() == Approx(4.0));
  CHECK(doc.at("loss_final").get<double>() == Approx(1.0));
  CHECK(doc.at("tokens_per_s_mean").get<double>() == Approx(100.0));
  CHECK(doc.at("peak_bytes").get<int64_t>() == 777);
  CHECK(doc.at("rank_peak_bytes").at(0).get<int64_t>() == 777);
  CHECK(doc.at("ranks").at(0).at("host_peak").get<int64_t>() == 55);
  const auto& phases = doc.at("phases");
  REQUIRE(phases.size() == 2);
  CHECK(phases[0].at("path").get<std::string>() == "fwd/block.0/mlp");  // highest first
  CHECK(phases[0].at("category_at_peak").at("mlp_workspace").get<int64_t>() == 300);
  CHECK(doc.at("extra").at("planner_peak_bytes").get<int64_t>() == 800);
  CHECK(doc.at("setup_s").is_null());  // no step started: no setup figure
  s.setup_s = 2.5;
  REQUIRE(write_summary_json(path, s, &error));
  CHECK(parse_file(path).at("setup_s").get<double>() == 2.5);
  s.extra_json = "[1, 2";
  CHECK_FALSE(write_summary_json(path, s, &error));
  CHECK_THAT(error, Catch::Contains("extra_json"));
  CHECK_FALSE(write_summary_json("/nonexistent-dir/summary.json", RunSummary{}, &error));
  CHECK_THAT(error, Catch::Contains("/nonexistent-dir/summary.json.tmp"));
}
