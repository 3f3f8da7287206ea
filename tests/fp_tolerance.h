// Equivalence tolerances derived from fp32 arithmetic, shared by every suite that compares two
// orders of the same computation (memory techniques, rank layouts, kernels against references).
// No LibTorch. defines: kFp32Roundoff, kRoundingLambda, reordering_tolerance
#pragma once

#include <cmath>
#include <cstdint>

namespace odyssey::test {

/// fp32's unit roundoff u = 2^-24 (about 6.0e-8).
constexpr double kFp32Roundoff = 0x1p-24;

/// How many standard deviations the rounding model allows. Rounding errors behave as independent
/// mean-zero variables (Higham & Mary, "A new approach to probabilistic rounding error analysis",
/// SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4): a computation whose result passes through n
/// rounded additions and multiplications on its longest dependency chain deviates from the exact
/// value by at most lambda * sqrt(n) * u * (its scale), except with probability
/// 2 exp(-lambda^2 / 2). lambda = 8 makes that 2.5e-14 per value: below 1e-6 for all ~1e8 values
/// the suites compare, on any CPU, whichever order its vector width sums in.
constexpr double kRoundingLambda = 8.0;

/// The relative tolerance between two fp32 evaluations of one computation that round in
/// different orders (other tiles, other ranks' partial sums, other vector widths): each side is
/// within lambda * sqrt(n) * u * kappa of the exact result, so they are within twice that of
/// each other. `chain` is n, the rounded operations on the longest dependency chain of one
/// compared value (the reduction lengths summed along it); `kappa` is the ratio of the
/// magnitudes summed to the scale compared against (1 when every term has the same sign).
/// Usage: CHECK(rel <= reordering_tolerance(/*chain=*/1232, /*kappa=*/2));
inline double reordering_tolerance(int64_t chain, double kappa) {
  return 2.0 * kRoundingLambda * std::sqrt(static_cast<double>(chain)) * kFp32Roundoff * kappa;
}

}  // namespace odyssey::test
