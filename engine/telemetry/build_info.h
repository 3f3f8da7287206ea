// What this odyssey-engine was built with, for `odyssey version` and each run's summary.json: the
// LibTorch and the CUDA it carries, and whether Odyssey's own CUDA kernels are linked.
// defines: EngineBuild, engine_build, write_engine_build_json, engine_build_text
#pragma once

#include <cstdint>
#include <string>

namespace odyssey {

class JsonWriter;

/// The engine's build, and the CUDA devices this process sees.
struct EngineBuild {
  std::string odyssey_version;        ///< the project's, "0.1.0"
  std::string libtorch_version;       ///< "2.11.0"
  int64_t libtorch_cuda_version = 0;  ///< the CUDA runtime LibTorch carries, as CUDART_VERSION (13000); 0: CPU-only
  bool cuda_kernels = false;          ///< kernels/ linked: CUDA tensors take them, else LibTorch's operators
  std::string cuda_architectures;     ///< the kernels' CUDA_ARCHITECTURES ("90"); "" without them
  int cuda_devices = 0;               ///< devices this process sees (0: none, or a CPU-only LibTorch)
};

/// This process's build. Starts CUDA as every entry point does (prepare_cuda) to count devices.
EngineBuild engine_build();

/// {"odyssey", "libtorch", "libtorch_cuda" ("13.0", null when CPU-only), "cuda_kernels",
///  "cuda_architectures" (null without the kernels), "cuda_devices"} as one value of `w`.
void write_engine_build_json(JsonWriter& w, const EngineBuild& build);

/// Three lines for people: the version, LibTorch with its CUDA and the devices, the kernels.
std::string engine_build_text(const EngineBuild& build);

}  // namespace odyssey
