// The needle heatmap's pixels and its PNG encoding (see eval_heatmap.h).
// defines: render_heatmap, encode_png
#include "app/cli/eval_heatmap.h"

#include <algorithm>
#include <cmath>

#if ODYSSEY_HAVE_STB
#include <stb_image_write.h>  // the implementation is compiled into libstb
#endif

namespace odyssey::cli {

namespace {

/// red (0) -> yellow (0.5) -> green (1)
void accuracy_color(double a, uint8_t* rgb) {
  a = std::clamp(a, 0.0, 1.0);
  const double lo[3] = {215, 48, 39}, mid[3] = {254, 224, 139}, hi[3] = {26, 152, 80};
  const double* from = a < 0.5 ? lo : mid;
  const double* to = a < 0.5 ? mid : hi;
  const double t = a < 0.5 ? a / 0.5 : (a - 0.5) / 0.5;
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(std::lround(from[c] + (to[c] - from[c]) * t));
}

}  // namespace

HeatmapImage render_heatmap(int rows, int cols, const std::vector<double>& accuracy) {
  HeatmapImage image;
  image.width = cols * kHeatmapCell;
  image.height = rows * kHeatmapCell;
  image.rgba.assign(static_cast<size_t>(image.width) * image.height * 4, 255);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      uint8_t rgb[3];
      accuracy_color(accuracy.at(static_cast<size_t>(r * cols + c)), rgb);
      for (int y = 0; y < kHeatmapCell; ++y)
        for (int x = 0; x < kHeatmapCell; ++x) {
          const bool frame = x == 0 || y == 0 || x == kHeatmapCell - 1 || y == kHeatmapCell - 1;
          uint8_t* p = &image.rgba[(static_cast<size_t>(r * kHeatmapCell + y) * image.width + c * kHeatmapCell + x) * 4];
          for (int k = 0; k < 3; ++k) p[k] = frame ? 40 : rgb[k];
          p[3] = 255;
        }
    }
  return image;
}

#if ODYSSEY_HAVE_STB
namespace {
extern "C" void append_png_bytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}
}  // namespace

std::optional<std::string> encode_png(const HeatmapImage& image) {
  std::string bytes;
  if (!stbi_write_png_to_func(append_png_bytes, &bytes, image.width, image.height, 4, image.rgba.data(), image.width * 4))
    return std::nullopt;
  return bytes;
}
#else
std::optional<std::string> encode_png(const HeatmapImage&) { return std::nullopt; }
#endif

}  // namespace odyssey::cli
