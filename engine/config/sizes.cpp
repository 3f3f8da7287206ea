// Size literal parsing and formatting shared by presets, --set overrides and every printed table.
#include "engine/config/sizes.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace odyssey {

std::optional<int64_t> parse_size(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  double multiplier = 1;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K':
      multiplier = 1024.0;
      break;
    case 'M':
      multiplier = 1024.0 * 1024.0;
      break;
    case 'G':
      multiplier = 1024.0 * 1024.0 * 1024.0;
      break;
    default:
      break;
  }
  if (multiplier != 1) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  bool seen_dot = false;
  for (char c : text) {
    if (c == '.' && !seen_dot && multiplier != 1) {
      seen_dot = true;
      continue;
    }
    if (c == '_') continue;  // 131_072, as TOML allows
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  std::string digits;
  for (char c : text)
    if (c != '_') digits.push_back(c);
  if (digits.empty() || digits == ".") return std::nullopt;
  if (!seen_dot) {
    // Whole digits: exact in int64 (a double would round 9007199254740993 to ...992 unsaid), and
    // refused past INT64_MAX, suffix included.
    const auto factor = static_cast<int64_t>(multiplier);
    int64_t value = 0;
    for (char c : digits)
      if (__builtin_mul_overflow(value, int64_t{10}, &value) || __builtin_add_overflow(value, int64_t{c - '0'}, &value))
        return std::nullopt;
    if (__builtin_mul_overflow(value, factor, &value)) return std::nullopt;
    return value;
  }
  const double value = std::stod(digits) * multiplier;
  if (value > 9.0e18 || value != std::floor(value)) return std::nullopt;  // 1.3K is not whole
  return static_cast<int64_t>(value);
}

std::string format_size(int64_t count) {
  if (count > 0) {
    if (count % (int64_t{1} << 30) == 0) return std::to_string(count >> 30) + "G";
    if (count % (int64_t{1} << 20) == 0) return std::to_string(count >> 20) + "M";
    if (count % (int64_t{1} << 10) == 0) return std::to_string(count >> 10) + "K";
  }
  return std::to_string(count);
}

std::string format_gib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  return buf;
}

}  // namespace odyssey
