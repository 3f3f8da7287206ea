// Collective communication as the engine sees it: the Comm interface (collectives with a timeout
// that fail with the rank, group and operation named; two of them also startable now and finished
// later, for overlap), SoloComm for one rank, RankContext.
// defines: Comm, CommError, PendingCollective, SoloComm, RankContext
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace odyssey {

/// A collective failed or timed out. The message names the rank, group and operation.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A collective started by Comm::start_*: its output is valid once finish() returned, and its
/// tensors must stay untouched until then. finish() once; a handle dropped unfinished is finished
/// by its destructor (a collective must complete on every member), errors swallowed.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  /// CPU: the host waits (deadline- and abort-bounded); GPU: the current stream waits for the
  /// collective and the host goes on. Throws CommError as the blocking collective would.
  virtual void finish() = 0;
};

/// One process group. All tensors are contiguous; every member calls the same collectives in the
/// same order. Implementations: SoloComm (size 1), GlooComm (CPU), NcclComm (CUDA), EmulatedComm
/// (rank 0 of a larger group alone, shape-exact stand-ins).
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "world", "sp" (Ulysses group), "dp" (data-parallel replicas).
  virtual std::string name() const = 0;
  /// True when collectives are stand-ins (rank emulation): numbers are meaningless, shapes exact.
  virtual bool emulated() const { return false; }
  /// The library that runs the collectives: "nccl", "gloo"; "none" for a group of one (copies),
  /// "emulated" for rank emulation's stand-ins. summary.json names the world group's.
  virtual std::string backend() const = 0;

  /// out[size * in.numel()] = concatenation of every rank's `in` in rank order.
  virtual void all_gather(at::Tensor& out, const at::Tensor& in) = 0;
  /// out[in.numel() / size] = this rank's slice of the elementwise sum of every rank's `in`.
  /// `in` may be used as scratch and overwritten (the Gloo path reduces it in place).
  virtual void reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) = 0;
  /// Equal splits along dim 0: chunk j of `in` goes to rank j; chunk j of `out` came from rank j.
  virtual void all_to_all(at::Tensor& out, const at::Tensor& in) = 0;
  virtual void all_reduce_sum(at::Tensor& tensor) = 0;
  virtual void all_reduce_max(at::Tensor& tensor) = 0;
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;

  /// all_gather started now, finished by the handle: FSDP gathers the next block's parameters
  /// while this block computes. Default: the blocking one, already finished.
  virtual std::unique_ptr<PendingCollective> start_all_gather(at::Tensor& out, const at::Tensor& in) {
    all_gather(out, in);
    return std::make_unique<Finished>();
  }
  /// reduce_scatter_sum started now: FSDP reduces a block's gradients while the next block's
  /// backward computes. Default: the blocking one, already finished.
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) {
    reduce_scatter_sum(out, in);
    return std::make_unique<Finished>();
  }

 protected:
  struct Finished final : PendingCollective {
    void finish() override {}
  };
};

/// The group of one: every collective is a copy or nothing.
class SoloComm final : public Comm {
 public:
  explicit SoloComm(std::string name = "world") : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }
  std::string backend() const override { return "none"; }
  void all_gather(at::Tensor& out, const at::Tensor& in) override { copy_into(out, in); }
  void reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) override { copy_into(out, in); }
  void all_to_all(at::Tensor& out, const at::Tensor& in) override { copy_into(out, in); }
  void all_reduce_sum(at::Tensor&) override {}
  void all_reduce_max(at::Tensor&) override {}
  void broadcast(at::Tensor&, int) override {}
  void barrier() override {}

 private:
  static void copy_into(at::Tensor& out, const at::Tensor& in) {
    if (out.data_ptr() != in.data_ptr()) out.view(-1).copy_(in.reshape(-1));
  }
  std::string name_;
};

/// Where one rank sits in the job, and its groups. Components take what they need from it.
struct RankContext {
  int rank = 0;  ///< global rank
  /// This rank's index among the ranks of this process: its memory-tracker counters, phase
  /// stack and thread-local scopes (the rank thread's index; 0 for a torchrun process, whose
  /// global rank may be any number).
  int slot = 0;
  int world_size = 1;
  int sp_rank = 0;  ///< rank inside the Ulysses group (which sequence shard it holds)
  int sp_size = 1;  ///< Ulysses degree P
  int dp_rank = 0;  ///< which data-parallel replica (which sequences it trains on)
  int dp_size = 1;
  bool emulated = false;  ///< rank emulation: collectives are stand-ins, losses meaningless
  at::Device device = at::kCPU;
  std::shared_ptr<Comm> world = std::make_shared<SoloComm>("world");  ///< FSDP sharding, grad norm, loss
  std::shared_ptr<Comm> sp = std::make_shared<SoloComm>("sp");        ///< Ulysses all-to-all
  std::shared_ptr<Comm> dp = std::make_shared<SoloComm>("dp");        ///< data-parallel all-reduce (no FSDP)
};

}  // namespace odyssey
