// The plot module's pure parts: min/max downsampling keeps every column's extremes (a million
// points become at most two per pixel column), ticks are round and inside the range, values
// format with their units.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "app/studio/plot.h"

using namespace odyssey::studio::plot;

namespace {
struct Series {
  std::vector<double> x, y;
};
Series noisy_series(size_t n, uint32_t seed) {
  Series s;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 1);
  for (size_t i = 0; i < n; ++i) {
    s.x.push_back(double(i) * 0.001);
    s.y.push_back(1e9 + 1e7 * noise(rng) + (i % 100003 == 0 ? 5e8 : 0));  // rare spikes
  }
  return s;
}
}  // namespace

TEST_CASE("downsampling a million points keeps each column's min and max", "[studio][plot]") {
  const Series s = noisy_series(1'000'000, 7);
  const Range view{0, s.x.back()};
  const int columns = 800;
  std::vector<Point> out;
  const size_t in_view = downsample_minmax(s.x.data(), s.y.data(), s.x.size(), view, columns, &out);
  CHECK(in_view == s.x.size());
  REQUIRE(out.size() <= 2 * columns + 2);
  REQUIRE(out.size() >= columns);
  // Per column: the extremes of the input equal the extremes of the output.
  std::vector<double> in_min(columns, INFINITY), in_max(columns, -INFINITY), out_min(columns, INFINITY),
      out_max(columns, -INFINITY);
  auto col = [&](double x) { return std::clamp(int((x - view.min) * columns / view.span()), 0, columns - 1); };
  for (size_t i = 0; i < s.x.size(); ++i) {
    in_min[col(s.x[i])] = std::min(in_min[col(s.x[i])], s.y[i]);
    in_max[col(s.x[i])] = std::max(in_max[col(s.x[i])], s.y[i]);
  }
  for (const Point& p : out) {
    out_min[col(p.x)] = std::min(out_min[col(p.x)], p.y);
    out_max[col(p.x)] = std::max(out_max[col(p.x)], p.y);
  }
  int mismatches = 0;
  for (int c = 0; c < columns; ++c) mismatches += (in_min[c] != out_min[c]) + (in_max[c] != out_max[c]);
  CHECK(mismatches == 0);
  // The spikes survive.
  CHECK(*std::max_element(s.y.begin(), s.y.end()) ==
        std::max_element(out.begin(), out.end(), [](const Point& a, const Point& b) { return a.y < b.y; })->y);
  // Points stay in x order.
  CHECK(std::is_sorted(out.begin(), out.end(), [](const Point& a, const Point& b) { return a.x < b.x; }));
}

TEST_CASE("downsampling a zoomed view adds the neighbours outside each edge", "[studio][plot]") {
  const Series s = noisy_series(10'000, 3);
  std::vector<Point> out;
  const size_t in_view = downsample_minmax(s.x.data(), s.y.data(), s.x.size(), {2.0, 3.0}, 100, &out);
  CHECK(in_view == 1001);  // x = 2.000 .. 3.000
  REQUIRE(out.size() >= 2);
  CHECK(out.front().x < 2.0);
  CHECK(out.back().x > 3.0);
  CHECK(out.size() <= 2 * 100 + 2);
}

TEST_CASE("downsampling passes small inputs through unchanged", "[studio][plot]") {
  const std::vector<double> x{0, 1, 2, 3}, y{5, 1, 4, 2};
  std::vector<Point> out;
  downsample_minmax(x.data(), y.data(), x.size(), {0, 3}, 100, &out);
  REQUIRE(out.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK((out[i].x == x[i] && out[i].y == y[i]));
  out.clear();
  CHECK(downsample_minmax(x.data(), y.data(), 0, {0, 3}, 100, &out) == 0);
  CHECK(downsample_minmax(x.data(), y.data(), 4, {3, 3}, 100, &out) == 0);
  CHECK(out.empty());
}

TEST_CASE("ticks are round, ordered and inside the range", "[studio][plot]") {
  const auto t = nice_ticks({0, 97}, 5);
  REQUIRE(t.size() >= 4);
  CHECK(t.front() == 0);
  CHECK(t[1] - t[0] == 20);
  CHECK(t.back() <= 97);
  const auto b = nice_ticks({0, 80.0 * 1024 * 1024 * 1024}, 4, true);
  REQUIRE(b.size() >= 3);
  const double step = b[1] - b[0];
  CHECK(std::exp2(std::round(std::log2(step))) == step);  // a power of two of bytes
  CHECK(nice_ticks({5, 5}, 4).empty());
  // steps: whole numbers only, never a 2.5 printed as a second "2" (the throughput plots' x-axis)
  CHECK(nice_ticks({0, 6}, 12) == std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6});
  CHECK(nice_ticks({0, 6}, 12, false, true) == std::vector<double>{0, 1, 2, 3, 4, 5, 6});
  CHECK(nice_ticks({0, 600}, 6, false, true) == std::vector<double>{0, 100, 200, 300, 400, 500, 600});
}

TEST_CASE("values format with their units", "[studio][plot]") {
  CHECK(format_value(1.5 * 1024 * 1024 * 1024, Format::Bytes) == "1.50 GiB");
  CHECK(format_value(512.0 * 1024 * 1024, Format::Bytes) == "512 MiB");
  CHECK(format_value(100, Format::Bytes) == "100 B");
  CHECK(format_value(0.0123, Format::Seconds) == "12.3 ms");
  CHECK(format_value(2.5, Format::Seconds) == "2.50 s");
  CHECK(format_value(0.42, Format::Percent) == "42%");
  CHECK(format_value(3.0 * 1024 * 1024, Format::Tokens) == "3.00M");
  CHECK(format_value(12345, Format::Number) == "12.3k");
  CHECK(format_value(7, Format::Step) == "7");
}

TEST_CASE("the downsample cache recomputes only when data, view or width change", "[studio][plot]") {
  const Series s = noisy_series(100'000, 5);
  DownsampleCache cache;
  const Range view{0, s.x.back()};
  const auto& a = cache.get(s.x.data(), s.y.data(), s.x.size(), view, 500, 1);
  const size_t points = a.size();
  cache.get(s.x.data(), s.y.data(), s.x.size(), view, 500, 1);
  CHECK(cache.recomputed() == 1);
  cache.get(s.x.data(), s.y.data(), s.x.size(), view, 400, 1);  // narrower plot
  CHECK(cache.recomputed() == 2);
  cache.get(s.x.data(), s.y.data(), s.x.size(), {0, 10}, 400, 1);  // zoom
  CHECK(cache.recomputed() == 3);
  cache.get(s.x.data(), s.y.data(), s.x.size(), {0, 10}, 400, 2);  // new samples arrived
  CHECK(cache.recomputed() == 4);
  const auto& b = cache.get(s.x.data(), s.y.data(), s.x.size(), view, 500, 2);
  CHECK(b.size() == points);
}

TEST_CASE("plot: a bar label too wide for its slot splits at the space nearest its middle", "[studio][plot]") {
  using Lines = std::pair<std::string, std::string>;
  CHECK(two_line_label("offload optimizer") == Lines{"offload", "optimizer"});
  CHECK(two_line_label("untied ulysses") == Lines{"untied", "ulysses"});
  CHECK(two_line_label("a bb ccc dddd") == Lines{"a bb ccc", "dddd"});   // spaces at 1, 4, 8 of 13: 8 is nearest 6.5
  CHECK(two_line_label("checkpointing") == Lines{"checkpointing", ""});  // no space: one line
  CHECK(two_line_label("") == Lines{"", ""});
}
