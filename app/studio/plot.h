// The studio's one plotting module (Debian has no ImPlot): axes with nice ticks, lines reduced to
// min/max per pixel column so a million samples draw smoothly, bands, markers, stacked bars, a
// hover readout and wheel-zoom / drag-pan, all on ImGui draw lists.
// defines: plot::Range, plot::View, plot::Point, downsample_minmax, nice_ticks, format_value,
// plot::Plot, plot::stacked_bars, plot::two_line_label, plot::legend_item, plot::dashed_line
#pragma once

#include <imgui.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace odyssey::studio::plot {

struct Range {
  double min = 0, max = 0;
  double span() const { return max - min; }
  bool valid() const { return max > min; }
  /// Widens the range to hold v (an empty range {0,0} takes v's value first when `fresh`).
  void include(double v);
  static Range empty();  ///< min = +inf, max = -inf: include() from nothing
};

/// Pan/zoom state of a plot's x axis, kept by the caller between frames.
struct View {
  Range x;
  bool follow = true;  ///< fit the data each frame; zoom or pan turns it off, double-click back on
};

struct Point {
  double x, y;
};

/// Reduces points with ascending x to the min and max of each of `columns` equal slices of
/// `x_view` (in their original order), plus the nearest point outside each edge so the line
/// continues off-screen. Spikes survive because extremes are never averaged away. Appends to *out
/// and returns the number of input points inside the view. O(log n + points in view).
size_t downsample_minmax(const double* xs, const double* ys, size_t n, Range x_view, int columns,
                         std::vector<Point>* out);

/// Remembers one series' downsampled points: frames that change neither the data (same pointers,
/// size and `generation`) nor the view or width reuse them, so a paused million-sample view costs
/// nothing per frame and a training one pays only when new samples arrive.
class DownsampleCache {
 public:
  const std::vector<Point>& get(const double* xs, const double* ys, size_t n, Range view, int columns,
                                uint64_t generation);
  uint64_t recomputed() const { return recomputed_; }

 private:
  const double* xs_ = nullptr;
  const double* ys_ = nullptr;
  size_t n_ = 0;
  Range view_;
  int columns_ = 0;
  uint64_t generation_ = 0;
  bool valid_ = false;
  std::vector<Point> points_;
  uint64_t recomputed_ = 0;
};

/// About `target` round tick values (1, 2, 5 x 10^k; powers of two for bytes) covering r; `whole`:
/// whole numbers only (steps: a tick at 2.5 printed as "2" beside the 2 made "0 1 2 2 3 4 4").
std::vector<double> nice_ticks(Range r, int target, bool bytes = false, bool whole = false);

/// A bar's label on two lines: split at the space nearest its middle ("offload optimizer" gives
/// "offload" and "optimizer"); the second part is "" where it has no space.
std::pair<std::string, std::string> two_line_label(const std::string& label);

enum class Format { Number, Bytes, Seconds, Percent, Tokens, Step };
/// "1.50 GiB", "350 ms", "42%", "3M", "1.2e+04".
std::string format_value(double v, Format f);

/// Draws a dashed segment.
void dashed_line(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float thickness, float dash = 6.f);
/// A coloured square and its label, on the current line (call SameLine between items).
void legend_item(ImU32 color, const char* label);

/// Legend items on as many lines as the window's width needs.
void legend(const std::vector<std::pair<ImU32, std::string>>& items);

/// One plot area. Construct (lays out, handles zoom/pan), downsample against x() and columns(),
/// call set_y(), draw, then end() (axes, ticks, crosshair).
class Plot {
 public:
  /// `size` <= 0 in a dimension fills the available space. `data_x` is the full data extent the
  /// view fits when following. `view` may be null (no interaction).
  Plot(const char* id, ImVec2 size, View* view, Range data_x, Format x_format, Format y_format);
  Plot(const Plot&) = delete;
  Plot& operator=(const Plot&) = delete;

  const Range& x() const { return x_; }
  const Range& y() const { return y_; }
  /// Pixel columns of the plotting area (for downsample_minmax).
  int columns() const;
  /// Tick labels along x show x - origin (e.g. time since the selected step began).
  void set_x_origin(double origin) { x_origin_ = origin; }
  /// Sets the y range (padded 5% at the top; `from_zero` keeps 0 as the floor).
  void set_y(Range y, bool from_zero = true);

  ImVec2 to_screen(double x, double y) const;
  bool hovered() const { return hovered_; }
  double mouse_x() const { return mouse_x_; }
  double mouse_y() const { return mouse_y_; }
  ImDrawList* draw_list() const { return dl_; }
  ImVec2 min() const { return p0_; }
  ImVec2 max() const { return p1_; }

  /// Full-height band between x0 and x1 (phases).
  void band(double x0, double x1, ImU32 col);
  /// Polyline through already downsampled points.
  void polyline(const std::vector<Point>& pts, ImU32 col, float thickness = 1.5f);
  /// Downsamples and draws in one go (uses an internal buffer).
  void line(const double* xs, const double* ys, size_t n, ImU32 col, float thickness = 1.5f);
  /// Horizontal segment (planned values, per-phase peaks).
  void hsegment(double x0, double x1, double y, ImU32 col, float thickness = 1.5f, bool dashed = false);
  /// Horizontal line across the plot with a label at its right end (capacity).
  void hline(double y, ImU32 col, const char* label, bool dashed = true);
  /// Vertical line with a label at its top (toggle changes).
  void vline(double x, ImU32 col, const char* label);
  /// A diamond at (x, y) with a label beside it (the peak).
  void marker(double x, double y, ImU32 col, const char* label);
  /// Axes, ticks, grid and the hover crosshair. Call once, last.
  void end();

 private:
  ImDrawList* dl_ = nullptr;
  ImVec2 p0_, p1_;  // plotting area (inside the axis margins)
  Range x_, y_;
  double x_origin_ = 0;
  Format xf_, yf_;
  bool hovered_ = false;
  double mouse_x_ = 0, mouse_y_ = 0;
  int vline_row_ = 0;  // staggers vline labels over three rows
  std::vector<Point> scratch_;
};

/// One segment of a stacked bar.
struct Segment {
  double value = 0;
  ImU32 color = 0;
};
/// The bar and segment under the mouse (-1 when none).
struct BarHit {
  int bar = -1;
  int segment = -1;
};
/// Stacked bars, one per label, against an optional capacity line (capacity <= 0: none).
/// Horizontal bars list labels on the left; vertical bars put them underneath.
BarHit stacked_bars(const char* id, ImVec2 size, const std::vector<std::vector<Segment>>& bars,
                    const std::vector<std::string>& labels, double capacity, const char* capacity_label,
                    Format value_format, bool horizontal);

}  // namespace odyssey::studio::plot
