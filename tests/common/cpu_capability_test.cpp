// The vector code ATen runs is the one ATEN_CPU_CAPABILITY asks for (the proof that the reruns
// under tests/cpu_rerun.sh exercised each instruction set), and oneDNN is off in every test,
// as in every run (use_portable_cpu_kernels). Built into engine_tests and parallel_tests.
// defines: test cases
#include <catch2/catch.hpp>

#include <ATen/Context.h>
#include <ATen/Version.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/parallel/devices.h"

namespace {
// From the first op of the executable, as every Trainer sets it: the tests that run the attention
// or rank threads without a Trainer allocate what a run allocates, on any x86 CPU.
const bool kPortableCpuKernels = [] {
  odyssey::use_portable_cpu_kernels();
  return true;
}();
}  // namespace

TEST_CASE("cpu capability: ATen dispatches to the capability ATEN_CPU_CAPABILITY names", "[equivalence]") {
  const std::string got = at::get_cpu_capability();
  std::printf("ATen dispatches to %s\n", got.c_str());
  const char* env = std::getenv("ATEN_CPU_CAPABILITY");
  if (env != nullptr && *env != '\0') {
    std::string want = env;
    std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::toupper(c); });
    CHECK(got == want);
  } else {
    CHECK((got == "DEFAULT" || got == "AVX2" || got == "AVX512" || got == "ZVECTOR" || got == "VSX" ||
           got == "SVE256" || got == "SVE128"));
  }
}

TEST_CASE("cpu kernels: oneDNN is off, so what a CPU step allocates does not depend on the CPU's ISA",
          "[equivalence][measure]") {
  // With oneDNN on, a bf16 matmul on any AVX-512 CPU allocates oneDNN's scratchpads through c10
  // (which the memory tracker counts) and ATen's flash kernel packs K and V on an AMX CPU: the
  // measurement tests would measure the CPU, not the engine. Under the ONEDNN_MAX_CPU_ISA reruns
  // (tests/cpu_rerun.sh onednn) the same tests pass at each ISA, which is only possible with it off.
  REQUIRE(kPortableCpuKernels);
  CHECK_FALSE(at::globalContext().userEnabledMkldnn());
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  std::printf("oneDNN: %s (ONEDNN_MAX_CPU_ISA=%s)\n", at::globalContext().userEnabledMkldnn() ? "on" : "off",
              isa ? isa : "unset");
}
