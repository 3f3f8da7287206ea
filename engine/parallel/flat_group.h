// Parameters in flat groups (one per decoder block, one for the embedding, one for the head): the
// fp32 master shard, its gradient, the AdamW moments and the compute-dtype `full` buffer whose
// views are the parameters. defines: ParamSpec, lay_out_flat, FlatParamGroup
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include "engine/layout/planned_buffers.h"
#include "engine/parallel/comm.h"

namespace odyssey {

/// One parameter inside a flat group: where it sits in the flat buffer and how it is initialised.
struct ParamSpec {
  std::string name;            ///< "wq", "mlp_norm", ...
  std::vector<int64_t> shape;  ///< e.g. {n_heads * head_dim, d_model}
  bool decay = true;           ///< AdamW weight decay applies (matrices yes, norm weights no)
  double init_std = 0.02;      ///< normal(0, init_std); 0 means "ones" (norm weights)
  int64_t offset = 0;          ///< element offset in the flat buffer (filled by FlatParamGroup)
  int64_t numel() const;
};

/// Lays `specs` out back to back in a flat buffer (fills each offset, in order); returns the
/// group's parameter count. The one layout rule: FlatParamGroup and `odyssey export` read it.
int64_t lay_out_flat(std::vector<ParamSpec>& specs);

/// Elements of a tensor one initialisation generator draws (FlatParamGroup::init): 4 MiB of fp32.
constexpr int64_t kInitChunkElements = int64_t{1} << 20;

/// The 32-bit seed of initialisation chunk `chunk` (numbered over the whole model) of a run
/// seeded `seed`: ATen's CPU generator keeps 32 bits of its seed, so the chunks' seeds are a
/// bijection of their numbers (murmur3's finaliser) offset by the run's: distinct for every chunk
/// of a model below 2^32 chunks, where hashing each chunk's 64-bit seed would collide (about 1
/// in 150 runs of the 8B's 7.7k chunks).
uint32_t init_chunk_seed(uint64_t seed, int64_t chunk);

/// How a group is laid out over the ranks.
struct FlatGroupOptions {
  bool fsdp = false;                    ///< shard master/grad/moments over ctx.world
  at::ScalarType compute = at::kFloat;  ///< dtype of `full` (the parameters the model sees)
  at::Device device = at::kCPU;
  ParamGroupKind kind = ParamGroupKind::Block;  ///< which planner terms size its buffers (planned_buffers.h)
  bool offload_optimizer = false;  ///< master, gradient and moments start in host memory (set_states_on_host)
};

/// A flat parameter group. Master, grad and moments are fp32 shards [shard_numel] (the whole
/// group when not sharded); `full` [padded_numel] in the compute dtype holds the parameters the
/// model computes with. fp32 without sharding: `full` is `master` itself (no copy, always
/// "unsharded"). Otherwise `full` owns one StorageImpl whose memory reshard() frees by swapping
/// in an empty DataPtr and unshard() swaps back in, so views saved by autograd survive.
///
/// Optimizer offload (set_states_on_host): master, grad and moments live in host memory (pinned
/// for a CUDA device; the tracker's host pool), the device keeps only `device_params`, the shard in
/// the compute dtype [shard_numel] that the all-gather reads (without sharding it is `full`
/// itself, resident). Memory: 16 bytes a parameter leave the device, c bytes stay.
class FlatParamGroup {
 public:
  /// Lays out `specs` (in order), allocates master/grad/moments (zeros). init() fills master.
  FlatParamGroup(std::string name, std::vector<ParamSpec> specs, const RankContext& ctx,
                 const FlatGroupOptions& options);
  ~FlatParamGroup();
  FlatParamGroup(const FlatParamGroup&) = delete;
  FlatParamGroup& operator=(const FlatParamGroup&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t numel() const { return numel_; }                ///< N, parameters in the group
  int64_t padded_numel() const { return padded_numel_; }  ///< shard_numel x shards
  int64_t shard_numel() const { return shard_numel_; }
  int64_t shard_offset() const { return shard_offset_; }  ///< first flat element of this rank's shard
  bool sharded() const { return shards_ > 1; }
  /// True when `full` aliases `master` (fp32, not sharded, states on the device): unshard/reshard
  /// cost nothing.
  bool full_is_master() const { return full_resident_ && !states_on_host_; }
  /// True when master, grad and moments live in host memory (optimizer offload).
  bool states_on_host() const { return states_on_host_; }
  /// Moves master, grad and moments to host memory (true) or back to the device (false), and
  /// creates or frees `device_params`. At a step boundary only: rebuilds `full` and its views.
  void set_states_on_host(bool on_host);
  /// Adds a reduced gradient shard [shard_numel] fp32 (on the device) into the gradient, wherever
  /// it lives. With the states in pinned host memory, the step's first contribution is an
  /// asynchronous copy straight into the zeroed host gradient, on the current stream, so backward
  /// goes on while it crosses PCIe (finish_gradient_copy waits for it); a later one (the tied
  /// embedding's second) waits for it, copies down and adds on the host.
  void accumulate_gradient(const at::Tensor& shard);
  /// Waits for an asynchronous gradient copy to the host (nothing when none is in flight), and
  /// zeroes a gradient that no contribution reached since zero_gradient(): call it before
  /// anything reads the gradient (global_grad_norm does, for every group).
  void finish_gradient_copy();
  /// Empties the gradient (keeps the buffer) after finishing any copy into it, lazily: the next
  /// contribution overwrites the buffer, or finish_gradient_copy() zeroes it.
  void zero_gradient();
  /// With the states in pinned host memory on a GPU: the gradient's 2-norm [] fp64 on the device,
  /// taken from the device tensor the copy down reads (norm_in_double on the same values as the
  /// on-device optimizer's norm of its gradient), so the host reads its gradients once a step
  /// (the AdamW pass), not twice. Undefined when the gradient was summed on the host or none came.
  const at::Tensor& device_grad_norm() const { return device_grad_norm_; }
  /// Bytes of the group's persistent tensors in the device pool (master, grad and moments, or
  /// `device_params` with the states on the host) and in the host pool (the offloaded states).
  int64_t device_state_bytes() const;
  int64_t host_state_bytes() const;
  /// After an optimizer step on the host: the updated master, cast to the compute dtype, into
  /// `device_params` (host-to-device; on a GPU queued asynchronously, cast on the device). Nothing
  /// when the states are on the device.
  void refresh_device_params();
  /// The host AdamW of the last step runs on a worker thread under this step's forward (the
  /// pipeline sets it when it queues the group's pass, engine/train/optimizer.h): `wait` returns
  /// once that pass has finished (at once if it has), called on the group's own thread. Until
  /// await_update() the group's master and moments belong to that thread, and the device's
  /// parameters are the old ones. `finished` says, without waiting, whether the pass is done.
  void set_pending_update(std::function<void()> wait, std::function<bool()> finished) {
    pending_update_ = std::move(wait);
    pending_finished_ = std::move(finished);
  }
  /// A pending host update whose pass is still running: await_update() would block this thread
  /// (the block forward then queues its own kernels before it prefetches this group).
  bool update_running() const { return pending_update_ && pending_finished_ && !pending_finished_(); }
  /// Finishes a pending host update: waits for its pass (a phase "<group>/host_update" while it
  /// waits or uploads), then refresh_device_params(). Nothing when none is pending. unshard(),
  /// unshard_async() and set_states_on_host() call it first, so the forward's first use of the
  /// group is where the step waits for its update, and no later.
  void await_update();
  at::ScalarType compute_dtype() const { return options_.compute; }

  /// Deterministic Llama-style init of this rank's shard from the run's `seed`: each tensor in
  /// chunks of kInitChunkElements, numbered model-wide from `first_chunk` (init_chunk_seed), so a
  /// rank's values are the single-rank run's slice at any world size. Returns the number after
  /// the group's last chunk: the next group's `first_chunk`.
  int64_t init(uint64_t seed, int64_t first_chunk = 0);

  at::Tensor master;      ///< [shard_numel] fp32 leaf, requires grad; master.grad() is `grad`
  at::Tensor exp_avg;     ///< [shard_numel] fp32, AdamW first moment
  at::Tensor exp_avg_sq;  ///< [shard_numel] fp32, AdamW second moment
  at::Tensor grad() const { return master.grad(); }

  /// Fills `full` (all-gather over ctx.world with FSDP, else a cast; nothing when full is master).
  /// Idempotent; completes a started unshard_async(). Memory: padded_numel compute-dtype bytes,
  /// category gathered_params.
  void unshard();
  /// Starts filling `full` and returns at once (FSDP: the all-gather runs on the backend while
  /// this thread computes another block; Gloo's worker thread, NCCL's stream); unshard() finishes
  /// it. The same memory at the same moment as unshard(). Without sharding it is unshard().
  void unshard_async();
  /// An all-gather of `full` is in flight.
  bool unshard_pending() const { return pending_gather_ != nullptr; }
  /// Frees `full`'s memory (views stay valid objects). Idempotent.
  void reshard();
  bool is_unsharded() const { return unsharded_; }

  /// The parameter views into `full` (valid after unshard()), in spec order.
  const std::vector<at::Tensor>& views() const { return views_; }
  const at::Tensor& view(size_t index) const { return views_.at(index); }

  /// Packs per-parameter gradients (spec order, any float dtype, undefined = zero) into a flat fp32
  /// [padded_numel] buffer (category comm_buffers) and reduces it: reduce-scatter SUM over
  /// ctx.world with FSDP, all-reduce SUM over ctx.world without FSDP when world > 1. Returns this
  /// rank's shard of the summed gradient [shard_numel].
  at::Tensor reduce_gradients(const std::vector<at::Tensor>& param_grads) const;
  /// The same for an already packed flat fp32 buffer [padded_numel].
  at::Tensor reduce_flat(at::Tensor flat) const;

  /// A reduction started and not yet finished: `shard` [shard_numel] fp32 holds the summed
  /// gradient once `pending` finished; `pack` (its input) must live until then.
  struct PendingGradient {
    at::Tensor shard, pack;
    std::unique_ptr<PendingCollective> pending;
  };
  /// reduce_gradients started now (FSDP reduce-scatter on the backend), for the caller to finish
  /// later: a block's gradients reduce while the next block's backward computes. Without
  /// sharding, the reduction runs now and the result is already final.
  PendingGradient start_reduce_gradients(const std::vector<at::Tensor>& param_grads) const;

  /// Local shard ranges [begin, end) whose elements get no weight decay (norm weights, padding).
  const std::vector<std::pair<int64_t, int64_t>>& no_decay_ranges() const { return no_decay_ranges_; }

 private:
  /// The planner term of this group's `buffer` (planned_buffers.h).
  PlannedBuffer tag(GroupBuffer buffer) const { return group_buffer(options_.kind, buffer); }
  void allocate_full_memory();
  /// The per-parameter gradients in one flat fp32 [padded_numel] buffer (category comm_buffers).
  at::Tensor pack_gradients(const std::vector<at::Tensor>& param_grads) const;
  std::string name_;
  std::vector<ParamSpec> specs_;
  RankContext ctx_;
  FlatGroupOptions options_;
  int64_t numel_ = 0, padded_numel_ = 0, shard_numel_ = 0, shard_offset_ = 0;
  /// Records grad_copy_done_ on `device`'s current stream, behind a copy down just queued there.
  void record_gradient_copy(at::Device device);
  /// Places master/grad/moments on the host or the device (fresh tensors) and builds `full`.
  void place_states(bool on_host);
  int shards_ = 1;
  bool full_resident_ = false;  ///< `full` is master or device_params_: (un)shard cost nothing
  bool states_on_host_ = false;
  at::Tensor device_params_;     ///< [shard_numel] compute dtype on the device, with the states on the host
  bool grad_zeroed_ = true;      ///< no contribution since zero_gradient(): the next may be a copy
  bool grad_stale_ = false;      ///< ... and the buffer still holds the last step's values
  at::Tensor device_grad_norm_;  ///< [] fp64 on the device (device_grad_norm)
  std::unique_ptr<c10::Event> grad_copy_done_;  ///< recorded after an asynchronous copy down
  std::function<void()> pending_update_;        ///< set_pending_update's wait, until await_update (empty: none)
  std::function<bool()> pending_finished_;      ///< set_pending_update's probe: the pass is done
  bool unsharded_ = false;
  at::Tensor full_;  ///< [padded_numel] compute dtype; its storage is swapped by (un)shard
  std::unique_ptr<PendingCollective> pending_gather_;  ///< unshard_async's all-gather in flight
  at::Tensor gather_staging_;                          ///< its compute-dtype input shard, kept alive
  std::vector<at::Tensor> views_;
  std::vector<std::pair<int64_t, int64_t>> no_decay_ranges_;
};

}  // namespace odyssey
