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
  // Digits and a dot, exactly (a double read 3.0000000000000001M as 3M): the whole part times the
  // suffix, plus fraction F / 10^n of it, which must be whole (1.3K is not). The suffix is 2^(10k),
  // so F x 2^(10k) / (2^n 5^n) is whole only if 5^n divides F and then 2^n divides (F / 5^n) 2^(10k).
  const size_t dot = digits.find('.');
  std::string fraction = digits.substr(dot + 1);
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  const auto factor = static_cast<int64_t>(multiplier);
  int64_t whole = 0;
  for (char c : digits.substr(0, dot))
    if (__builtin_mul_overflow(whole, int64_t{10}, &whole) || __builtin_add_overflow(whole, int64_t{c - '0'}, &whole))
      return std::nullopt;
  if (__builtin_mul_overflow(whole, factor, &whole)) return std::nullopt;
  // More than 30 digits after the last zero: 5^n cannot divide F (its last digit is not 0), or F
  // is odd (its last digit is 5) and 2^n exceeds the suffix's 2^30.
  const int n = static_cast<int>(fraction.size());
  if (n > 30) return std::nullopt;
  __int128 f = 0, five_to_n = 1;  // F < 10^30 and 5^30 < 10^21: both within 128 bits
  for (char c : fraction) f = f * 10 + (c - '0');
  for (int i = 0; i < n; ++i) five_to_n *= 5;
  if (f % five_to_n != 0) return std::nullopt;
  const auto part = static_cast<int64_t>(f / five_to_n) * factor;  // F / 5^n < 2^n <= 2^30: below 2^60
  if (part % (int64_t{1} << n) != 0) return std::nullopt;
  if (__builtin_add_overflow(whole, part >> n, &whole)) return std::nullopt;
  return whole;
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
