// Phase scope tests: nested paths and depths, exact per-phase peaks that include children, bytes
// at both edges, the "step" root, edge sinks in time order, OOM messages naming the phase.
#include <catch2/catch.hpp>

#include <map>
#include <stdexcept>

#include "engine/telemetry/phase.h"

using namespace odyssey;

namespace {

at::Tensor floats(int64_t n) { return torch::empty({n}, torch::kFloat32); }  // n*4 bytes

std::map<std::string, PhaseRecord> by_path(const std::vector<PhaseRecord>& records) {
  std::map<std::string, PhaseRecord> out;
  for (const auto& r : records) out[r.path] = r;
  return out;
}

}  // namespace

TEST_CASE("nested phase peaks include children and edges hold the bytes", "[telemetry][phase]") {
  MemoryTracker& t = MemoryTracker::instance();
  t.install_cpu_allocator();
  RankScope rank(51);
  PhaseRecorder recorder(51);
  recorder.set_step(7);
  PhaseRecorder::Bind bind(&recorder);
  const int64_t base = t.device_bytes(51);
  at::Tensor kept;
  {
    PhaseScope fwd("fwd");
    kept = floats(1000);  // 4000, survives fwd
    {
      PhaseScope block("block.0");
      {
        PhaseScope attn("attn");
        CHECK(recorder.current_path() == "fwd/block.0/attn");
        CHECK(t.phase_name(51) == "fwd/block.0/attn");
        at::Tensor scores = floats(5000);  // 20000 transient
      }
      {
        PhaseScope mlp("mlp");
        at::Tensor a = floats(2000);  // 8000
        at::Tensor b = floats(2000);  // 8000 -> 16000 inside
      }
    }
    CHECK(t.phase_name(51) == "fwd");
  }
  CHECK(t.phase_name(51).empty());
  CHECK(t.peak_window_depth(51) == 0);
  auto records = recorder.take_records();
  REQUIRE(records.size() == 4);
  CHECK(recorder.take_records().empty());
  // Children finish first.
  CHECK(records[0].path == "fwd/block.0/attn");
  CHECK(records[3].path == "fwd");
  auto r = by_path(records);
  const PhaseRecord& attn = r["fwd/block.0/attn"];
  const PhaseRecord& mlp = r["fwd/block.0/mlp"];
  const PhaseRecord& block = r["fwd/block.0"];
  const PhaseRecord& fwd = r["fwd"];
  CHECK(attn.depth == 2);
  CHECK(block.depth == 1);
  CHECK(fwd.depth == 0);
  CHECK(attn.step == 7);
  CHECK(attn.rank == 51);
  CHECK(attn.device_begin == base + 4000);
  CHECK(attn.device_end == base + 4000);
  CHECK(attn.device_peak == base + 24000);
  CHECK(mlp.device_peak == base + 20000);
  CHECK(block.device_peak == base + 24000);  // the child's peak, reached inside the parent
  CHECK(fwd.device_begin == base);
  CHECK(fwd.device_end == base + 4000);
  CHECK(fwd.device_peak == base + 24000);
  CHECK(fwd.device_peak >= block.device_peak);
  CHECK(attn.category_at_peak[static_cast<size_t>(MemCategory::Other)] -
            fwd.category_at_peak[static_cast<size_t>(MemCategory::Other)] ==
        0);
  CHECK(attn.t_begin_s >= fwd.t_begin_s);
  CHECK(attn.t_end_s <= fwd.t_end_s);
  CHECK(mlp.t_begin_s >= attn.t_end_s);
  CHECK_FALSE(fwd.unwound);
}

TEST_CASE("a parent's peak reached outside its children is its own", "[telemetry][phase]") {
  MemoryTracker::instance().install_cpu_allocator();
  RankScope rank(52);
  PhaseRecorder recorder(52);
  PhaseRecorder::Bind bind(&recorder);
  const int64_t base = MemoryTracker::instance().device_bytes(52);
  {
    PhaseScope outer("bwd");
    {
      PhaseScope child("small");
      at::Tensor x = floats(100);
    }
    at::Tensor big = floats(10000);  // after the child closed
  }
  auto r = by_path(recorder.take_records());
  CHECK(r["bwd/small"].device_peak == base + 400);
  CHECK(r["bwd"].device_peak == base + 40000);
}

TEST_CASE("an outermost step phase is a root: its children keep their own paths", "[telemetry][phase]") {
  MemoryTracker::instance().install_cpu_allocator();
  RankScope rank(53);
  PhaseRecorder recorder(53);
  PhaseRecorder::Bind bind(&recorder);
  const int64_t base = MemoryTracker::instance().device_bytes(53);
  {
    PhaseScope step("step");
    {
      PhaseScope fwd("fwd");
      PhaseScope embed("embed");
      at::Tensor x = floats(250);
    }
    PhaseScope opt("optimizer");
  }
  auto r = by_path(recorder.take_records());
  REQUIRE(r.count("step"));
  REQUIRE(r.count("fwd/embed"));
  REQUIRE(r.count("optimizer"));
  CHECK(r["step"].depth == 0);
  CHECK(r["fwd"].depth == 0);
  CHECK(r["fwd/embed"].depth == 1);
  CHECK(r["step"].device_peak == base + 1000);
}

TEST_CASE("edge sinks see every edge in time order with bytes and record sinks see each record", "[telemetry][phase]") {
  MemoryTracker::instance().install_cpu_allocator();
  RankScope rank(54);
  PhaseRecorder recorder(54);
  std::vector<std::pair<std::string, bool>> edges;
  std::vector<int64_t> edge_bytes;
  std::vector<double> edge_times;
  int records_seen = 0;
  recorder.add_edge_sink([&](const PhaseEdge& e) {
    edges.emplace_back(*e.path, e.begin);
    edge_bytes.push_back(e.device_bytes);
    edge_times.push_back(e.t_s);
  });
  recorder.add_sink([&](const PhaseRecord&) { ++records_seen; });
  recorder.add_sink([](const PhaseRecord&) { throw std::runtime_error("sink broke"); });
  recorder.set_keep_records(false);
  PhaseRecorder::Bind bind(&recorder);
  const int64_t base = MemoryTracker::instance().device_bytes(54);
  {
    PhaseScope a("a");
    at::Tensor x = floats(10);
    PhaseScope b("b");
  }
  REQUIRE(edges.size() == 4);
  CHECK(edges[0] == std::make_pair(std::string("a"), true));
  CHECK(edges[1] == std::make_pair(std::string("a/b"), true));
  CHECK(edges[2] == std::make_pair(std::string("a/b"), false));
  CHECK(edges[3] == std::make_pair(std::string("a"), false));
  CHECK(edge_bytes[0] == base);
  CHECK(edge_bytes[1] == base + 40);
  CHECK(edge_bytes[3] == base);  // x freed before a closed (destruction order)
  for (size_t i = 1; i < edge_times.size(); ++i) CHECK(edge_times[i] >= edge_times[i - 1]);
  CHECK(records_seen == 2);
  CHECK(recorder.sink_errors() == 2);  // caught, counted, never thrown out of a destructor
  CHECK(recorder.first_sink_error() == "sink broke");
  CHECK(recorder.take_records().empty());  // keep_records off
}

TEST_CASE("OOM inside a phase names the phase and marks the records unwound", "[telemetry][phase]") {
  MemoryTracker& t = MemoryTracker::instance();
  t.install_cpu_allocator();
  RankScope rank(55);
  PhaseRecorder recorder(55);
  PhaseRecorder::Bind bind(&recorder);
  t.set_device_limit(55, t.device_bytes(55) + 1000);
  std::string message;
  try {
    PhaseScope fwd("fwd");
    PhaseScope block("block.3");
    PhaseScope attn("attn");
    at::Tensor scores = floats(1 << 20);
  } catch (const c10::OutOfMemoryError& e) {
    message = e.what();
  }
  t.set_device_limit(55, 0);
  CHECK_THAT(message, Catch::Contains("phase 'fwd/block.3/attn'"));
  CHECK_THAT(message, Catch::Contains("rank 55"));
  CHECK_THAT(message, Catch::Contains(std::to_string(4 << 20) + " bytes"));
  auto records = recorder.take_records();
  REQUIRE(records.size() == 3);
  for (const auto& r : records) CHECK(r.unwound);
  CHECK(t.peak_window_depth(55) == 0);
  CHECK(t.phase_name(55).empty());
  {
    PhaseScope again("fwd");  // the next phase works
    at::Tensor x = floats(1 << 20);
  }
  auto next = recorder.take_records();
  REQUIRE(next.size() == 1);
  CHECK_FALSE(next[0].unwound);
}

TEST_CASE("phase scopes without a bound recorder record nothing", "[telemetry][phase]") {
  REQUIRE(PhaseRecorder::current() == nullptr);
  { PhaseScope orphan("fwd"); }
  PhaseRecorder recorder(56);
  {
    PhaseRecorder::Bind bind(&recorder);
    CHECK(PhaseRecorder::current() == &recorder);
  }
  CHECK(PhaseRecorder::current() == nullptr);
  CHECK(recorder.take_records().empty());
  CHECK_THROWS_AS(PhaseRecorder(kMaxTrackedRanks), std::out_of_range);
  CHECK_THROWS_AS(recorder.pop(), std::logic_error);
}

TEST_CASE("a torchrun rank of any global number records that rank and counts in its process's slot",
          "[telemetry][phase]") {
  // A torchrun process runs one rank: slot 0 of its tracker, whatever its global rank (rank 70
  // of a 9-node job once aborted: "rank 64 outside the tracked range").
  MemoryTracker& t = MemoryTracker::instance();
  t.install_cpu_allocator();
  RankScope slot(47);
  PhaseRecorder recorder(/*rank=*/70, /*slot=*/47);
  CHECK(recorder.rank() == 70);
  PhaseRecorder::Bind bind(&recorder);
  const int64_t base = t.device_bytes(47);
  {
    PhaseScope fwd("fwd");
    at::Tensor x = floats(250);  // 1000 bytes, charged to slot 47
    CHECK(t.device_bytes(47) == base + 1000);
  }
  auto records = recorder.take_records();
  REQUIRE(records.size() == 1);
  CHECK(records[0].rank == 70);
  CHECK(records[0].device_peak - records[0].device_begin == 1000);
  CHECK_THROWS_AS(PhaseRecorder(70, kMaxTrackedRanks), std::out_of_range);
}

namespace {
/// A device clock whose marks are 0.25 s apart, recording the ranges it is given.
class FakeDeviceTimeline : public DeviceTimeline {
 public:
  int mark() override { return marks++; }
  int mark_on(void* stream) override {
    streams.push_back(stream);
    return marks++;
  }
  void settle() override { ++settles; }
  double since_first(int index) override { return 0.25 * index; }
  void restart() override { marks = 0; }
  void range_push(const std::string& name) override { ranges.push_back("+" + name); }
  void range_pop() override { ranges.push_back("-"); }
  int marks = 0, settles = 0;
  std::vector<std::string> ranges;
  std::vector<void*> streams;  // mark_on's streams, in order
};
}  // namespace

TEST_CASE("a device timeline holds edges and records until settle, then gives them device times",
          "[telemetry][phase][device_time]") {
  MemoryTracker::instance().install_cpu_allocator();
  RankScope rank(45);
  FakeDeviceTimeline clock;
  PhaseRecorder recorder(45);
  recorder.set_device_timeline(&clock);
  std::vector<PhaseRecord> sunk;
  std::vector<std::pair<std::string, double>> edges;
  recorder.add_sink([&](const PhaseRecord& r) { sunk.push_back(r); });
  recorder.add_edge_sink([&](const PhaseEdge& e) { edges.emplace_back(*e.path, e.t_s); });
  PhaseRecorder::Bind bind(&recorder);
  {
    PhaseScope step("step");  // mark 0
    {
      PhaseScope fwd("fwd");  // marks 1, 2
    }
    {
      PhaseScope bwd("bwd");  // marks 3, 4
    }
  }  // mark 5
  // Nothing delivered yet: the host times say when kernels were queued, not when they ran.
  CHECK(sunk.empty());
  CHECK(edges.empty());
  CHECK(recorder.take_records().empty());
  CHECK(clock.ranges == std::vector<std::string>{"+step", "+fwd", "-", "+bwd", "-", "-"});
  const std::optional<double> span = recorder.settle();
  REQUIRE(span.has_value());
  CHECK(*span == 1.25);  // mark 0 to mark 5
  CHECK(clock.settles == 1);
  CHECK(clock.marks == 0);  // restarted for the next step
  REQUIRE(edges.size() == 6);
  const double t0 = edges[0].second;
  CHECK(edges[1].first == "fwd");
  CHECK(edges[1].second == Approx(t0 + 0.25));
  CHECK(edges[5].first == "step");
  CHECK(edges[5].second == Approx(t0 + 1.25));
  auto records = recorder.take_records();
  REQUIRE(records.size() == 3);
  CHECK(records[0].path == "fwd");
  CHECK(records[0].t_begin_s == Approx(t0 + 0.25));
  CHECK(records[0].t_end_s == Approx(t0 + 0.5));
  CHECK(records[2].path == "step");
  CHECK(records[2].t_end_s - records[2].t_begin_s == Approx(1.25));
  CHECK(sunk.size() == 3);
  // drop_held forgets the held phases.
  { PhaseScope step("step"); }
  recorder.drop_held();
  CHECK_FALSE(recorder.settle().has_value());
  CHECK(recorder.take_records().empty());
  // A failed step's held phases go on with their host times (its device may be in error: the
  // clock is not settled): on a GPU they were dropped, and no failed step reached the trace.
  edges.clear();
  sunk.clear();
  const double before = telemetry_now_s();
  { PhaseScope step("failed"); }
  const double after = telemetry_now_s();
  recorder.deliver_held_on_host_clock();
  CHECK(clock.settles == 1);  // not settled
  CHECK(clock.marks == 0);    // restarted
  REQUIRE(edges.size() == 2);
  CHECK(edges[0].first == "failed");
  records = recorder.take_records();
  REQUIRE(records.size() == 1);
  CHECK(records[0].path == "failed");
  CHECK(records[0].t_begin_s >= before);
  CHECK(records[0].t_end_s <= after);
  CHECK(sunk.size() == 1);
  CHECK_FALSE(recorder.settle().has_value());  // nothing held any more
  // Without a device timeline, settle is a no-op and delivery is immediate.
  recorder.set_device_timeline(nullptr);
  { PhaseScope step("step"); }
  CHECK_FALSE(recorder.settle().has_value());
  CHECK(recorder.take_records().size() == 1);
}

TEST_CASE("device spans (offload copies) are timed on the phases' clock and delivered at settle",
          "[telemetry][phase][device_time]") {
  MemoryTracker::instance().install_cpu_allocator();
  RankScope rank(46);
  FakeDeviceTimeline clock;
  PhaseRecorder recorder(46);
  recorder.set_device_timeline(&clock);
  recorder.set_step(7);
  std::vector<DeviceSpan> spans;
  std::vector<PhaseRecord> records;
  recorder.add_span_sink([&](const DeviceSpan& s) { spans.push_back(s); });
  recorder.add_sink([&](const PhaseRecord& r) { records.push_back(r); });
  PhaseRecorder::Bind bind(&recorder);
  int copy_stream = 0;  // any address stands for a stream
  // Before the step's first phase edge there is no clock to time against.
  CHECK(recorder.mark_stream(&copy_stream) == -1);
  DeviceSpan copy;
  copy.name = "d2h block.0";
  copy.category = "copy";
  copy.track = "offload d2h";
  copy.bytes = 4096;
  {
    PhaseScope step("step");  // mark 0
    {
      PhaseScope fwd("fwd");                                 // mark 1
      const int begin = recorder.mark_stream(&copy_stream);  // mark 2, on the copy stream
      const int end = recorder.mark_stream(&copy_stream);    // mark 3
      CHECK(begin == 2);
      CHECK(end == 3);
      recorder.add_device_span(copy, begin, end);
      recorder.add_device_span(copy, -1, end);  // a mark without a clock: dropped
    }                                           // mark 4
  }                                             // mark 5: the step's last phase edge
  // A copy queued after the step's last edge (its mark is the step's last) is timed, but the
  // step's span still ends at the last phase edge.
  const int late = recorder.mark_stream(&copy_stream);  // mark 6
  recorder.add_device_span(copy, late, late);
  CHECK(spans.empty());  // held like the phases
  CHECK(clock.streams == std::vector<void*>{&copy_stream, &copy_stream, &copy_stream});
  const std::optional<double> step_span = recorder.settle();
  REQUIRE(step_span.has_value());
  CHECK(*step_span == 1.25);  // mark 0 to mark 5, not to the copy's mark 6
  REQUIRE(spans.size() == 2);
  REQUIRE(records.size() == 2);
  const double t0 = records[1].t_begin_s;  // the step's first mark
  CHECK(spans[0].t_begin_s == Approx(t0 + 0.5));
  CHECK(spans[0].t_end_s == Approx(t0 + 0.75));
  CHECK(spans[0].rank == 46);
  CHECK(spans[0].step == 7);
  CHECK(spans[0].name == "d2h block.0");
  CHECK(spans[0].bytes == 4096);
  CHECK(spans[1].t_begin_s == Approx(t0 + 1.5));
  // drop_held forgets held spans too.
  {
    PhaseScope step("step");
    recorder.add_device_span(copy, recorder.mark_stream(&copy_stream), recorder.mark_stream(&copy_stream));
  }
  recorder.drop_held();
  CHECK_FALSE(recorder.settle().has_value());
  CHECK(spans.size() == 2);
  // Without a device timeline: host spans are delivered at once, on the recorder's epoch.
  recorder.set_device_timeline(nullptr);
  recorder.set_epoch_s(10.0);
  DeviceSpan host = copy;
  host.t_begin_s = 12.0;
  host.t_end_s = 12.5;
  recorder.add_host_span(host);
  REQUIRE(spans.size() == 3);
  CHECK(spans[2].t_begin_s == Approx(2.0));
  CHECK(spans[2].t_end_s == Approx(2.5));
  CHECK(recorder.mark_stream(&copy_stream) == -1);
}
