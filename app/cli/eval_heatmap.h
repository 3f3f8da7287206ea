// The needle grid of `odyssey eval` as a picture: one square cell per (context length, depth), its
// colour the cell's exact-match accuracy (red 0 -> yellow 0.5 -> green 1), encoded as PNG through
// Debian's libstb. No LibTorch here; the colour ramp is inline, so the studio's Eval panel draws
// the same colours. defines: kHeatmapCell, accuracy_rgb, HeatmapImage, render_heatmap, encode_png
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace odyssey::cli {

/// Pixels a side of one cell.
constexpr int kHeatmapCell = 24;

/// A cell's colour: red (0) -> yellow (0.5) -> green (1), `accuracy` clamped to [0, 1].
inline void accuracy_rgb(double accuracy, uint8_t* rgb) {
  const double a = std::clamp(accuracy, 0.0, 1.0);
  const double lo[3] = {215, 48, 39}, mid[3] = {254, 224, 139}, hi[3] = {26, 152, 80};
  const double* from = a < 0.5 ? lo : mid;
  const double* to = a < 0.5 ? mid : hi;
  const double t = a < 0.5 ? a / 0.5 : (a - 0.5) / 0.5;
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(std::lround(from[c] + (to[c] - from[c]) * t));
}

/// 8-bit RGBA, rows top to bottom.
struct HeatmapImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgba;
};

/// `rows` x `cols` cells (rows: context lengths, shortest on top; columns: depths 0% left to 100%
/// right), `accuracy` row-major in [0, 1]: an image of cols x kHeatmapCell by rows x kHeatmapCell
/// pixels, each cell framed by a one-pixel dark line.
HeatmapImage render_heatmap(int rows, int cols, const std::vector<double>& accuracy);

/// The PNG file's bytes, or nullopt when this build has no PNG encoder (no libstb).
std::optional<std::string> encode_png(const HeatmapImage& image);

}  // namespace odyssey::cli
