// CUDA start-up: the allocator settings rule (the user's environment wins, else expandable
// segments), cuBLAS's workspace rule, and device resolution agreeing with what prepare_cuda found;
// on a GPU ([.cuda]) a rank's cuBLAS workspaces made before its first step.
// defines: test cases [cuda_runtime]
#include <catch2/catch.hpp>

#include <cstdlib>

#include "../common/engine_test_util.h"
#include "engine/layout/planned_buffers.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/memory_tracker.h"

using namespace odyssey;

TEST_CASE("cuda runtime: the allocator runs on expandable segments unless the user chose settings",
          "[engine][cuda_runtime]") {
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

TEST_CASE("cuda runtime: cuBLAS's workspaces are Odyssey's 4096 KiB x 8 unless the user chose",
          "[engine][cuda_runtime]") {
  BlasWorkspaceSetting s = choose_blas_workspace_config(nullptr);
  CHECK(s.config == ":4096:8");
  CHECK(BlasWorkspaces::kBytesEach == 4096 * 1024 * 8);  // the planner's term, from the same constants
  CHECK_FALSE(s.from_user);
  s = choose_blas_workspace_config(":16:8");
  CHECK(s.config == ":16:8");
  CHECK(s.from_user);
  // prepare_cuda applies the same rule to this process's environment, and on a GPU leaves the
  // setting there for PyTorch to read
  const CudaSetup& setup = prepare_cuda();
  const char* env = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  if (setup.blas_workspaces.from_user) {
    REQUIRE(env != nullptr);
    CHECK(setup.blas_workspaces.config == env);
  } else {
    CHECK(setup.blas_workspaces.config == ":4096:8");
    if (setup.available) CHECK((env != nullptr && setup.blas_workspaces.config == env));
  }
}

TEST_CASE("cuda: a rank's cuBLAS workspaces are made before its first step, and its GEMMs then make none", "[.cuda]") {
  const at::Device gpu = odyssey::test::test_gpu();
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.set_cuda_device(0, gpu.index());
  const int64_t each = prepare_blas_workspaces(gpu.index(), 0);
  INFO("CUBLAS_WORKSPACE_CONFIG=" << prepare_cuda().blas_workspaces.config);
  CHECK(each == BlasWorkspaces::kBytesEach);  // Odyssey's setting reached PyTorch before its first GEMM
  const int64_t before = tracker.snapshot(0).device_bytes;
  {
    // a forward GEMM on this thread and its backward GEMMs on autograd's device thread: both
    // threads' workspaces exist already, so every byte is freed with the tensors
    const at::Tensor a = at::randn({64, 64}, at::TensorOptions().device(gpu)).requires_grad_(true);  // [64, 64]
    const at::Tensor y = at::mm(a, a);
    const auto grads = torch::autograd::grad({y.sum()}, {a});
    CHECK(grads.at(0).sizes() == a.sizes());
  }
  CHECK(tracker.snapshot(0).device_bytes == before);
}
