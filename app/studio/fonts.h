// The UI font and style at a given scale: DejaVu Sans (Debian fonts-dejavu-core) when installed,
// else ImGui's built-in font rasterised at the scaled size; spacing scaled to match.
// defines: setup_fonts_and_style, kFontPaths
#pragma once

#include <string>

namespace odyssey::studio {

/// Rebuilds the font atlas and the style for `scale` (call between frames; the renderer's font
/// texture must be recreated afterwards). Returns a description of the font used.
std::string setup_fonts_and_style(float scale);

}  // namespace odyssey::studio
