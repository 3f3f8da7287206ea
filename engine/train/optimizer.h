// AdamW over flat fp32 shards (decoupled weight decay on matrices only), global gradient-norm
// clipping over all ranks, and the warmup + cosine learning-rate schedule. defines: lr_at,
// global_grad_norm, clip_gradients, AdamW
#pragma once

#include <cstdint>
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

/// AdamW (Loshchilov & Hutter, as torch.optim.AdamW): m, v moments, bias correction, decoupled
/// weight decay p -= lr * wd * p on the elements outside each group's no-decay ranges.
class AdamW {
 public:
  explicit AdamW(const TrainingConfig& training) : training_(training) {}
  /// Applies one update with learning rate `lr` to every group (step count advances by one), on
  /// the gradients scaled by `grad_scale` (clip_factor): the host's fused pass multiplies each
  /// element as it reads it (the same fp32 product as scaling in place first, one pass fewer over
  /// the host's memory); on a device the gradient is scaled in place first. Each group whose
  /// states live on the host sends its updated parameters up as soon as its pass ends
  /// (refresh_device_params: asynchronous on a GPU, so the copy overlaps the next group's pass).
  void step(const std::vector<FlatParamGroup*>& groups, double lr, double grad_scale = 1.0);
  /// Sets every gradient to zero (keeps the buffers).
  static void zero_grad(const std::vector<FlatParamGroup*>& groups);
  int64_t steps_taken() const { return steps_; }
  /// The most intra-op threads one range of the last step's host pass ran on (0 when no state
  /// lives on the host): at::get_num_threads() on a range of 16384 elements a thread or more.
  int host_threads() const { return host_threads_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }

 private:
  TrainingConfig training_;
  int64_t steps_ = 0;
  int host_threads_ = 0;
};

}  // namespace odyssey
