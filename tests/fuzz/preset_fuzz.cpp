// libFuzzer target for the preset loader: any bytes must load without crashing; a preset that
// loads cleanly must save and load back to the same config. Built by scripts/fuzz.sh (clang).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/config/preset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const odyssey::LoadedPreset loaded = odyssey::load_preset_text(text, "fuzz.toml");
  for (const auto& issue : loaded.issues) {
    const std::string message = issue.format();
    if (message.rfind("fuzz.toml", 0) != 0) std::abort();  // every issue names the file
  }
  if (loaded.ok()) {
    const std::string saved = odyssey::preset_to_toml(loaded.config);
    const odyssey::LoadedPreset back = odyssey::load_preset_text(saved, "saved.toml");
    if (!back.ok() || !(back.config == loaded.config)) std::abort();  // round trip is exact
  }
  return 0;
}
