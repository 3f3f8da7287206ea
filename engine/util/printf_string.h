// printf into a std::string of exactly the formatted length (no fixed buffer, no truncation): the
// one formatting helper of the planner's formula texts and the CLI's plan tables. defines: printf_string
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace odyssey {

std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
inline std::string printf_string(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int length = std::vsnprintf(nullptr, 0, format, args);  // the first pass measures
  va_end(args);
  std::string out(length > 0 ? static_cast<size_t>(length) : 0, '\0');
  if (length > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);  // + 1: the terminator
  va_end(again);
  return out;
}

}  // namespace odyssey
