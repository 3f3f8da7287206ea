// AdamW over flat fp32 shards (decoupled weight decay on matrices only), global gradient-norm
// clipping over all ranks, the warmup + cosine learning-rate schedule, and the host AdamW's
// pipeline under the next step's forward. defines: lr_at, global_grad_norm, clip_gradients,
// AdamStep, AdamW, HostUpdatePipeline
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/parallel/flat_group.h"
#include "engine/parallel/comm.h"

namespace odyssey {

/// Learning rate of optimizer step `step` (0-based): linear warmup over warmup_steps to lr, then
/// cosine decay to lr x min_lr_ratio at the last step.
double lr_at(const TrainingConfig& training, int64_t step);

/// sqrt of the sum of squared gradients over every group and every rank (all-reduce SUM of the
/// squared norms over ctx.world when the groups are sharded; unsharded groups hold identical
/// all-reduced gradients on every rank, so their local norm is already global).
double global_grad_norm(const std::vector<FlatParamGroup*>& groups, const RankContext& ctx);

/// The clipping rule: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (clipping off).
double clip_factor(double norm, double max_norm);

/// Scales every gradient by clip_factor(norm, max_norm); returns the factor. (AdamW::step takes the
/// factor instead, so the host optimizer makes no separate pass over the gradients for it.)
double clip_gradients(const std::vector<FlatParamGroup*>& groups, double norm, double max_norm);

/// The scalars of one optimizer step, the same for every group: made once by AdamW::begin_step.
struct AdamStep {
  int64_t t = 1;          ///< this step's count, from 1 (the bias corrections' exponent)
  double lr = 0;          ///< this step's learning rate
  double grad_scale = 1;  ///< clip_factor: every gradient is read as g x grad_scale
  double bias1 = 1;       ///< 1 - beta1^t
  double bias2 = 1;       ///< 1 - beta2^t
};

/// A group's fp32 shard in host memory as the fused pass sees it: raw pointers, taken on the
/// group's own thread (AdamW::host_shard), so the pass touches no tensor.
struct HostShard {
  float* params = nullptr;       ///< master [numel]
  const float* grads = nullptr;  ///< gradient [numel]
  float* exp_avg = nullptr;      ///< [numel]
  float* exp_avg_sq = nullptr;   ///< [numel]
  int64_t numel = 0;
  std::vector<std::pair<int64_t, int64_t>> no_decay;  ///< [begin, end) ranges without weight decay
};

/// AdamW (Loshchilov & Hutter, as torch.optim.AdamW): m, v moments, bias correction, decoupled
/// weight decay p -= lr * wd * p on the elements outside each group's no-decay ranges.
class AdamW {
 public:
  explicit AdamW(const TrainingConfig& training) : training_(training) {}
  /// Advances the step count by one and returns its scalars (step() is begin_step, then
  /// update_group for every group; the pipeline runs the host groups' passes on its thread).
  AdamStep begin_step(double lr, double grad_scale = 1.0);
  /// One group's update with `s`: on the device ATen's fused kernel (device_pass), or the host's
  /// fused pass followed by refresh_device_params (the group's gradient must be complete:
  /// finish_gradient_copy).
  void update_group(FlatParamGroup* g, const AdamStep& s);
  /// AdamW over one shard that lives on the device, in ATen's fused kernel (at::_fused_adamw_,
  /// what torch.optim.AdamW(fused=True) runs): p, g, m, v read once and p, m, v written once per
  /// element, no temporary (the op-by-op form made about eight passes and a [shard] fp32
  /// denominator). Two launches: the decayed spans, then the `no_decay` ranges without decay;
  /// the clip factor goes in as the kernel's grad_scale (the gradient divided by 1 / factor).
  /// Any device the kernel has (a CPU test checks the arithmetic against host_pass).
  void device_pass(const at::Tensor& params, const at::Tensor& grads, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq, const std::vector<std::pair<int64_t, int64_t>>& no_decay,
                   const AdamStep& s) const;
  /// The group's CPU shard (master, gradient and moments in host memory) for host_pass.
  static HostShard host_shard(FlatParamGroup* g);
  /// The host's fused pass over one shard and nothing else: no tensor is made or freed, so
  /// another thread may run it while the group's own thread does other work. Returns the
  /// intra-op threads it ran on.
  int host_pass(const HostShard& shard, const AdamStep& s);
  /// Applies one update with learning rate `lr` to every group (step count advances by one), on
  /// the gradients scaled by `grad_scale` (clip_factor): each fused pass scales each gradient
  /// element as it reads it (the host's by the factor, one pass fewer over the host's memory; the
  /// device's kernel divides by its inverse). Each group whose
  /// states live on the host sends its updated parameters up as soon as its pass ends
  /// (refresh_device_params: asynchronous on a GPU, so the copy overlaps the next group's pass).
  void step(const std::vector<FlatParamGroup*>& groups, double lr, double grad_scale = 1.0);
  /// Sets every gradient to zero (keeps the buffers).
  static void zero_grad(const std::vector<FlatParamGroup*>& groups);
  int64_t steps_taken() const { return steps_; }
  /// The most intra-op threads one range of the last step's host pass ran on (0 when no state
  /// lives on the host): at::get_num_threads() on a range of 16384 elements a thread or more.
  int host_threads() const { return host_threads_.load(); }
  void set_steps_taken(int64_t steps) { steps_ = steps; }

 private:
  TrainingConfig training_;
  int64_t steps_ = 0;
  std::atomic<int> host_threads_{0};  ///< raised by host_pass, which may run on the pipeline's thread
};

/// The host AdamW (optimizer offload) under the next step's forward. At the end of step N the
/// trainer hands every group to start(), in the order the forward uses them (embedding, blocks,
/// head); a worker thread runs their fused passes in that order while step N+1 begins, and each
/// group waits for its own pass at its first use (FlatParamGroup::await_update, from unshard),
/// where its parameters then go up to the device. The arithmetic is AdamW::step's, element by
/// element: the result is bit-equal to running the passes after backward. Time: the step exposes
/// only the passes the forward catches up with (at least the embedding's and block 0's) and the
/// uploads; the rest runs beside the forward's device work. Memory: none beyond step()'s (the
/// pass makes no tensor). Exclusive: nothing else may read or write a started group's master,
/// gradient or moments until its await_update (Trainer::settle_host_updates awaits them all).
class HostUpdatePipeline {
 public:
  HostUpdatePipeline() = default;
  ~HostUpdatePipeline();  ///< finishes every queued pass, then stops the worker
  HostUpdatePipeline(const HostUpdatePipeline&) = delete;
  HostUpdatePipeline& operator=(const HostUpdatePipeline&) = delete;
  /// Queues the passes of `groups` (in this order) with the scalars `s` of `optimizer` (its
  /// begin_step), marks each group's update pending, and returns at once. The groups' gradients
  /// must be complete (global_grad_norm finished their copies).
  void start(AdamW& optimizer, const std::vector<FlatParamGroup*>& groups, const AdamStep& s);
  /// The last batch's passes on the host clock (telemetry_now_s): from the first pass's start to
  /// the last's end, once all have ended; {0, 0} before.
  std::pair<double, double> last_pass_span_s() const;

 private:
  struct Job;
  void run_worker();
  std::thread worker_;
  mutable std::mutex mutex_;
  std::condition_variable queued_, finished_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  int running_ = 0;  ///< jobs popped and not yet finished
  double batch_begin_s_ = 0, batch_end_s_ = 0;
  bool batch_started_ = false;
};

}  // namespace odyssey
