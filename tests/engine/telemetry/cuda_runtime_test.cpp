// CUDA start-up without a GPU in sight: the allocator settings rule (the user's environment wins,
// else expandable segments), and device resolution agreeing with what prepare_cuda found.
// defines: test cases [cuda_runtime]
#include <catch2/catch.hpp>

#include "../engine_test_util.h"
#include "engine/telemetry/cuda_runtime.h"

using namespace odyssey;

TEST_CASE("cuda runtime: the allocator runs on expandable segments unless the user chose settings", "[engine][cuda_runtime]") {
  CudaSetup s = choose_allocator_settings(nullptr, nullptr);
  CHECK(s.allocator_settings == "expandable_segments:True");
  CHECK_FALSE(s.settings_from_user);
  s = choose_allocator_settings(nullptr, "max_split_size_mb:512");
  CHECK(s.allocator_settings == "max_split_size_mb:512");
  CHECK(s.settings_from_user);
  // PyTorch reads PYTORCH_CUDA_ALLOC_CONF first.
  s = choose_allocator_settings("expandable_segments:False", "max_split_size_mb:512");
  CHECK(s.allocator_settings == "expandable_segments:False");
  CHECK(s.settings_from_user);
}

TEST_CASE("cuda runtime: device resolution follows what prepare_cuda found", "[engine][cuda_runtime]") {
  const CudaSetup& setup = prepare_cuda();
  CHECK(&prepare_cuda() == &setup);  // once per process
  CHECK(setup.available == (setup.device_count > 0));
  CHECK(resolve_device(DeviceKind::Cpu, 0).is_cpu());
  CHECK(resolve_device(DeviceKind::Auto, 0).is_cuda() == setup.available);
  if (setup.available) {
    CHECK(resolve_device(DeviceKind::Cuda, 3).index() == 3 % setup.device_count);
  } else {
    CHECK_THROWS_WITH(resolve_device(DeviceKind::Cuda, 0), Catch::Contains("no CUDA device is available"));
    CHECK_THROWS_WITH(odyssey::test::test_gpu(), Catch::Contains("needs a CUDA device"));
  }
}
