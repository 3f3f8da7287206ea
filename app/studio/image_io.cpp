// PNG I/O through libstb (its implementation is compiled into libstb, so no *_IMPLEMENTATION
// define here) and colour statistics for the screenshot checker. defines: see image_io.h
#include "app/studio/image_io.h"

#include <stb_image.h>
#include <stb_image_write.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "engine/util/files.h"

namespace odyssey::studio {

namespace {
constexpr int64_t kMaxPngBytes = int64_t{256} << 20;  // an 8192x8192 RGBA screenshot, uncompressed, is 256 MiB
}  // namespace

bool write_png(const std::string& path, const Image& image, std::string* error) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgba.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 4) {
    if (error)
      *error = path + ": no image to write (" + std::to_string(image.width) + "x" + std::to_string(image.height) + ")";
    return false;
  }
  stbi_write_png_compression_level = 9;  // screenshots are committed: smallest stb can do
  if (!stbi_write_png(path.c_str(), image.width, image.height, 4, image.rgba.data(), image.width * 4)) {
    if (error) *error = path + ": cannot write the PNG (does the folder exist?)";
    return false;
  }
  return true;
}

bool read_png(const std::string& path, Image* image, std::string* error) {
  std::string bytes;  // a regular file, read whole (a FIFO is refused, never waited on)
  try {
    bytes = read_file_bounded(path, kMaxPngBytes, "PNG");
  } catch (const std::exception& e) {
    if (error) *error = path + ": cannot read the image (" + e.what() + ")";
    return false;
  }
  int w = 0, h = 0, channels = 0;
  unsigned char* data = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(bytes.data()),
                                              static_cast<int>(bytes.size()), &w, &h, &channels, 4);
  if (!data) {
    if (error)
      *error = path + ": cannot read the image: " + (stbi_failure_reason() ? stbi_failure_reason() : "unknown");
    return false;
  }
  image->width = w;
  image->height = h;
  image->rgba.assign(data, data + static_cast<size_t>(w) * h * 4);
  stbi_image_free(data);
  return true;
}

void flip_rows(Image& image) {
  const size_t row = static_cast<size_t>(image.width) * 4;
  std::vector<uint8_t> tmp(row);
  for (int y = 0; y < image.height / 2; ++y) {
    uint8_t* a = image.rgba.data() + row * y;
    uint8_t* b = image.rgba.data() + row * (image.height - 1 - y);
    std::memcpy(tmp.data(), a, row);
    std::memcpy(a, b, row);
    std::memcpy(b, tmp.data(), row);
  }
}

ImageStats image_stats(const Image& image, int grid, size_t min_cell_colors) {
  ImageStats st;
  if (image.width <= 0 || image.height <= 0) return st;
  auto rgb = [&](int x, int y) {
    const uint8_t* p = image.rgba.data() + (static_cast<size_t>(y) * image.width + x) * 4;
    return (uint32_t(p[0]) << 16) | (uint32_t(p[1]) << 8) | p[2];
  };
  std::unordered_map<uint32_t, size_t> counts;
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x) ++counts[rgb(x, y)];
  st.distinct_colors = counts.size();
  size_t top = 0;
  for (const auto& [c, n] : counts) top = std::max(top, n);
  st.dominant_fraction = double(top) / (double(image.width) * image.height);
  for (int gy = 0; gy < grid; ++gy)
    for (int gx = 0; gx < grid; ++gx) {
      std::unordered_set<uint32_t> cell;
      for (int y = gy * image.height / grid; y < (gy + 1) * image.height / grid; ++y)
        for (int x = gx * image.width / grid; x < (gx + 1) * image.width / grid; ++x) cell.insert(rgb(x, y));
      ++st.cells;
      if (cell.size() >= min_cell_colors) ++st.busy_cells;
    }
  return st;
}

}  // namespace odyssey::studio
