// Font and style setup. The font is looked up in assets/fonts/ first (a TTF dropped there wins),
// then at the Debian path; ImGui's built-in font is the fallback so the studio never fails over
// a missing or broken font (each is checked before ImGui, which aborts on one, sees it).
// defines: setup_fonts_and_style
#include "app/studio/fonts.h"

#include <imgui.h>
#include <stb_truetype.h>

#include <cmath>
#include <cstdio>

#include "engine/util/files.h"

namespace odyssey::studio {

namespace {
constexpr float kBasePixels = 15.0f;
constexpr int64_t kMaxFontBytes = int64_t{64} << 20;  // DejaVuSans is 0.7 MB; CJK fonts reach 20 MB
/// The bytes of the font the atlas was last built from: ImGui reads them while it builds and keeps
/// pointers into them, so they live until the next setup.
std::string g_font_bytes;
const char* const kFontPaths[] = {
    "assets/fonts/ui.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",  // Debian fonts-dejavu-core
};

void apply_style(float scale) {
  ImGuiStyle style;
  ImGui::StyleColorsDark(&style);
  style.WindowRounding = 4.f;
  style.FrameRounding = 3.f;
  style.GrabRounding = 3.f;
  style.WindowPadding = {8.f, 7.f};
  style.FramePadding = {6.f, 3.f};
  style.ItemSpacing = {7.f, 5.f};
  style.WindowTitleAlign = {0.02f, 0.5f};
  style.Colors[ImGuiCol_WindowBg] = {0.095f, 0.10f, 0.12f, 1.f};
  style.Colors[ImGuiCol_TitleBgActive] = {0.16f, 0.25f, 0.42f, 1.f};
  style.Colors[ImGuiCol_TitleBg] = {0.12f, 0.15f, 0.22f, 1.f};
  style.Colors[ImGuiCol_Header] = {0.20f, 0.30f, 0.48f, 0.55f};
  style.ScaleAllSizes(scale);
  ImGui::GetStyle() = style;
}
/// The bytes of a font at `path` ImGui can build from, or "" with *why: a regular file (no
/// directory; a FIFO never waited on) of at most kMaxFontBytes whose first font stb_truetype opens
/// and which has a glyph for 'A'. ImGui asserts, and so aborts the studio, on anything less.
std::string usable_font(const char* path, std::string* why) {
  std::string bytes;
  try {
    bytes = read_file_bounded(path, kMaxFontBytes, "font");
  } catch (const std::exception& e) {
    *why = e.what();
    return "";
  }
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  stbtt_fontinfo info;
  const int offset = bytes.size() >= 12 ? stbtt_GetFontOffsetForIndex(data, 0) : -1;
  if (offset < 0 || !stbtt_InitFont(&info, data, offset)) {
    *why = std::string(path) + ": not a TrueType or OpenType font (" + std::to_string(bytes.size()) + " bytes)";
    return "";
  }
  if (stbtt_FindGlyphIndex(&info, 'A') == 0) {
    *why = std::string(path) + ": a font without Latin letters (no glyph for 'A')";
    return "";
  }
  return bytes;
}

}  // namespace

std::string setup_fonts_and_style(float scale) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  const float pixels = std::round(kBasePixels * scale);
  std::string used;
  g_font_bytes.clear();
  for (const char* path : kFontPaths) {
    if (!path_exists(path)) continue;
    std::string why;
    std::string bytes = usable_font(path, &why);
    if (bytes.empty()) {  // said once a setup (a scale change sets up again), then the next font
      std::fprintf(stderr, "odyssey-studio: font %s skipped: %s\n", path, why.c_str());
      continue;
    }
    g_font_bytes = std::move(bytes);
    ImFontConfig cfg;
    cfg.OversampleH = 2;
    cfg.FontDataOwnedByAtlas = false;  // g_font_bytes keeps them
    if (io.Fonts->AddFontFromMemoryTTF(g_font_bytes.data(), static_cast<int>(g_font_bytes.size()), pixels, &cfg)) {
      used = std::string(path) + " at " + std::to_string(static_cast<int>(pixels)) + " px";
      break;
    }
  }
  if (used.empty()) {
    ImFontConfig cfg;
    cfg.SizePixels = std::round(13.0f * scale);
    io.Fonts->AddFontDefault(&cfg);
    used = "ImGui built-in font at " + std::to_string(static_cast<int>(cfg.SizePixels)) + " px";
  }
  io.Fonts->Build();
  apply_style(scale);
  return used;
}

}  // namespace odyssey::studio
