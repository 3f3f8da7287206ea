// BackendComm: Odyssey's blocking, timed, abort-aware collectives over a c10d backend, and the
// Gloo/NCCL constructors. defines: BackendComm, GlooComm, NcclComm
#include "engine/parallel/process_group_comm.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <thread>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if defined(ODYSSEY_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#endif

#include "engine/parallel/gloo_backend.h"
#include "engine/parallel/nccl_backend.h"

namespace odyssey {
namespace {

using Clock = std::chrono::steady_clock;

/// Gloo's worker thread drops its references to a finished collective's Work (and so to the
/// tensors it was given) only after it has woken the waiting rank, and a rank that shares the
/// worker's CPU runs first: the Work, and a buffer the engine released after the collective, lived
/// on into whatever came next. The planner's walk frees the buffer at once, and the measured phase
/// peaks caught it (a Ulysses all-to-all's send buffer, 1 MiB of a 5 MiB attention working set; a
/// 2-rank FSDP run's 256 KiB embedding gradient pack in the optimizer phase; the same gradient,
/// all-reduced, in a Ulysses run's optimizer phase on a loaded 2-core host). So every Gloo
/// collective returns only when this side owns its Work alone, and the caller's drop frees it
/// here. Yields first (the worker is a few instructions from letting go), then sleeps, which frees
/// this CPU for a worker that waits for it; at most BackendComm::kWorkerReleaseWait. Gloo only:
/// NCCL's watchdog holds its works for longer, and the caching allocator orders reuse.
void await_sole_owner(const c10::intrusive_ptr<c10d::Work>& work) {
  const auto start = Clock::now();
  while (work && work.use_count() > 1) {
    const auto waited = Clock::now() - start;
    if (waited >= BackendComm::kWorkerReleaseWait) return;
    if (waited < std::chrono::microseconds(50))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

constexpr const char* kMissingPeer =
    "a member of the group never joined this collective: it died, hung, or issued a different sequence of "
    "collectives";

std::string tensor_text(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + c10::str(t.sizes());
}

}  // namespace

BackendComm::BackendComm(c10::intrusive_ptr<c10d::Backend> backend, GroupSpec spec, std::shared_ptr<AbortSignal> abort,
                         bool cuda, std::optional<c10::Device> device)
    : backend_(std::move(backend)), spec_(std::move(spec)), abort_(std::move(abort)), cuda_(cuda) {
  if (cuda_) {
    c10d::Backend* raw = backend_.get();
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        spec_.timeout, abort_, [raw] { raw->abort(); }, std::chrono::microseconds(500), device);
  }
}

std::string BackendComm::backend() const { return backend_->getBackendName(); }

BackendComm::~BackendComm() {
  if (watchdog_) {
    poisoned_ = poisoned_ || watchdog_->failure().has_value();
    watchdog_.reset();  // its thread may call backend_->abort(): stop it first
  }
  if (!backend_) return;
  if (!poisoned_) {
    if (cuda_) backend_->shutdown();  // orderly NCCL teardown (2.x warns without it)
    return;                           // Gloo: the destructor joins an idle worker
  }
  if (cuda_) {
    backend_->abort();  // frees the communicator stuck in the abandoned collective
    return;
  }
  // Gloo cannot abort: its worker thread sits in the abandoned operation until the backend's own
  // timeout, and ~ProcessGroupGloo would join it (a hang of up to `timeout`). Leak the backend on
  // purpose; its thread finishes the failed operation later and then idles.
  backend_.release();
}

std::string BackendComm::where(const char* op) const {
  return "rank " + std::to_string(spec_.rank) + " (global rank " + std::to_string(spec_.global_rank) + ") in group " +
         spec_.instance + " of " + std::to_string(spec_.size) + ": " + op;
}

void BackendComm::fail(const char* op, const std::string& why) { throw CommError(where(op) + " " + why); }

void BackendComm::check_tensor(const char* op, const char* what, const at::Tensor& t) const {
  if (!t.defined()) throw CommError(where(op) + ": " + what + " is an undefined tensor");
  if (!t.is_contiguous())
    throw CommError(where(op) + ": " + what +
                    " must be contiguous (a collective on .contiguous() would write "
                    "into a temporary), got strides " +
                    c10::str(t.strides()));
}

void BackendComm::check_watchdog(const char* op) {
  if (!watchdog_) return;
  if (auto why = watchdog_->failure()) {
    poisoned_ = true;
    // The failed collective is named in `why`; `op` is the one that found out.
    throw CommError("rank " + std::to_string(spec_.rank) + " (global rank " + std::to_string(spec_.global_rank) +
                    ") in group " + spec_.instance + " of " + std::to_string(spec_.size) + ": " + *why + " (found at " +
                    op + ")");
  }
}

void BackendComm::drain() {
  if (!watchdog_) return;
  watchdog_->drain();
  check_watchdog("drain");
}

void BackendComm::begin(const char* op, const at::Tensor* in, const at::Tensor* out, bool shapes_ok, const char* rule) {
  check_watchdog(op);
  if (poisoned_) fail(op, "refused: an earlier collective of this group failed");
  if (in != nullptr) check_tensor(op, out != nullptr ? "input" : "tensor", *in);
  if (out != nullptr) {
    check_tensor(op, "output", *out);
    if (!shapes_ok || out->scalar_type() != in->scalar_type())
      fail(op, std::string("needs ") + rule + "; got input " + tensor_text(*in) + ", output " + tensor_text(*out));
  }
}

void BackendComm::finish(const char* op, const c10::intrusive_ptr<c10d::Work>& work) {
  if (!cuda_) {
    wait_gloo(op, work);
    await_sole_owner(work);  // the caller's reference is the last: dropping it frees the tensors
  } else if (std::string(op) == "barrier")
    wait_cuda_host(op, work);  // a barrier's purpose is the host's: it must wait
  else
    wait_cuda(op, work);
}

void BackendComm::give_up_if_aborted_or_late(const char* op, std::chrono::steady_clock::time_point deadline) {
  if (abort_ && abort_->raised()) {
    poisoned_ = true;
    fail(op, "abandoned: rank " + std::to_string(abort_->rank()) + " failed: " + first_line(abort_->reason()));
  }
  if (std::chrono::steady_clock::now() >= deadline) {
    poisoned_ = true;
    fail(op, "timed out after " + seconds_text(spec_.timeout) + " (" + kMissingPeer + ")");
  }
}

// Gloo: wait in 20 ms slices so that the loop also watches the abort flag and the deadline. The
// slices wait on a condition variable that the work's future signals through a callback (no
// exception per slice: Work::wait(timeout) throws c10::Error, backtrace and all, every time a
// slice ends early, which cost seconds of system time per test run). A work without a future
// (getFuture() throws) falls back to Work::wait(slice). Either way the outcome is read with a final
// Work::wait() once the work has completed.
void BackendComm::wait_gloo(const char* op, const c10::intrusive_ptr<c10d::Work>& work) {
  struct Done {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  auto state = std::make_shared<Done>();  // shared with the callback, which may fire after we left
  bool has_future = true;
  try {
    work->getFuture()->addCallback([state](c10::ivalue::Future&) {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->done = true;
      state->cv.notify_all();
    });
  } catch (const std::exception&) {
    has_future = false;
  }
  const auto deadline = Clock::now() + spec_.timeout;
  constexpr auto kSlice = std::chrono::milliseconds(20);
  for (;;) {
    bool completed = false;
    if (has_future) {
      std::unique_lock<std::mutex> lock(state->mutex);
      completed = state->cv.wait_for(lock, kSlice, [&] { return state->done; });
    } else {
      try {
        completed = work->wait(kSlice);
      } catch (const std::exception&) {
        completed = work->isCompleted();  // a slice that ended early, or the operation's error
      }
    }
    if (completed) break;
    give_up_if_aborted_or_late(op, deadline);
  }
  try {
    work->wait();  // completed: returns at once, or throws the operation's error
  } catch (const std::exception& e) {
    poisoned_ = true;
    const std::string detail = first_line(e.what());
    // Gloo's own timeout is the same value and may fire first: report it as ours.
    if (detail.find("Timed out") != std::string::npos)
      fail(op, "timed out after " + seconds_text(spec_.timeout) + " (" + kMissingPeer + "; gloo: " + detail + ")");
    fail(op, "failed: " + detail);
  }
}

// NCCL: the current stream waits on the collective's end event (no host wait: Work::wait without
// TORCH_NCCL_BLOCKING_WAIT), and the watchdog watches it; a host that polled isCompleted() here
// would wait for every kernel queued before the collective, and the GPU would idle while the host
// caught up.
void BackendComm::wait_cuda(const char* op, const c10::intrusive_ptr<c10d::Work>& work) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    poisoned_ = true;
    fail(op, std::string("failed: ") + first_line(e.what()));
  }
}

// GPU groups: the watchdog watches a collective from its issue, its deadline from when it can run.
// NCCL's stream waits, at the issue, for the work queued on the current stream; an event recorded
// there now, before anything else is queued on it, completes when that work is done.
void BackendComm::watch_issued(const char* op, const c10::intrusive_ptr<c10d::Work>& work, const at::Tensor& on) {
  if (!watchdog_) return;
  CollectiveWatchdog::Runnable runnable;  // none (a CPU tensor: the tests' fake backend): from now
#if defined(ODYSSEY_WITH_CUDA)
  if (on.is_cuda()) {
    auto ready = std::make_shared<at::cuda::CUDAEvent>();
    try {
      ready->record(at::cuda::getCurrentCUDAStream(on.device().index()));
    } catch (const std::exception& e) {  // a device already in error: the collective cannot be watched
      poisoned_ = true;
      fail(op, std::string("failed: ") + first_line(e.what()));
    }
    runnable = [ready] { return ready->query(); };
  }
#endif
  watchdog_->watch(op, work, std::move(runnable));
}

// NCCL barrier: poll completion (Work::wait with a timeout would block inside the backend), then
// wait() to order the current stream after it.
void BackendComm::wait_cuda_host(const char* op, const c10::intrusive_ptr<c10d::Work>& work) {
  const auto deadline = Clock::now() + spec_.timeout;
  auto nap = std::chrono::microseconds(5);
  try {
    while (!work->isCompleted()) {
      give_up_if_aborted_or_late(op, deadline);
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
    work->wait();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    poisoned_ = true;
    fail(op, std::string("failed: ") + first_line(e.what()));
  }
}

/// A started collective: keeps its tensors alive until finish() has waited (the backend reads
/// and writes them meanwhile), then runs what completes the operation on this side.
class BackendComm::Pending final : public PendingCollective {
 public:
  Pending(BackendComm& comm, const char* op, c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> keep,
          std::function<void()> after = {})
      : comm_(comm), op_(op), work_(std::move(work)), keep_(std::move(keep)), after_(std::move(after)) {}
  ~Pending() override {
    if (done_) return;
    try {
      finish();
    } catch (...) {
    }
  }
  void finish() override {
    if (done_) return;
    done_ = true;
    comm_.finish(op_, work_);
    work_.reset();  // with it the Work's references to the collective's tensors, on this thread
    if (after_) after_();
    keep_.clear();
  }

 private:
  BackendComm& comm_;
  const char* op_;
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> keep_;
  std::function<void()> after_;
  bool done_ = false;
};

std::unique_ptr<PendingCollective> BackendComm::start_all_gather(at::Tensor& out, const at::Tensor& in) {
  constexpr const char* op = "all_gather";
  begin(op, &in, &out, out.numel() == in.numel() * spec_.size, "output = size x input elements of one dtype");
  at::Tensor out_flat = out.view(-1);
  at::Tensor in_flat = in.view(-1);
  if (cuda_) {
    c10::intrusive_ptr<c10d::Work> work = backend_->_allgather_base(out_flat, in_flat);
    watch_issued(op, work, in_flat);
    return std::make_unique<Pending>(*this, op, std::move(work), std::vector<at::Tensor>{out_flat, in_flat});
  }
  // Gloo: ProcessGroupGloo's _allgather_base stages through an output-sized tensor allocated on
  // its worker thread, which the memory tracker cannot attribute to this rank (and rank emulation
  // would not reproduce). An in-place SUM all-reduce of the output with only this rank's slot
  // filled gives the same bytes (x + 0 is exact) with no hidden buffer, for twice the traffic.
  {
    at::NoGradGuard no_grad;
    out_flat.zero_();
    out_flat.narrow(0, spec_.rank * in_flat.numel(), in_flat.numel()).copy_(in_flat);
  }
  std::vector<at::Tensor> tensors{out_flat};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  opts.timeout = spec_.timeout;
  return std::make_unique<Pending>(*this, op, backend_->allreduce(tensors, opts), std::vector<at::Tensor>{out_flat});
}

void BackendComm::all_gather(at::Tensor& out, const at::Tensor& in) { start_all_gather(out, in)->finish(); }

std::unique_ptr<PendingCollective> BackendComm::start_reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) {
  constexpr const char* op = "reduce_scatter_sum";
  begin(op, &in, &out, in.numel() == out.numel() * spec_.size, "input = size x output elements of one dtype");
  at::Tensor out_flat = out.view(-1);
  at::Tensor in_flat = in.view(-1);
  if (cuda_) {
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = spec_.timeout;
    c10::intrusive_ptr<c10d::Work> work = backend_->_reduce_scatter_base(out_flat, in_flat, opts);
    watch_issued(op, work, in_flat);
    return std::make_unique<Pending>(*this, op, std::move(work), std::vector<at::Tensor>{out_flat, in_flat});
  }
  // Gloo: _reduce_scatter_base stages through an input-sized tensor on its worker thread (see
  // all_gather). Reduce `in` itself with an in-place all-reduce instead (Comm allows it to be
  // used as scratch) and keep this rank's slice once it completed.
  std::vector<at::Tensor> tensors{in_flat};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  opts.timeout = spec_.timeout;
  const int rank = spec_.rank;
  return std::make_unique<Pending>(*this, op, backend_->allreduce(tensors, opts), std::vector<at::Tensor>{in_flat},
                                   [out_flat, in_flat, rank]() mutable {
                                     at::NoGradGuard no_grad;
                                     out_flat.copy_(in_flat.narrow(0, rank * out_flat.numel(), out_flat.numel()));
                                   });
}

void BackendComm::reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) {
  start_reduce_scatter_sum(out, in)->finish();
}

void BackendComm::all_to_all(at::Tensor& out, const at::Tensor& in) {
  constexpr const char* op = "all_to_all";
  begin(op, &in, &out, in.numel() == out.numel() && in.numel() % spec_.size == 0,
        "input and output of equal size divisible by the group size, one dtype");
  at::Tensor out_rows = out.view({spec_.size, -1});  // chunk j <-> rank j
  at::Tensor in_rows = in.view({spec_.size, -1});
  std::vector<int64_t> equal_splits;  // empty = equal split along dim 0
  c10d::AllToAllOptions opts;
  opts.timeout = spec_.timeout;
  auto work = backend_->alltoall_base(out_rows, in_rows, equal_splits, equal_splits, opts);
  if (cuda_) watch_issued(op, work, in);
  finish(op, work);
}

void BackendComm::all_reduce(const char* op, at::Tensor& tensor, Reduce reduce) {
  begin(op, &tensor);
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = reduce == Reduce::Max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  opts.timeout = spec_.timeout;
  auto work = backend_->allreduce(tensors, opts);
  if (cuda_) watch_issued(op, work, tensor);
  finish(op, work);
}

void BackendComm::all_reduce_sum(at::Tensor& tensor) { all_reduce("all_reduce_sum", tensor, Reduce::Sum); }

void BackendComm::all_reduce_max(at::Tensor& tensor) { all_reduce("all_reduce_max", tensor, Reduce::Max); }

void BackendComm::broadcast(at::Tensor& tensor, int root) {
  constexpr const char* op = "broadcast";
  begin(op, &tensor);
  if (root < 0 || root >= spec_.size) fail(op, "root " + std::to_string(root) + " is not a member");
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = spec_.timeout;
  auto work = backend_->broadcast(tensors, opts);
  if (cuda_) watch_issued(op, work, tensor);
  finish(op, work);
}

void BackendComm::barrier() {
  constexpr const char* op = "barrier";
  begin(op, nullptr);
  c10d::BarrierOptions opts;
  opts.timeout = spec_.timeout;
  finish(op, backend_->barrier(opts));
}

// Why a group's setup ends in a barrier. Of each pair of members, Gloo has the one whose listening
// address compares higher (Device::isInitiator) connect and send a greeting, and that member's side
// of the pair is ready once the greeting is sent, before the other member may even have read its
// peers' addresses from the store. A member whose setup ended so and which then left (a rank with
// no collective to run, one that failed, a test body that only makes groups) closed a socket that
// the slower member took over next, whose setup then usually failed with "Connection closed by
// peer" from connectFullMesh (comm_test's "gloo group setup" case makes the schedule happen on
// demand). torch.distributed has the same store-based barrier after a group's init, on under
// TORCH_DIST_INIT_BARRIER=1. NCCL has connected its communicator by then (make_nccl_backend), so
// there the barrier only gives both backends one contract. Each member adds
// itself to a counter and marks its own key (for the message naming those that never came), then
// counts itself out once it has seen everyone in. Member 0 leaves last: under torchrun rank 0's
// process may serve the store (rank 0 is member 0 of each group it is in, and make_rank_context
// makes the world group last). If that process ended while a member still polled, that member
// would report a store error instead of rank 0's failure (JobStart::acknowledge waits so too).
// The group's store prefix must be fresh: Gloo's own keys and these markers would be stale
// otherwise.
void BackendComm::wait_for_every_member(const c10::intrusive_ptr<c10d::Store>& store) {
  if (spec_.size <= 1) return;
  constexpr const char* kOp = "group setup";
  const std::string kArrivals = "odyssey_setup/arrivals";
  const std::string kDepartures = "odyssey_setup/departures";
  const std::string kMemberKey = "odyssey_setup/member_";
  const int64_t everyone = spec_.size;
  const auto deadline = Clock::now() + spec_.timeout;
  // Polls `counter` until it reaches everyone; false once the deadline has passed. Abort-aware.
  auto wait_for_all = [&](const std::string& counter) {
    auto nap = std::chrono::microseconds(50);
    while (store->add(counter, 0) < everyone) {
      if (abort_ && abort_->raised())
        fail(kOp, "abandoned: rank " + std::to_string(abort_->rank()) + " failed: " + first_line(abort_->reason()));
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(20000));
    }
    return true;
  };
  try {
    store->set(kMemberKey + std::to_string(spec_.rank), std::vector<uint8_t>{1});
    store->add(kArrivals, 1);
    if (!wait_for_all(kArrivals)) {
      std::string missing;
      for (int member = 0; member < spec_.size; ++member)
        if (!store->check({kMemberKey + std::to_string(member)}))
          missing += (missing.empty() ? "" : ", ") + std::to_string(member);
      fail(kOp, "timed out after " + seconds_text(spec_.timeout) + ": member(s) " +
                    (missing.empty() ? std::string("?") : missing) +
                    " of the group never finished making it (they died, hung, or never started; their output "
                    "says why)");
    }
    store->add(kDepartures, 1);
    // A member gone between the two counts leaves member 0 waiting until the deadline, then going
    // on: its next collective reports the member.
    if (spec_.rank == 0) wait_for_all(kDepartures);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {  // the job's store failed or went away (a TCPStore's server ended)
    fail(kOp, "the group's store failed: " + first_line(e.what()));
  }
}

GlooComm::GlooComm(const c10::intrusive_ptr<c10d::Store>& store, const GroupSpec& spec,
                   std::shared_ptr<AbortSignal> abort, const std::string& hostname, const std::string& interface)
    : BackendComm(make_gloo_backend(store, spec.rank, spec.size, spec.timeout, hostname, interface), spec,
                  std::move(abort), /*cuda=*/false) {
  wait_for_every_member(store);
}

NcclComm::NcclComm(const c10::intrusive_ptr<c10d::Store>& store, const GroupSpec& spec, c10::Device device,
                   std::shared_ptr<AbortSignal> abort)
    : BackendComm(make_nccl_backend(store, spec.rank, spec.size, spec.timeout, device), spec, std::move(abort),
                  /*cuda=*/true, device) {
  wait_for_every_member(store);
}

}  // namespace odyssey
