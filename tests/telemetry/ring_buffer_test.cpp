// Ring buffer and timeline tests: cursor semantics, overwrite of the oldest, chunked reads while
// writers run, clear, and the timeline's samples/spans/phase ids fed by a phase recorder.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "engine/telemetry/ring_buffer.h"
#include "engine/telemetry/timeline.h"

using namespace odyssey;

TEST_CASE("ring buffer cursors return exactly what arrived since", "[telemetry][ring]") {
  RingBuffer<int> ring(100);
  for (int i = 0; i < 10; ++i) ring.push(i);
  std::vector<int> out;
  size_t cursor = ring.read_since(0, &out);
  CHECK(cursor == 10);
  REQUIRE(out.size() == 10);
  CHECK(out.front() == 0);
  CHECK(out.back() == 9);
  out.clear();
  CHECK(ring.read_since(cursor, &out) == 10);
  CHECK(out.empty());
  for (int i = 10; i < 15; ++i) ring.push(i);
  cursor = ring.read_since(cursor, &out);
  CHECK(cursor == 15);
  CHECK(out == std::vector<int>{10, 11, 12, 13, 14});
  out.clear();
  CHECK(ring.read_since(10, &out, nullptr, 2) == 12);  // at most two
  CHECK(out == std::vector<int>{10, 11});
  CHECK_THROWS_AS(RingBuffer<int>(0), std::invalid_argument);
}

TEST_CASE("ring buffer overwrites the oldest and reports what a reader missed", "[telemetry][ring]") {
  RingBuffer<int> ring(8);
  for (int i = 0; i < 20; ++i) ring.push(i);
  CHECK(ring.size() == 8);
  CHECK(ring.written() == 20);
  std::vector<int> out;
  size_t dropped = 0;
  const size_t cursor = ring.read_since(3, &out, &dropped);
  CHECK(cursor == 20);
  CHECK(dropped == 9);  // 3..11 were overwritten
  CHECK(out == std::vector<int>{12, 13, 14, 15, 16, 17, 18, 19});
  ring.clear();
  out.clear();
  CHECK(ring.size() == 0);
  CHECK(ring.read_since(cursor, &out) == 20);
  CHECK(out.empty());
  ring.push(20);
  CHECK(ring.read_since(0, &out, &dropped) == 21);
  CHECK(out == std::vector<int>{20});
  CHECK(dropped == 20);
}

TEST_CASE("ring buffer readers and writers run concurrently without losing order", "[telemetry][ring]") {
  constexpr int kPerWriter = 200000;
  RingBuffer<int64_t> ring(1 << 14);
  std::atomic<int> done{0};
  auto writer = [&](int64_t id) {
    for (int64_t i = 0; i < kPerWriter; ++i) ring.push(id * 1000000000 + i);
    ++done;
  };
  std::thread w0(writer, 0), w1(writer, 1);
  size_t cursor = 0, read = 0, lost = 0;
  int64_t last[2] = {-1, -1};
  bool ordered = true;
  std::vector<int64_t> out;
  while (true) {
    const bool finished = done.load() == 2;
    out.clear();
    size_t dropped = 0;
    cursor = ring.read_since(cursor, &out, &dropped);
    read += out.size();
    lost += dropped;
    for (int64_t v : out) {
      const auto id = static_cast<size_t>(v / 1000000000);
      const int64_t seq = v % 1000000000;
      ordered = ordered && seq > last[id];
      last[id] = seq;
    }
    if (finished) break;
  }
  w0.join();
  w1.join();
  CHECK(ordered);
  CHECK(cursor == size_t(2) * kPerWriter);
  CHECK(read + lost == size_t(2) * kPerWriter);
  // The very last entry written is always read (a writer that finished early may have been
  // overwritten entirely by the other).
  CHECK(std::max(last[0], last[1]) == kPerWriter - 1);
}

TEST_CASE("ring buffer holds step metrics with their per-rank lists", "[telemetry][ring]") {
  RingBuffer<StepMetrics> ring(4);
  for (int s = 0; s < 6; ++s) {
    StepMetrics m;
    m.step = s;
    m.rank_peak_bytes = {s * 10, s * 20};
    ring.push(std::move(m));
  }
  std::vector<StepMetrics> out;
  CHECK(ring.read_since(0, &out) == 6);
  REQUIRE(out.size() == 4);
  CHECK(out[0].step == 2);
  CHECK(out[3].rank_peak_bytes == std::vector<int64_t>{50, 100});
}

TEST_CASE("timeline turns phase edges into samples and phases into spans with shared ids", "[telemetry][ring]") {
  MemoryTracker::instance().install_cpu_allocator();
  RankScope rank(57);
  Timeline timeline(TimelineOptions{64, 64, 8});
  PhaseRecorder recorder(57);
  recorder.set_step(3);
  timeline.attach(recorder);
  PhaseRecorder::Bind bind(&recorder);
  const int64_t base = MemoryTracker::instance().device_bytes(57);
  {
    PhaseScope fwd("fwd");
    at::Tensor x = torch::empty({100}, torch::kFloat32);
    PhaseScope attn("attn");
  }
  std::vector<MemorySample> samples;
  std::vector<PhaseSpan> spans;
  CHECK(timeline.samples_since(0, &samples) == 4);
  CHECK(timeline.spans_since(0, &spans) == 2);
  const auto names = timeline.phase_names();
  REQUIRE(names.size() == 2);
  CHECK(names[0] == "fwd");
  CHECK(names[1] == "fwd/attn");
  CHECK(samples[0].phase_id == 0);
  CHECK(samples[1].phase_id == 1);
  CHECK(samples[1].device_bytes == base + 400);
  CHECK(samples[3].device_bytes == base);
  CHECK(samples[2].rank == 57);
  CHECK(samples[2].step == 3);
  REQUIRE(spans.size() == 2);
  CHECK(timeline.phase_name(spans[0].phase_id) == "fwd/attn");
  CHECK(spans[1].device_peak == base + 400);
  CHECK(spans[1].depth == 0);
  CHECK(spans[0].depth == 1);
  StepMetrics m;
  m.step = 3;
  timeline.add_metrics(m);
  std::vector<StepMetrics> metrics;
  CHECK(timeline.metrics_since(0, &metrics) == 1);
  CHECK(metrics.at(0).step == 3);
}
