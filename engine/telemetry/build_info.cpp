// engine_build: the versions compiled into odyssey-engine (the project's from CMake, LibTorch's
// from its headers, CUDA's from LibTorch's CUDA hooks) and whether kernels/ is linked.
// defines: engine_build, write_engine_build_json, engine_build_text
#include "engine/telemetry/build_info.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#include "engine/telemetry/cuda_runtime.h"
#include "engine/util/json.h"

#ifndef ODYSSEY_VERSION
#error "ODYSSEY_VERSION (the project's version) is defined for this file by engine/CMakeLists.txt"
#endif

namespace odyssey {
namespace {

/// 13000 -> "13.0", as CUDA spells its versions.
std::string cuda_version_text(int64_t version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace

EngineBuild engine_build() {
  EngineBuild build;
  build.odyssey_version = ODYSSEY_VERSION;
  build.libtorch_version = TORCH_VERSION;
  try {  // a LibTorch without its CUDA library answers with an error, not a version
    build.libtorch_cuda_version = at::detail::getCUDAHooks().versionCUDART();
  } catch (const std::exception&) {
    build.libtorch_cuda_version = 0;
  }
#ifdef ODYSSEY_WITH_CUDA
  build.cuda_kernels = true;
  build.cuda_architectures = ODYSSEY_KERNEL_CUDA_ARCHITECTURES;
#endif
  build.cuda_devices = prepare_cuda().device_count;
  return build;
}

void write_engine_build_json(JsonWriter& w, const EngineBuild& build) {
  w.begin_object().key("odyssey").value(build.odyssey_version).key("libtorch").value(build.libtorch_version);
  w.key("libtorch_cuda");
  build.libtorch_cuda_version > 0 ? w.value(cuda_version_text(build.libtorch_cuda_version)) : w.null();
  w.key("cuda_kernels").value(build.cuda_kernels).key("cuda_architectures");
  build.cuda_kernels ? w.value(build.cuda_architectures) : w.null();
  w.key("cuda_devices").value(build.cuda_devices).end_object();
}

std::string engine_build_text(const EngineBuild& build) {
  std::string text = "odyssey " + build.odyssey_version + "\nLibTorch " + build.libtorch_version;
  if (build.libtorch_cuda_version > 0)
    text += " with CUDA " + cuda_version_text(build.libtorch_cuda_version) + ", " + std::to_string(build.cuda_devices) +
            (build.cuda_devices == 1 ? " CUDA device" : " CUDA devices") + " visible";
  else
    text += ", CPU only (no CUDA in this LibTorch)";
  text += "\nOdyssey's CUDA kernels: ";
  text += build.cuda_kernels
              ? "linked (CUDA architectures " + build.cuda_architectures + ")"
              : "not linked (built without nvcc, with ODYSSEY_CUDA=OFF, or with nvcc of another CUDA major than "
                "LibTorch's): CUDA tensors run LibTorch's operators, slower than the planner's figures";
  return text + "\n";
}

}  // namespace odyssey
