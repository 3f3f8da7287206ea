// Size literals for tokens and bytes: "512K", "3M", "1G" (powers of 1024), plain integers, and
// their formatting back ("3M", "3.00 GiB"). defines: parse_size, format_size, format_gib.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace odyssey {

/// Parses "4096", "131_072", "512K", "3M", "1.5M", "2G" (K/M/G = 1024^1..3, case-insensitive).
/// Returns nullopt unless the text is a whole non-negative count ("1.3K", "3MB", "-1" are not).
/// Whole digits (with a suffix or not) are exact up to INT64_MAX and refused past it.
std::optional<int64_t> parse_size(std::string_view text);

/// Formats a count with the largest exact suffix: 3145728 -> "3M", 524288 -> "512K", 1000 -> "1000".
std::string format_size(int64_t count);

/// Formats bytes as GiB with two decimals: "64.60 GiB".
std::string format_gib(double bytes);

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace odyssey
