// The plotting module: min/max downsampling, tick choice and value formatting (pure, unit-tested),
// then the draw-list code for plots and stacked bars.
// [SECTION] pure helpers  [SECTION] Plot  [SECTION] stacked bars
// defines: see plot.h
#include "app/studio/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace odyssey::studio::plot {

// [SECTION] pure helpers ---------------------------------------------------------------------------

void Range::include(double v) {
  if (!std::isfinite(v)) return;
  min = std::min(min, v);
  max = std::max(max, v);
}

Range Range::empty() { return {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}; }

size_t downsample_minmax(const double* xs, const double* ys, size_t n, Range view, int columns,
                         std::vector<Point>* out) {
  if (n == 0 || columns <= 0 || !view.valid()) return 0;
  const size_t lo = static_cast<size_t>(std::lower_bound(xs, xs + n, view.min) - xs);
  const size_t hi = static_cast<size_t>(std::upper_bound(xs + lo, xs + n, view.max) - xs);
  if (lo > 0) out->push_back({xs[lo - 1], ys[lo - 1]});
  if (hi - lo <= 2 * static_cast<size_t>(columns)) {
    for (size_t i = lo; i < hi; ++i) out->push_back({xs[i], ys[i]});
  } else {
    // Column c covers [min + c*w, min + (c+1)*w): find its end by binary search, then one tight
    // min/max pass over its points (no per-point division or clamping).
    const double w = view.span() / columns;
    size_t i = lo;
    for (int c = 0; c < columns && i < hi; ++c) {
      const double end_x = c + 1 == columns ? view.max : view.min + w * (c + 1);
      size_t j = c + 1 == columns ? hi : static_cast<size_t>(std::lower_bound(xs + i, xs + hi, end_x) - xs);
      if (j == i) continue;
      size_t imin = i, imax = i;
      double vmin = ys[i], vmax = ys[i];
      for (size_t k = i + 1; k < j; ++k) {
        const double v = ys[k];
        if (v < vmin) {
          vmin = v;
          imin = k;
        }
        if (v > vmax) {
          vmax = v;
          imax = k;
        }
      }
      const size_t first = std::min(imin, imax), second = std::max(imin, imax);
      out->push_back({xs[first], ys[first]});
      if (second != first) out->push_back({xs[second], ys[second]});
      i = j;
    }
  }
  if (hi < n) out->push_back({xs[hi], ys[hi]});
  return hi - lo;
}

const std::vector<Point>& DownsampleCache::get(const double* xs, const double* ys, size_t n, Range view, int columns,
                                               uint64_t generation) {
  const bool same = xs == xs_ && ys == ys_ && n == n_ && view.min == view_.min && view.max == view_.max &&
                    columns == columns_ && generation == generation_ && valid_;
  if (!same) {
    points_.clear();
    downsample_minmax(xs, ys, n, view, columns, &points_);
    xs_ = xs;
    ys_ = ys;
    n_ = n;
    view_ = view;
    columns_ = columns;
    generation_ = generation;
    valid_ = true;
    ++recomputed_;
  }
  return points_;
}

std::vector<double> nice_ticks(Range r, int target, bool bytes, bool whole) {
  std::vector<double> out;
  if (!r.valid() || target < 1) return out;
  const double raw = r.span() / target;
  double step;
  if (bytes && raw >= 1) {
    step = std::exp2(std::ceil(std::log2(raw)));
  } else {
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double f = raw / mag;
    step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }
  if (whole) step = std::max(step, 1.0);
  for (double v = std::ceil(r.min / step) * step; v <= r.max + step * 1e-9; v += step) {
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    if (out.size() > 1000) break;
  }
  return out;
}

namespace {
std::string printf_string(const char* fmt, double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}
/// Two decimals under 10, one under 100, none above.
const char* digits_for(double v) {
  v = std::abs(v);
  return v < 10 ? "%.2f%s" : v < 100 ? "%.1f%s" : "%.0f%s";
}
}  // namespace

std::string format_value(double v, Format f) {
  const double a = std::abs(v);
  switch (f) {
    case Format::Bytes: {
      static const char* units[] = {" B", " KiB", " MiB", " GiB", " TiB", " PiB"};
      int u = 0;
      double x = v;
      while (std::abs(x) >= 1024 && u < 5) {
        x /= 1024;
        ++u;
      }
      return u == 0 ? printf_string("%.0f%s", x, units[0]) : printf_string(digits_for(x), x, units[u]);
    }
    case Format::Seconds:
      if (a == 0) return "0 s";
      if (a < 1e-3) return printf_string("%.0f%s", v * 1e6, " us");
      if (a < 1) return printf_string(digits_for(v * 1e3), v * 1e3, " ms");
      return printf_string(digits_for(v), v, " s");
    case Format::Percent:
      return printf_string(a * 100 < 10 ? "%.1f%s" : "%.0f%s", v * 100, "%");
    case Format::Tokens:
      if (a >= 1024.0 * 1024) return printf_string(digits_for(v / (1024.0 * 1024)), v / (1024.0 * 1024), "M");
      if (a >= 1024) return printf_string(digits_for(v / 1024), v / 1024, "K");
      return printf_string("%.0f%s", v, "");
    case Format::Step:
      return printf_string("%.0f%s", v, "");
    case Format::Number:
      if (a >= 1e6) return printf_string(digits_for(v / 1e6), v / 1e6, "M");
      if (a >= 1e4) return printf_string(digits_for(v / 1e3), v / 1e3, "k");
      return printf_string(a >= 100 || v == std::floor(v) ? "%.0f%s" : "%.3g%s", v, "");
  }
  return "?";
}

void dashed_line(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float thickness, float dash) {
  const float dx = b.x - a.x, dy = b.y - a.y;
  const float len = std::sqrt(dx * dx + dy * dy);
  if (len < 1e-3f) return;
  const float ux = dx / len, uy = dy / len;
  for (float s = 0; s < len; s += 2 * dash) {
    const float e = std::min(s + dash, len);
    dl->AddLine({a.x + ux * s, a.y + uy * s}, {a.x + ux * e, a.y + uy * e}, col, thickness);
  }
}

void legend_item(ImU32 color, const char* label) {
  const float h = ImGui::GetTextLineHeight();
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::GetWindowDrawList()->AddRectFilled({p.x, p.y + h * 0.2f}, {p.x + h * 0.6f, p.y + h * 0.8f}, color, 2.f);
  ImGui::Dummy({h * 0.75f, h});
  ImGui::SameLine(0, 4);
  ImGui::TextUnformatted(label);
}

void legend(const std::vector<std::pair<ImU32, std::string>>& items) {
  const float font = ImGui::GetFontSize();
  const float gap = font * 0.8f;
  const float line_w = ImGui::GetContentRegionAvail().x;  // the cursor is at a line start
  float used = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const float w = ImGui::CalcTextSize(items[i].second.c_str()).x + ImGui::GetTextLineHeight() * 0.75f + 4;
    if (i > 0 && used + gap + w <= line_w) {
      ImGui::SameLine(0, gap);
      used += gap;
    } else {
      used = 0;
    }
    used += w;
    legend_item(items[i].first, items[i].second.c_str());
  }
}

// [SECTION] Plot ------------------------------------------------------------------------------------

namespace {
constexpr ImU32 kPlotBg = IM_COL32(22, 24, 30, 255);
constexpr ImU32 kGrid = IM_COL32(255, 255, 255, 22);
constexpr ImU32 kAxisText = IM_COL32(190, 195, 205, 255);
constexpr ImU32 kBorder = IM_COL32(255, 255, 255, 60);
/// A widget's size: a non-positive side takes the available region, then at least the minimum.
ImVec2 fit_size(ImVec2 size, float min_w, float min_h) {
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (size.x <= 0) size.x = avail.x;
  if (size.y <= 0) size.y = avail.y;
  return {std::max(size.x, min_w), std::max(size.y, min_h)};
}

}  // namespace

Plot::Plot(const char* id, ImVec2 size, View* view, Range data_x, Format x_format, Format y_format)
    : xf_(x_format), yf_(y_format) {
  const float font = ImGui::GetFontSize();
  size = fit_size(size, font * 8, font * 5);
  const ImVec2 pos = ImGui::GetCursorScreenPos();
  p0_ = {pos.x + font * 4.6f, pos.y + font * 0.5f};
  p1_ = {pos.x + size.x - font * 0.8f, pos.y + size.y - font * 1.6f};
  ImGui::InvisibleButton(id, size);
  hovered_ = ImGui::IsItemHovered();
  const bool active = ImGui::IsItemActive();
  dl_ = ImGui::GetWindowDrawList();

  if (!data_x.valid()) data_x = {data_x.min, data_x.min + 1};
  if (view) {
    if (view->follow || !view->x.valid()) view->x = data_x;
    const ImGuiIO& io = ImGui::GetIO();
    const float w = p1_.x - p0_.x;
    if (hovered_ && io.MouseWheel != 0) {
      const double f = std::pow(0.85, io.MouseWheel);
      const double mx = view->x.min + (io.MousePos.x - p0_.x) / w * view->x.span();
      view->x = {mx - (mx - view->x.min) * f, mx + (view->x.max - mx) * f};
      view->follow = false;
    }
    if (active && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 1.f)) {
      const double dx = -io.MouseDelta.x / w * view->x.span();
      view->x = {view->x.min + dx, view->x.max + dx};
      view->follow = false;
    }
    if (hovered_ && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
      view->follow = true;
      view->x = data_x;
    }
    x_ = view->x;
  } else {
    x_ = data_x;
  }
  mouse_x_ = x_.min + (ImGui::GetIO().MousePos.x - p0_.x) / std::max(1.f, p1_.x - p0_.x) * x_.span();
  dl_->AddRectFilled(p0_, p1_, kPlotBg);
  y_ = {0, 1};
}

int Plot::columns() const { return std::max(1, static_cast<int>(p1_.x - p0_.x)); }

void Plot::set_y(Range y, bool from_zero) {
  if (!(y.min <= y.max) || !std::isfinite(y.min) || !std::isfinite(y.max)) y = {0, 1};
  if (from_zero) y.min = std::min(0.0, y.min);
  if (!y.valid()) y.max = y.min + (y.min == 0 ? 1 : std::abs(y.min) * 0.1);
  y.max += y.span() * 0.06;
  y_ = y;
  mouse_y_ = y_.min + (p1_.y - ImGui::GetIO().MousePos.y) / std::max(1.f, p1_.y - p0_.y) * y_.span();
  const float font = ImGui::GetFontSize();
  for (double t : nice_ticks(y_, std::max(2, static_cast<int>((p1_.y - p0_.y) / (font * 2.4f))), yf_ == Format::Bytes))
    dl_->AddLine({p0_.x, to_screen(0, t).y}, {p1_.x, to_screen(0, t).y}, kGrid);
  dl_->PushClipRect(p0_, p1_, true);
}

ImVec2 Plot::to_screen(double x, double y) const {
  const double fx = x_.span() > 0 ? (x - x_.min) / x_.span() : 0;
  const double fy = y_.span() > 0 ? (y - y_.min) / y_.span() : 0;
  return {static_cast<float>(p0_.x + fx * (p1_.x - p0_.x)), static_cast<float>(p1_.y - fy * (p1_.y - p0_.y))};
}

void Plot::band(double x0, double x1, ImU32 col) {
  const float a = std::max(p0_.x, to_screen(x0, 0).x), b = std::min(p1_.x, to_screen(x1, 0).x);
  if (b >= a) dl_->AddRectFilled({a, p0_.y}, {std::max(b, a + 1.f), p1_.y}, col);
}

void Plot::polyline(const std::vector<Point>& pts, ImU32 col, float thickness) {
  if (pts.empty()) return;
  std::vector<ImVec2> screen;
  screen.reserve(pts.size());
  for (const Point& p : pts) screen.push_back(to_screen(p.x, p.y));
  if (screen.size() == 1) {
    dl_->AddCircleFilled(screen[0], thickness + 1, col);
    return;
  }
  dl_->AddPolyline(screen.data(), static_cast<int>(screen.size()), col, 0, thickness);
}

void Plot::line(const double* xs, const double* ys, size_t n, ImU32 col, float thickness) {
  scratch_.clear();
  downsample_minmax(xs, ys, n, x_, columns(), &scratch_);
  polyline(scratch_, col, thickness);
}

void Plot::hsegment(double x0, double x1, double y, ImU32 col, float thickness, bool dashed) {
  const ImVec2 a = to_screen(x0, y), b = to_screen(x1, y);
  if (dashed)
    dashed_line(dl_, a, b, col, thickness, 5.f);
  else
    dl_->AddLine(a, b, col, thickness);
}

void Plot::hline(double y, ImU32 col, const char* label, bool dashed) {
  const ImVec2 a = to_screen(x_.min, y), b = to_screen(x_.max, y);
  if (dashed)
    dashed_line(dl_, a, b, col, 1.5f);
  else
    dl_->AddLine(a, b, col, 1.5f);
  if (label && *label) {
    const ImVec2 ts = ImGui::CalcTextSize(label);
    const float ty = a.y - ts.y - 1 < p0_.y ? a.y + 2 : a.y - ts.y - 1;  // below the line at the top edge
    dl_->AddText({b.x - ts.x - 4, ty}, col, label);
  }
}

void Plot::vline(double x, ImU32 col, const char* label) {
  const ImVec2 a = to_screen(x, y_.max);
  dl_->AddLine({a.x, p0_.y}, {a.x, p1_.y}, col, 1.5f);
  if (label && *label) {
    const float h = ImGui::GetTextLineHeight();
    const ImVec2 ts = ImGui::CalcTextSize(label);
    float x = a.x + 3;
    if (x + ts.x + 4 > p1_.x) x = a.x - 3 - ts.x - 4;  // near the right edge: label on the left
    const ImVec2 at{std::max(x, p0_.x), p0_.y + 2 + h * static_cast<float>(vline_row_++ % 3)};
    dl_->AddRectFilled(at, {at.x + ts.x + 4, at.y + ts.y}, IM_COL32(0, 0, 0, 150), 2.f);
    dl_->AddText({at.x + 2, at.y}, col, label);
  }
}

void Plot::marker(double x, double y, ImU32 col, const char* label) {
  const ImVec2 c = to_screen(x, y);
  const float r = ImGui::GetFontSize() * 0.38f;
  dl_->AddQuadFilled({c.x, c.y - r}, {c.x + r, c.y}, {c.x, c.y + r}, {c.x - r, c.y}, col);
  dl_->AddQuad({c.x, c.y - r}, {c.x + r, c.y}, {c.x, c.y + r}, {c.x - r, c.y}, IM_COL32(0, 0, 0, 200), 1.f);
  if (label && *label) {
    const ImVec2 ts = ImGui::CalcTextSize(label);
    float tx = c.x + r + 4;
    if (tx + ts.x > p1_.x) tx = c.x - r - 4 - ts.x;  // keep the label inside the plot
    const float ty = std::max(p0_.y, c.y - ts.y - 2);
    dl_->AddRectFilled({tx - 2, ty}, {tx + ts.x + 2, ty + ts.y}, IM_COL32(0, 0, 0, 170), 2.f);
    dl_->AddText({tx, ty}, col, label);
  }
}

void Plot::end() {
  dl_->PopClipRect();
  const float font = ImGui::GetFontSize();
  dl_->AddRect(p0_, p1_, kBorder);
  for (double t :
       nice_ticks(y_, std::max(2, static_cast<int>((p1_.y - p0_.y) / (font * 2.4f))), yf_ == Format::Bytes)) {
    const std::string s = format_value(t, yf_);
    const ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    const float y = to_screen(0, t).y;
    dl_->AddText({p0_.x - ts.x - 5, y - ts.y * 0.5f}, kAxisText, s.c_str());
  }
  const Range shifted{x_.min - x_origin_, x_.max - x_origin_};
  for (double rel :
       nice_ticks(shifted, std::max(2, static_cast<int>((p1_.x - p0_.x) / (font * 6.f))), false, xf_ == Format::Step)) {
    const double t = rel + x_origin_;
    const std::string s = format_value(rel, xf_);
    const ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    const float x = to_screen(t, 0).x;
    dl_->AddLine({x, p1_.y}, {x, p1_.y + 4}, kBorder);
    dl_->AddText({std::clamp(x - ts.x * 0.5f, p0_.x - font, p1_.x - ts.x), p1_.y + 3}, kAxisText, s.c_str());
  }
  if (hovered_) {
    const float mx = ImGui::GetIO().MousePos.x;
    dl_->AddLine({mx, p0_.y}, {mx, p1_.y}, IM_COL32(255, 255, 255, 90));
  }
}

// [SECTION] stacked bars ----------------------------------------------------------------------------

std::pair<std::string, std::string> two_line_label(const std::string& label) {
  size_t split = std::string::npos;
  const double middle = static_cast<double>(label.size()) / 2;
  for (size_t at = label.find(' '); at != std::string::npos; at = label.find(' ', at + 1))
    if (split == std::string::npos ||
        std::abs(static_cast<double>(at) - middle) < std::abs(static_cast<double>(split) - middle))
      split = at;
  if (split == std::string::npos) return {label, ""};
  return {label.substr(0, split), label.substr(split + 1)};
}

BarHit stacked_bars(const char* id, ImVec2 size, const std::vector<std::vector<Segment>>& bars,
                    const std::vector<std::string>& labels, double capacity, const char* capacity_label,
                    Format value_format, bool horizontal) {
  BarHit hit;
  const float font = ImGui::GetFontSize();
  size = fit_size(size, font * 10, font * 4);
  const ImVec2 pos = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton(id, size);
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const size_t n = bars.size();

  double max_total = 0;
  for (const auto& bar : bars) {
    double total = 0;
    for (const auto& s : bar) total += std::max(0.0, s.value);
    max_total = std::max(max_total, total);
  }
  // A capacity far above every bar would squash them to nothing: scale to the bars and say where
  // the capacity is instead.
  const bool capacity_on_scale = capacity > 0 && (max_total <= 0 || capacity <= max_total * 8);
  double top = capacity_on_scale ? std::max(capacity, max_total) : max_total;
  // Bars far over the capacity (an OOM rung at 20 TiB next to 60 GiB ones) are cut at 2.5x the
  // capacity, so the bars that matter stay readable; the cut bars carry their total on top.
  const double clip = capacity_on_scale ? capacity * 2.5 : std::numeric_limits<double>::infinity();
  top = std::min(top, clip);
  if (top <= 0) top = 1;
  top *= 1.08;
  const bool bytes = value_format == Format::Bytes;
  const auto ticks = nice_ticks({0, top}, 4, bytes);

  // Plot area: value axis along x (horizontal) or y (vertical).
  float label_w = 0;
  for (const auto& l : labels) label_w = std::max(label_w, ImGui::CalcTextSize(l.c_str()).x);
  ImVec2 p0, p1;
  // A strip above the bars for the capacity label (horizontal bars, or when it is off scale).
  const bool has_label = capacity > 0 && capacity_label && *capacity_label;
  const float top_strip = has_label && (horizontal || !capacity_on_scale) ? font * 1.2f : 0.f;
  // Vertical bars: a label wider than its slot ("offload optimizer") is written on two lines,
  // split at its middle space, with a strip below the bars tall enough for them.
  std::vector<std::pair<std::string, std::string>> label_lines;  // each label, and its second line or ""
  bool two_lines = false;
  const float slot_w = (size.x - font * 5.1f) / static_cast<float>(std::max<size_t>(n, 1));
  // a line still wider than the slot ("checkpointing" alone) is cut with a "." (the bar's tooltip
  // names it whole)
  auto fit_line = [&](std::string line) {
    if (horizontal || ImGui::CalcTextSize(line.c_str()).x <= slot_w - 2) return line;
    while (line.size() > 1 && ImGui::CalcTextSize((line + ".").c_str()).x > slot_w - 2) line.pop_back();
    return line + ".";
  };
  for (const std::string& l : labels) {
    const bool split = !horizontal && ImGui::CalcTextSize(l.c_str()).x > slot_w - 2;
    auto [first, second] = split ? two_line_label(l) : std::make_pair(l, std::string());
    label_lines.emplace_back(fit_line(first), second.empty() ? second : fit_line(second));
    two_lines = two_lines || !label_lines.back().second.empty();
  }
  const float bottom_strip = font * (two_lines ? 2.6f : 1.5f);
  if (horizontal) {
    p0 = {pos.x + label_w + font * 0.6f, pos.y + font * 0.3f + top_strip};
    p1 = {pos.x + size.x - font * 1.2f, pos.y + size.y - font * 1.5f};
  } else {
    p0 = {pos.x + font * 4.6f, pos.y + font * 0.5f + top_strip};
    p1 = {pos.x + size.x - font * 0.5f, pos.y + size.y - bottom_strip};
  }
  dl->AddRectFilled(p0, p1, kPlotBg);
  auto value_px = [&](double v) {
    const float f = static_cast<float>(std::min(v, top * 1.04) / top);
    return horizontal ? p0.x + f * (p1.x - p0.x) : p1.y - f * (p1.y - p0.y);
  };
  for (double t : ticks) {
    const std::string s = format_value(t, value_format);
    const ImVec2 ts = ImGui::CalcTextSize(s.c_str());
    const float v = value_px(t);
    if (horizontal) {
      dl->AddLine({v, p0.y}, {v, p1.y}, kGrid);
      dl->AddText({std::min(v - ts.x * 0.5f, p1.x - ts.x * 0.5f), p1.y + 2}, kAxisText, s.c_str());
    } else {
      dl->AddLine({p0.x, v}, {p1.x, v}, kGrid);
      dl->AddText({p0.x - ts.x - 5, v - ts.y * 0.5f}, kAxisText, s.c_str());
    }
  }
  const float slot = (horizontal ? p1.y - p0.y : p1.x - p0.x) / std::max<size_t>(n, 1);
  const float thick = std::min(slot * 0.7f, font * (horizontal ? 1.6f : 4.f));
  for (size_t b = 0; b < n; ++b) {
    const float c = (horizontal ? p0.y : p0.x) + slot * (b + 0.5f);
    double acc = 0;
    for (size_t s = 0; s < bars[b].size(); ++s) {
      const double v = std::max(0.0, bars[b][s].value);
      if (v <= 0) continue;
      const float a = value_px(acc), e = value_px(acc + v);
      acc += v;
      ImVec2 r0, r1;
      if (horizontal) {
        r0 = {a, c - thick / 2};
        r1 = {std::max(e, a + 1), c + thick / 2};
      } else {
        r0 = {c - thick / 2, std::min(e, a - 1)};
        r1 = {c + thick / 2, a};
      }
      dl->AddRectFilled(r0, r1, bars[b][s].color);
      if (hovered && mouse.x >= r0.x && mouse.x <= r1.x && mouse.y >= r0.y && mouse.y <= r1.y) {
        hit = {static_cast<int>(b), static_cast<int>(s)};
        dl->AddRect(r0, r1, IM_COL32(255, 255, 255, 230), 0, 0, 2.f);
      }
    }
    if (acc > top * 1.04) {  // cut: say how tall it really is
      const std::string total = format_value(acc, value_format);
      const ImVec2 ts = ImGui::CalcTextSize(total.c_str());
      const ImVec2 at = horizontal ? ImVec2{p1.x - ts.x - 2, c - ts.y * 0.5f} : ImVec2{c - ts.x * 0.5f, p0.y + 1};
      dl->AddRectFilled({at.x - 2, at.y}, {at.x + ts.x + 2, at.y + ts.y}, IM_COL32(0, 0, 0, 190), 2.f);
      dl->AddText(at, IM_COL32(255, 255, 255, 240), total.c_str());
    }
    if (hovered && hit.bar < 0) {  // hovering the bar's slot but no segment: report the bar
      const float m = horizontal ? mouse.y : mouse.x;
      if (m >= c - slot / 2 && m < c + slot / 2) hit.bar = static_cast<int>(b);
    }
    if (b < labels.size()) {
      const auto& [first, second] = label_lines[b];
      const ImVec2 ts = ImGui::CalcTextSize(first.c_str());
      if (horizontal) {
        dl->AddText({p0.x - ts.x - font * 0.3f, c - ts.y * 0.5f}, kAxisText, first.c_str());
      } else {
        dl->PushClipRect({c - slot / 2, p1.y}, {c + slot / 2, pos.y + size.y}, true);
        dl->AddText({std::max(c - ts.x * 0.5f, c - slot / 2 + 1), p1.y + 2}, kAxisText, first.c_str());
        if (!second.empty()) {
          const float w = ImGui::CalcTextSize(second.c_str()).x;
          dl->AddText({std::max(c - w * 0.5f, c - slot / 2 + 1), p1.y + 2 + font * 1.1f}, kAxisText, second.c_str());
        }
        dl->PopClipRect();
      }
    }
  }
  if (capacity > 0 && !capacity_on_scale && capacity_label && *capacity_label) {
    const std::string text = std::string(capacity_label) + " (off scale)";
    const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
    dl->AddText({p1.x - ts.x, p0.y - top_strip}, IM_COL32(240, 80, 80, 255), text.c_str());
  }
  if (capacity_on_scale) {
    const float v = value_px(capacity);
    const ImU32 red = IM_COL32(240, 80, 80, 255);
    if (horizontal) {
      dashed_line(dl, {v, p0.y}, {v, p1.y}, red, 2.f);
    } else {
      dashed_line(dl, {p0.x, v}, {p1.x, v}, red, 2.f);
    }
    if (capacity_label && *capacity_label) {
      const ImVec2 ts = ImGui::CalcTextSize(capacity_label);
      const ImVec2 at = horizontal ? ImVec2{std::clamp(v - ts.x * 0.5f, p0.x, p1.x - ts.x), p0.y - top_strip}
                                   : ImVec2{p1.x - ts.x - 3, v - ts.y - 1};
      dl->AddRectFilled(at, {at.x + ts.x, at.y + ts.y}, IM_COL32(0, 0, 0, 160));
      dl->AddText(at, red, capacity_label);
    }
  }
  dl->AddRect(p0, p1, kBorder);
  return hit;
}

}  // namespace odyssey::studio::plot
