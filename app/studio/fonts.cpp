// Font and style setup. The font is looked up in assets/fonts/ first (a TTF dropped there wins),
// then at the Debian path; ImGui's built-in font is the fallback so the studio never fails over
// a missing font. defines: setup_fonts_and_style
#include "app/studio/fonts.h"

#include <imgui.h>

#include <cmath>
#include <filesystem>

namespace odyssey::studio {

namespace {
constexpr float kBasePixels = 15.0f;
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
}  // namespace

std::string setup_fonts_and_style(float scale) {
  ImGuiIO& io = ImGui::GetIO();
  io.Fonts->Clear();
  const float pixels = std::round(kBasePixels * scale);
  std::string used;
  for (const char* path : kFontPaths) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    ImFontConfig cfg;
    cfg.OversampleH = 2;
    if (io.Fonts->AddFontFromFileTTF(path, pixels, &cfg)) {
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
