// Saturating byte arithmetic: the planner's ceiling on byte counts and the products and sums that
// stop at it, shared by the planner and the layout rules whose bytes it charges.
// defines: kPlanBytesLimit, sat_mul, sat_product, sat_add
//
// No LibTorch.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace odyssey {

/// The planner's byte ceiling: 4 EiB, millions of times any machine's memory. Every byte count
/// is computed with saturating arithmetic that stops here, so no product or sum of an absurd (but
/// validated) config overflows int64; a plan that reaches it is beyond range and never fits.
constexpr int64_t kPlanBytesLimit = int64_t{1} << 62;
/// a x b, or kPlanBytesLimit when the product passes it (operands are non-negative).
inline int64_t sat_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) || out > kPlanBytesLimit ? kPlanBytesLimit : out;
}
/// The product of every factor, saturated as sat_mul.
inline int64_t sat_product(std::initializer_list<int64_t> factors) {
  int64_t out = 1;
  for (int64_t f : factors) out = sat_mul(out, f);
  return out;
}
/// a + b, or kPlanBytesLimit when the sum passes it (operands are non-negative).
inline int64_t sat_add(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) || out > kPlanBytesLimit ? kPlanBytesLimit : out;
}

}  // namespace odyssey
