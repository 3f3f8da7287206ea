// studio_png_check: the GUI smoke test's second half. Reads the screenshot odyssey-studio wrote and
// checks its size and that it is not blank: many distinct colours, no colour covering most of it,
// and content in most cells of a 4x4 grid (the panels were drawn). Exit 0 ok, 1 failed, 2 usage.
// defines: main
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "app/studio/image_io.h"

int main(int argc, char** argv) {
  using namespace odyssey::studio;
  if (argc != 4) {
    std::fprintf(stderr, "usage: studio_png_check FILE.png WIDTH HEIGHT\n");
    return 2;
  }
  const std::string path = argv[1];
  int want_w = 0, want_h = 0;
  for (const auto& [text, out] : {std::pair{argv[2], &want_w}, std::pair{argv[3], &want_h}}) {
    const char* end = text + std::strlen(text);
    if (auto [p, ec] = std::from_chars(text, end, *out); ec != std::errc() || p != end || *out < 1) {
      std::fprintf(stderr, "studio_png_check: %s: WIDTH and HEIGHT are whole numbers of pixels from 1\n", text);
      return 2;
    }
  }
  Image image;
  std::string error;
  if (!read_png(path, &image, &error)) {
    std::fprintf(stderr, "studio_png_check: %s\n", error.c_str());
    return 1;
  }
  const ImageStats st = image_stats(image, 4, 8);
  std::printf(
      "studio_png_check: %s is %dx%d, %zu distinct colours, dominant colour %.1f%%, %d/%d grid cells with content\n",
      path.c_str(), image.width, image.height, st.distinct_colors, st.dominant_fraction * 100, st.busy_cells, st.cells);
  bool ok = true;
  if (image.width != want_w || image.height != want_h) {
    std::fprintf(stderr, "studio_png_check: size %dx%d, expected %dx%d\n", image.width, image.height, want_w, want_h);
    ok = false;
  }
  if (st.distinct_colors < 200) {
    std::fprintf(stderr, "studio_png_check: only %zu distinct colours (need 200: text, plots and bars)\n",
                 st.distinct_colors);
    ok = false;
  }
  if (st.dominant_fraction > 0.85) {
    std::fprintf(stderr, "studio_png_check: one colour covers %.1f%% of the image (blank window?)\n",
                 st.dominant_fraction * 100);
    ok = false;
  }
  if (st.busy_cells < 12) {
    std::fprintf(stderr, "studio_png_check: only %d of 16 regions have content (need 12: the panels)\n", st.busy_cells);
    ok = false;
  }
  return ok ? 0 : 1;
}
