// The needle heatmap's pixels and its PNG encoding (see eval_heatmap.h).
// defines: render_heatmap, encode_png
#include "app/cli/eval_heatmap.h"

#if ODYSSEY_HAVE_STB
#include <stb_image_write.h>  // the implementation is compiled into libstb
#endif

namespace odyssey::cli {

HeatmapImage render_heatmap(int rows, int cols, const std::vector<double>& accuracy) {
  HeatmapImage image;
  image.width = cols * kHeatmapCell;
  image.height = rows * kHeatmapCell;
  image.rgba.assign(static_cast<size_t>(image.width) * image.height * 4, 255);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      uint8_t rgb[3];
      accuracy_rgb(accuracy.at(static_cast<size_t>(r * cols + c)), rgb);
      for (int y = 0; y < kHeatmapCell; ++y)
        for (int x = 0; x < kHeatmapCell; ++x) {
          const bool frame = x == 0 || y == 0 || x == kHeatmapCell - 1 || y == kHeatmapCell - 1;
          uint8_t* p =
              &image.rgba[(static_cast<size_t>(r * kHeatmapCell + y) * image.width + c * kHeatmapCell + x) * 4];
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
  if (!stbi_write_png_to_func(append_png_bytes, &bytes, image.width, image.height, 4, image.rgba.data(),
                              image.width * 4))
    return std::nullopt;
  return bytes;
}
#else
std::optional<std::string> encode_png(const HeatmapImage&) { return std::nullopt; }
#endif

}  // namespace odyssey::cli
