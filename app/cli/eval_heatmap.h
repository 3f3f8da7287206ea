// The needle grid of `odyssey eval` as a picture: one square cell per (context length, depth), its
// colour the cell's exact-match accuracy (red 0 -> yellow 0.5 -> green 1), encoded as PNG through
// Debian's libstb. No LibTorch here. defines: kHeatmapCell, HeatmapImage, render_heatmap, encode_png
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace odyssey::cli {

/// Pixels a side of one cell.
constexpr int kHeatmapCell = 24;

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
