// Kineto over one step for odyssey train --kernel-profile (see kernel_profile.h): the same trace
// format as torch.profiler's export_chrome_trace, so one summariser reads both systems' profiles.
// defines: start_kernel_profile, save_kernel_profile
#include "engine/telemetry/kernel_profile.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace odyssey {
namespace {

namespace prof = torch::profiler::impl;

std::atomic<bool> g_recording{false};
int g_cuda_device = -1;  // the device whose queue save_kernel_profile waits for; -1: a CPU run

prof::ProfilerConfig kineto_config() { return prof::ProfilerConfig(prof::ProfilerState::KINETO); }

std::set<prof::ActivityType> activities(int cuda_device) {
  std::set<prof::ActivityType> kinds{prof::ActivityType::CPU};
  if (cuda_device >= 0) kinds.insert(prof::ActivityType::CUDA);
  return kinds;
}

}  // namespace

void start_kernel_profile(int cuda_device) {
  if (g_recording.exchange(true)) throw std::runtime_error("--kernel-profile: a profile is already recording");
  g_cuda_device = cuda_device;
  try {
    torch::autograd::profiler::prepareProfiler(kineto_config(), activities(cuda_device));
    torch::autograd::profiler::enableProfiler(kineto_config(), activities(cuda_device));
  } catch (const std::exception& e) {  // c10::Error: e.g. a LibTorch built without Kineto
    g_recording = false;
    throw std::runtime_error(std::string("--kernel-profile: the profiler did not start: ") + e.what());
  }
}

namespace {

/// Whether the file's last character other than whitespace closes a JSON object, as a whole
/// Chrome trace's does: Kineto reports no failed write, and a trace cut short ends elsewhere.
bool ends_as_json_object(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = in.tellg();
  if (!in || size <= 0) return false;
  const std::streamoff tail = std::min<std::streamoff>(size, 256);
  std::string end(static_cast<size_t>(tail), '\0');
  in.seekg(size - tail);
  in.read(end.data(), tail);
  const size_t last = end.find_last_not_of(" \t\r\n");
  return in && last != std::string::npos && end[last] == '}';
}

}  // namespace

void save_kernel_profile(const std::string& path) {
  if (!g_recording.load()) throw std::runtime_error("--kernel-profile " + path + ": no profile is recording");
  if (g_cuda_device >= 0) at::detail::getCUDAHooks().deviceSynchronize(static_cast<c10::DeviceIndex>(g_cuda_device));
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
  g_recording = false;
  const std::string partial = path + ".partial";
  std::error_code ec;
  std::filesystem::remove(partial, ec);
  result->save(partial);  // Kineto logs, rather than throws, when it cannot write: checked below
  if (!std::filesystem::exists(partial, ec) || std::filesystem::file_size(partial, ec) == 0) {
    std::filesystem::remove(partial, ec);
    std::filesystem::remove(partial + ".tmp", ec);  // Kineto's own temporary, left where its write failed
    throw std::runtime_error("--kernel-profile " + path + ": the trace could not be written (" + partial +
                             "; a full disk, or the file size limit of this process: ulimit -f)");
  }
  if (!ends_as_json_object(partial)) {  // cut short: a disk that filled, a file size limit (ulimit -f)
    std::filesystem::remove(partial, ec);
    throw std::runtime_error("--kernel-profile " + path + ": the trace was cut short while written (a full disk, " +
                             "or the file size limit of this process: ulimit -f)");
  }
  std::error_code moved;
  std::filesystem::rename(partial, path, moved);
  if (moved) {
    std::filesystem::remove(partial, ec);
    throw std::runtime_error("--kernel-profile " + path + ": cannot move the trace into place: " + moved.message());
  }
}

}  // namespace odyssey
