// The one translation unit that includes ProcessGroupNCCL.hpp (built with ODYSSEY_WITH_NCCL,
// USE_C10D_NCCL and the wheel's nvidia/nccl/include when LibTorch has CUDA and nccl.h was found;
// see parallel.cmake). Runs only on GPUs.
// defines: make_nccl_backend, nccl_available
#include "engine/parallel/nccl_backend.h"

#include <stdexcept>
#include <string>

#ifdef ODYSSEY_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace odyssey {

#ifdef ODYSSEY_WITH_NCCL

namespace {
/// How much longer than Odyssey's timeout c10d's own watchdog waits (make_nccl_backend).
constexpr std::chrono::hours kNcclBackstop{24};
}  // namespace

bool nccl_available() { return true; }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                    std::chrono::milliseconds timeout, c10::Device device) {
  TORCH_CHECK(device.is_cuda() && device.has_index(), "make_nccl_backend: rank ", rank,
              " needs a CUDA device with an index, got ", device.str());
  c10::cuda::set_device(device.index());
  auto options = c10d::ProcessGroupNCCL::Options::create();
  // Odyssey's watchdog enforces `timeout` per collective from when it can run, and aborts the
  // communicator of a group whose collective it abandoned. c10d's watchdog counts from when the
  // host queued it, and the host queues a whole forward or backward ahead of the GPU (over an hour
  // for the 8B at 5M): a backstop a day longer, for a collective that never became runnable.
  options->timeout = timeout + kNcclBackstop;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  // The device c10d's calls without a tensor (barrier) run on. Unbound, ProcessGroupNCCL guesses
  // it as the rank of the process's first group modulo the GPUs it sees: the Ulysses group's rank
  // (r mod P, created first), so at world 8 with P = 4 ranks 4-7 would pick GPUs 0-3, another
  // rank's, and NCCL stops on a duplicate GPU.
  backend->setBoundDeviceId(device);
  // The communicator now, every member making this group (torch.distributed does the same when
  // init_process_group is given device_id), not at the group's first collective: its buffers
  // exist before step 1, whose time and peak are then every later step's, and a failure to
  // connect ends the setup, which the store's deadline bounds and names.
  backend->eagerConnectSingleDevice(device);
  return c10::static_intrusive_pointer_cast<c10d::Backend>(backend);
}

#else

bool nccl_available() { return false; }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int rank, int,
                                                    std::chrono::milliseconds, c10::Device device) {
  throw std::runtime_error("rank " + std::to_string(rank) + ": cannot create an NCCL process group for " +
                           device.str() +
                           ": this build of Odyssey has no NCCL (LibTorch without CUDA, "
                           "or nccl.h not found at configure time)");
}

#endif

}  // namespace odyssey
