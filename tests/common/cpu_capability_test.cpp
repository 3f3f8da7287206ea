// The vector code ATen runs is the one ATEN_CPU_CAPABILITY asks for: the proof that the
// equivalence suites' runs under tests/cpu_capability.sh really exercised each instruction set.
// Built into engine_tests and parallel_tests (the executables those runs use). defines: test cases
#include <catch2/catch.hpp>

#include <ATen/Version.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

TEST_CASE("cpu capability: ATen dispatches to the capability ATEN_CPU_CAPABILITY names", "[equivalence]") {
  const std::string got = at::get_cpu_capability();
  std::printf("ATen dispatches to %s\n", got.c_str());
  const char* env = std::getenv("ATEN_CPU_CAPABILITY");
  if (env != nullptr && *env != '\0') {
    std::string want = env;
    std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::toupper(c); });
    CHECK(got == want);
  } else {
    CHECK((got == "DEFAULT" || got == "AVX2" || got == "AVX512" || got == "ZVECTOR" || got == "VSX" || got == "SVE256" ||
           got == "SVE128"));
  }
}
