// Comm over a c10d backend: GlooComm (CPU, ProcessGroupGloo) and NcclComm (CUDA,
// ProcessGroupNCCL). Every collective is blocking with a timeout and fails with CommError naming
// the rank, the group, the operation and the timeout. defines: BackendComm, GlooComm, NcclComm
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "engine/parallel/abort_signal.h"
#include "engine/parallel/collective_watchdog.h"
#include "engine/parallel/comm.h"

namespace c10d {
class Backend;
class Store;
class Work;
}  // namespace c10d

namespace odyssey {

/// Where a group sits: its name ("world", "sp", "dp"), which instance ("sp.1"), the member's rank
/// in it, its size, the member's global rank (for messages) and the collective timeout.
struct GroupSpec {
  std::string name = "world";
  std::string instance = "world";  ///< unique key of this group instance (store prefix)
  int rank = 0;
  int size = 1;
  int global_rank = 0;
  std::chrono::milliseconds timeout{300000};
};

/// One member of one process group. On the CPU (Gloo) a collective blocks the host for at most
/// `timeout`, watching the job's AbortSignal (another rank failed) to give up at once. On a GPU
/// (NCCL) the host never waits: the current stream waits for the collective (work->wait()) and a
/// CollectiveWatchdog thread watches it to the same deadline and abort signal, aborting the
/// communicator when it gives up; the rank learns at its next collective (barrier alone still
/// blocks the host, deadline-bounded). A group whose collective was abandoned is "poisoned": later
/// collectives fail immediately, and at destruction the backend is aborted (NCCL) or deliberately
/// leaked (Gloo has no abort; its worker thread stays blocked until the backend's own timeout and
/// joining it would hang the caller). On the CPU a collective's tensors are released by the
/// caller when it drops them, not later by Gloo's worker thread (unless the worker took longer
/// than kWorkerReleaseWait to let go, or the collective failed).
class BackendComm : public Comm {
 public:
  /// The longest a Gloo collective waits, after completing, for the worker thread to drop its
  /// references to the Work (only the memory's timing depends on it).
  static constexpr std::chrono::milliseconds kWorkerReleaseWait{200};

  /// `cuda`: a GPU group (collectives watched, not waited on from the host); `device`: its rank's
  /// GPU, the watchdog thread's current device (CollectiveWatchdog)
  BackendComm(c10::intrusive_ptr<c10d::Backend> backend, GroupSpec spec, std::shared_ptr<AbortSignal> abort, bool cuda,
              std::optional<c10::Device> device = std::nullopt);
  ~BackendComm() override;
  BackendComm(const BackendComm&) = delete;
  BackendComm& operator=(const BackendComm&) = delete;

  int rank() const override { return spec_.rank; }
  int size() const override { return spec_.size; }
  std::string name() const override { return spec_.name; }
  std::string backend() const override;  ///< "gloo", "nccl": the c10d backend's own name
  const GroupSpec& spec() const { return spec_; }
  bool poisoned() const { return poisoned_; }
  /// GPU groups: the collectives issued and not yet complete (0 on the CPU, where each waits).
  size_t pending_collectives() const { return watchdog_ ? watchdog_->pending() : 0; }
  /// GPU groups: blocks until every issued collective completed, or throws CommError with the
  /// watchdog's reason (no-op on the CPU).
  void drain();

  void all_gather(at::Tensor& out, const at::Tensor& in) override;
  void reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) override;
  void all_to_all(at::Tensor& out, const at::Tensor& in) override;
  void all_reduce_sum(at::Tensor& tensor) override;
  void all_reduce_max(at::Tensor& tensor) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void barrier() override;
  /// Started on the backend now (Gloo's worker thread, NCCL's stream); finish() waits as the
  /// blocking form does.
  std::unique_ptr<PendingCollective> start_all_gather(at::Tensor& out, const at::Tensor& in) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) override;

 protected:
  /// The end of a group's setup, once this member's backend exists: returns when every member's
  /// does (a barrier over the group's fresh `store` prefix, at most the timeout, abort-aware), or
  /// throws CommError naming the members that never arrived (process_group_comm.cpp says why).
  ///   GlooComm::GlooComm(...) : BackendComm(make_gloo_backend(...), ...) { wait_for_every_member(store); }
  void wait_for_every_member(const c10::intrusive_ptr<c10d::Store>& store);

 private:
  class Pending;
  /// "rank 1 (global 3) in group sp.0 of 2: all_to_all"
  std::string where(const char* op) const;
  void check_tensor(const char* op, const char* what, const at::Tensor& t) const;
  /// The prologue of every collective: refused after an earlier failure; each tensor defined and
  /// contiguous; for two-tensor collectives `shapes_ok` else the `rule` with both shapes.
  void begin(const char* op, const at::Tensor* in, const at::Tensor* out = nullptr, bool shapes_ok = true,
             const char* rule = nullptr);
  /// GPU groups: hands the collective just issued on `on`'s device to the watchdog, with an event
  /// behind the work queued before it (its deadline starts when that work is done).
  void watch_issued(const char* op, const c10::intrusive_ptr<c10d::Work>& work, const at::Tensor& on);
  enum class Reduce { Sum, Max };
  void all_reduce(const char* op, at::Tensor& tensor, Reduce reduce);
  /// Waits for `work` (at most the timeout, abort-aware) and turns every failure into CommError.
  /// Gloo: then waits, at most kWorkerReleaseWait, until the caller's reference to `work` is the
  /// only one, so that the caller's drop releases the collective's tensors on this thread
  /// (process_group_comm.cpp).
  void finish(const char* op, const c10::intrusive_ptr<c10d::Work>& work);
  void wait_gloo(const char* op, const c10::intrusive_ptr<c10d::Work>& work);
  /// While waiting: throws (and poisons the group) when another rank raised the abort signal or
  /// the collective's deadline has passed.
  void give_up_if_aborted_or_late(const char* op, std::chrono::steady_clock::time_point deadline);
  /// NCCL: the current stream waits for `work` (the watchdog has it from its issue); the host
  /// goes on.
  void wait_cuda(const char* op, const c10::intrusive_ptr<c10d::Work>& work);
  /// NCCL barrier: the host waits (polling, deadline- and abort-bounded).
  void wait_cuda_host(const char* op, const c10::intrusive_ptr<c10d::Work>& work);
  /// Throws (and poisons the group) when the watchdog gave up on an earlier collective.
  void check_watchdog(const char* op);
  [[noreturn]] void fail(const char* op, const std::string& why);

  c10::intrusive_ptr<c10d::Backend> backend_;
  GroupSpec spec_;
  std::shared_ptr<AbortSignal> abort_;
  bool cuda_ = false;
  bool poisoned_ = false;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  ///< GPU groups only; destroyed before backend_
};

/// CPU group over ProcessGroupGloo. `store` must be this group's own PrefixStore, shared by all
/// members; blocks until every member has made the group (at most spec.timeout).
///   GlooComm sp(prefix_store, {"sp", "sp.0", sp_rank, 2, rank, 30s}, abort);
class GlooComm final : public BackendComm {
 public:
  GlooComm(const c10::intrusive_ptr<c10d::Store>& store, const GroupSpec& spec,
           std::shared_ptr<AbortSignal> abort = nullptr, const std::string& hostname = "127.0.0.1",
           const std::string& interface = "");
};

/// CUDA group over ProcessGroupNCCL, one GPU (`device`) per member; like GlooComm, blocks until
/// every member has made the group; its NCCL communicator is connected as it is made
/// (make_nccl_backend), not at the first collective.
class NcclComm final : public BackendComm {
 public:
  NcclComm(const c10::intrusive_ptr<c10d::Store>& store, const GroupSpec& spec, c10::Device device,
           std::shared_ptr<AbortSignal> abort = nullptr);
};

}  // namespace odyssey
