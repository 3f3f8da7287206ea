// PNG in and out for screenshots (stb_image / stb_image_write from Debian's libstb) and the checks
// the GUI smoke test runs on a rendered image: size, colour count, and that every region of the
// window has content. defines: Image, write_png, read_png, ImageStats, image_stats
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace odyssey::studio {

/// 8-bit RGBA, rows top to bottom.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgba;
};

/// Writes `image` as PNG. False with *error naming the file.
bool write_png(const std::string& path, const Image& image, std::string* error);
/// Reads a PNG (any channel count, converted to RGBA). False with *error naming the file.
bool read_png(const std::string& path, Image* image, std::string* error);
/// Flips rows in place (OpenGL reads bottom-up).
void flip_rows(Image& image);

struct ImageStats {
  size_t distinct_colors = 0;    ///< distinct RGB values over the image
  double dominant_fraction = 0;  ///< share of the most common colour
  int cells = 0;                 ///< grid cells examined
  int busy_cells = 0;            ///< cells with at least `min_cell_colors` distinct colours
};
/// Colour statistics over the image and a `grid` x `grid` split of it.
ImageStats image_stats(const Image& image, int grid = 4, size_t min_cell_colors = 8);

}  // namespace odyssey::studio
