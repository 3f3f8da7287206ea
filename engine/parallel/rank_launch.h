// Ranks of a job: the group layout (SP = contiguous rank blocks, DP = strided), RankContext
// construction over a c10d store, in-process rank threads, torchrun's environment, emulation.
// defines: RankLayout, layout_of, RankError, make_rank_context, make_emulated_rank_context,
//          run_rank_threads, TorchrunEnv, torchrun_env, check_torchrun_world, check_gloo_interface,
//          connect_job_store, TorchrunRank,
//          join_torchrun_rank, join_torchrun
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "engine/config/run_config.h"
#include "engine/parallel/abort_signal.h"
#include "engine/parallel/comm.h"

namespace c10d {
class Store;
}

namespace odyssey {

/// Where global rank `rank` sits: Ulysses group `sp_group` = ranks [sp_group*P, (sp_group+1)*P) at
/// position `sp_rank`; data-parallel group `dp_group` = ranks {dp_group, dp_group+P, ...} at
/// position `dp_rank` (the replica index: which sequences it trains on).
struct RankLayout {
  int rank = 0, world_size = 1;
  int sp_group = 0, sp_rank = 0, sp_size = 1;
  int dp_group = 0, dp_rank = 0, dp_size = 1;
};
/// Throws std::invalid_argument when world_size is not a positive multiple of sp_size or rank is
/// outside [0, world_size).
RankLayout layout_of(int rank, int world_size, int sp_size);

/// A rank of the job failed; `rank` is the first rank that failed (the root cause, not the ranks
/// whose collectives were abandoned because of it).
class RankError : public std::runtime_error {
 public:
  RankError(int rank, const std::string& message) : std::runtime_error(message), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

/// How a rank reaches its peers.
struct CommOptions {
  std::chrono::milliseconds timeout{300000};  ///< every collective and the rendezvous
  std::string gloo_hostname = "127.0.0.1";    ///< Gloo device address ("" = this host's name)
  std::string gloo_interface;                 ///< Gloo device interface (GLOO_SOCKET_IFNAME), wins
  std::shared_ptr<AbortSignal> abort;         ///< the job's stop flag (in-process ranks share one)
  /// Several ranks of this node share one GPU (torchrun with more local ranks than devices): NCCL
  /// refuses two ranks on one device, so the groups run on Gloo, which stages CUDA tensors
  /// through host memory. For correctness runs (a node rehearsed on one GPU), not for speed.
  bool shared_device = false;
};
CommOptions comm_options(const ParallelConfig& parallel);

/// Whether any two of the GPUs named (gpu_uuid; "" for a rank without one) are the same device.
bool any_gpu_shared(const std::vector<std::string>& gpus);

/// Whether ranks of the job share a GPU (CommOptions::shared_device), decided by what the ranks
/// see, not by counting: every rank writes the UUID of its own GPU (`gpu`, "" on a CPU) into the
/// job's store and reads all `world_size` of them, so every rank reaches the same answer. A
/// launcher that shows each process one GPU (srun's --gpus-per-task) has distinct ones; ranks
/// that took GPU LOCAL_RANK mod a smaller count, or one device for all, repeat one. Then every
/// group runs on Gloo: NCCL refuses two ranks on one device. Blocks until every rank has written.
bool ranks_share_gpus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, const std::string& gpu);

/// The RankContext of `rank` in a job of `parallel.world_size` ranks, with its world, sp and dp
/// groups over `store` (prefixes "world", "sp.<i>", "dp.<j>"; groups of one are SoloComm). Gloo on
/// a CPU `device`, NCCL on a CUDA one (Gloo when options.shared_device). Blocks until the members of each group have joined.
/// Every member must call it; creation order is sp, dp, world on every rank.
RankContext make_rank_context(const c10::intrusive_ptr<c10d::Store>& store, int rank, const ParallelConfig& parallel,
                              at::Device device, const CommOptions& options);

/// Rank 0 of the job alone (`parallel.emulate`): EmulatedComm groups of the real sizes.
RankContext make_emulated_rank_context(const ParallelConfig& parallel, at::Device device);

/// The context of a job of one rank (SoloComm groups).
RankContext make_solo_rank_context(at::Device device);

/// Runs `fn(ctx)` on `parallel.world_size` threads, one rank each, sharing one in-process HashStore
/// (device: CPU for all, or CUDA base index + rank). Each thread binds the memory tracker's rank
/// (RankScope). If a rank throws, the others' collectives are abandoned at once (AbortSignal) and
/// RankError carries the first failing rank's message, prefixed "rank R: ". world_size 1 runs
/// `fn` on a thread too (same thread-local behaviour for every size).
///   run_rank_threads(cfg.parallel, at::kCPU, [&](RankContext& ctx) { train(ctx); });
void run_rank_threads(const ParallelConfig& parallel, at::Device device, const std::function<void(RankContext&)>& fn);

/// torchrun's conventions, read from the environment.
struct TorchrunEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// TORCHELASTIC_USE_AGENT_STORE=True (torchrun's default since 2.x, static and c10d rendezvous):
  /// the elastic agent already serves the store at MASTER_ADDR:MASTER_PORT, so every rank joins it
  /// as a client under the prefix "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>", as PyTorch does.
  /// Otherwise rank 0 serves the store itself.
  bool use_agent_store = false;
  int restart_count = 0;
  int local_world_size = 1;  ///< LOCAL_WORLD_SIZE: this node's ranks (more than its GPUs: they share)
  /// "MASTER_ADDR:MASTER_PORT", as messages name the job's store.
  std::string store_address() const;
};
/// nullopt when RANK and WORLD_SIZE are both unset (not under torchrun); throws
/// std::invalid_argument naming the variable, its value and the rule when one is malformed.
std::optional<TorchrunEnv> torchrun_env();

/// This process's rank of a torchrun job: its context, the job's store (null for one rank) and the
/// abort signal its groups watch (raise it to end their pending collectives).
struct TorchrunRank {
  RankContext ctx;
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<AbortSignal> abort;
};

/// Throws std::invalid_argument naming both values when WORLD_SIZE is not parallel.world_size, and
/// when parallel.emulate is set (an emulated rank 0 runs in one process, never under torchrun).
void check_torchrun_world(const TorchrunEnv& env, const ParallelConfig& parallel);

/// Throws std::invalid_argument naming the variable when GLOO_SOCKET_IFNAME is set and names no
/// network interface of this host (Gloo would stop in its device setup naming no variable). A
/// host's own: run among the refusals a torchrun job agrees on before it waits for its groups.
void check_gloo_interface();

/// This process's connection to its torchrun job's store (WORLD_SIZE > 1): a TCPStore at
/// MASTER_ADDR:MASTER_PORT that rank 0's process serves, waiting for every process to connect, or,
/// under torchrun's agent, a client of the agent's store under the attempt's prefix. Every wait on
/// it is bounded by `timeout`. Throws CommError naming the rank, the address, who serves the store
/// and the time waited when it cannot be reached (rank 0's process never started, or ended first)
/// or not every process connected; LibTorch's own text follows without its stack trace.
c10::intrusive_ptr<c10d::Store> connect_job_store(const TorchrunEnv& env, std::chrono::milliseconds timeout);

/// Joins the torchrun job: its store (connect_job_store, or `store` when this process already
/// holds it), then this rank's context. WORLD_SIZE must equal parallel.world_size. CPU: Gloo bound
/// to loopback when MASTER_ADDR is local, else GLOO_SOCKET_IFNAME or this host's name; CUDA:
/// cuda:LOCAL_RANK.
TorchrunRank join_torchrun_rank(const TorchrunEnv& env, const ParallelConfig& parallel, at::Device device,
                                c10::intrusive_ptr<c10d::Store> store = {});
/// join_torchrun_rank's context alone.
RankContext join_torchrun(const TorchrunEnv& env, const ParallelConfig& parallel, at::Device device);

}  // namespace odyssey
