// Screenshot PNG I/O and the checker's statistics: a blank image is recognised as blank, a busy
// one as busy, and a written PNG reads back pixel for pixel.
#include <catch2/catch.hpp>

#include <filesystem>

#include "app/studio/image_io.h"

using namespace odyssey::studio;

namespace {
Image make(int w, int h, bool busy) {
  Image im{w, h, std::vector<uint8_t>(size_t(w) * h * 4, 255)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &im.rgba[(size_t(y) * w + x) * 4];
      p[0] = busy ? uint8_t(x * 7 + y) : 30;
      p[1] = busy ? uint8_t(y * 3) : 30;
      p[2] = busy ? uint8_t((x ^ y) & 0xff) : 30;
    }
  return im;
}
}  // namespace

TEST_CASE("a blank screenshot fails the content checks", "[studio][image]") {
  const ImageStats st = image_stats(make(64, 40, false));
  CHECK(st.distinct_colors == 1);
  CHECK(st.dominant_fraction == 1.0);
  CHECK(st.busy_cells == 0);
  CHECK(st.cells == 16);
}

TEST_CASE("a busy screenshot passes them and survives a PNG round trip", "[studio][image]") {
  const Image im = make(64, 40, true);
  const ImageStats st = image_stats(im);
  CHECK(st.distinct_colors > 200);
  CHECK(st.busy_cells == 16);
  const std::string path = (std::filesystem::temp_directory_path() / "odyssey_studio_image_test.png").string();
  std::string err;
  REQUIRE(write_png(path, im, &err));
  Image back;
  REQUIRE(read_png(path, &back, &err));
  CHECK(back.width == 64);
  CHECK(back.height == 40);
  CHECK(back.rgba == im.rgba);
  std::filesystem::remove(path);
  CHECK_FALSE(read_png(path, &back, &err));
  CHECK(err.find(path + ": cannot read the image") == 0);
}

TEST_CASE("flip_rows turns a bottom-up read into top-down", "[studio][image]") {
  Image im = make(3, 2, true);
  const std::vector<uint8_t> top(im.rgba.begin(), im.rgba.begin() + 12);
  flip_rows(im);
  CHECK(std::vector<uint8_t>(im.rgba.begin() + 12, im.rgba.end()) == top);
  Image empty;
  std::string err;
  CHECK_FALSE(write_png("/tmp/never.png", empty, &err));
}
