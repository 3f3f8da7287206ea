// AdamW over flat shards, gradient clipping and the LR schedule (see optimizer.h).
// defines: lr_at, global_grad_norm, clip_gradients, AdamW
#include "engine/train/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>

#include <ATen/Parallel.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/full.h>
#include <ATen/core/grad_mode.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/ops/layers.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"

namespace odyssey {

double lr_at(const TrainingConfig& t, int64_t step) {
  if (t.warmup_steps > 0 && step < t.warmup_steps)
    return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  const double floor = t.lr * t.min_lr_ratio;
  const int64_t decay_steps = std::max<int64_t>(1, t.steps - t.warmup_steps - 1);
  const double progress = std::clamp(static_cast<double>(step - t.warmup_steps) / decay_steps, 0.0, 1.0);
  return floor + (t.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

double global_grad_norm(const std::vector<FlatParamGroup*>& groups, const RankContext& ctx) {
  at::NoGradGuard no_grad;
  CategoryScope category(MemCategory::Other);
  at::Tensor sharded = at::zeros({1}, groups.front()->master.options().dtype(at::kDouble));     // [1]
  at::Tensor replicated = at::zeros({1}, groups.front()->master.options().dtype(at::kDouble));  // [1]
  // Optimizer offload on a GPU: each group's norm was taken on the device from the tensor its copy
  // down read (device_grad_norm), so the sums are made there; a CPU run's on the host.
  const bool device_norms = std::all_of(groups.begin(), groups.end(),
                                        [](const FlatParamGroup* g) { return g->device_grad_norm().defined(); });
  if (device_norms) {
    sharded = sharded.to(ctx.device);
    replicated = replicated.to(ctx.device);
  }
  for (auto* g : groups) {
    g->finish_gradient_copy();  // optimizer offload: the gradient's copy to the host has landed
    // Memory: row norms (no squared or fp64 copy of the shard), summed in fp64 (norm_in_double).
    const at::Tensor norm = (device_norms ? g->device_grad_norm() : norm_in_double(g->grad())).reshape({1});
    (g->sharded() ? sharded : replicated).add_(norm * norm);
  }
  // The collective runs on the rank's device (NCCL takes device tensors); with the optimizer
  // offloaded on the CPU the norms were taken on the host.
  if (sharded.device() != ctx.device) sharded = sharded.to(ctx.device);
  if (ctx.world_size > 1) ctx.world->all_reduce_sum(sharded);
  return std::sqrt(sharded.item<double>() + replicated.item<double>());
}

double clip_factor(double norm, double max_norm) {
  return max_norm <= 0 ? 1.0 : std::min(1.0, max_norm / (norm + 1e-6));
}

double clip_gradients(const std::vector<FlatParamGroup*>& groups, double norm, double max_norm) {
  const double factor = clip_factor(norm, max_norm);
  if (factor < 1.0) {
    at::NoGradGuard no_grad;
    for (auto* g : groups) g->master.mutable_grad().mul_(factor);
  }
  return factor;
}

namespace {

/// The scalars of one AdamW update, in fp32 as ATen's ops use them on fp32 tensors.
struct AdamScalars {
  float grad_scale;        ///< the clipping factor (1 unclipped): g is read as g x grad_scale
  float keep;              ///< 1 - lr x weight_decay (1 on no-decay elements)
  float avg_weight;        ///< 1 - beta1 (the lerp weight)
  float beta2, sq_weight;  ///< beta2, 1 - beta2
  float bias2, eps;
  float step;  ///< -lr / (1 - beta1^t)
};

/// One element of the fused AdamW, torch.optim.AdamW's arithmetic on the clipped gradient
/// g x grad_scale (clip_gradients' in-place product, rounded once alike): p *= keep;
/// m += (1-b1)(g - m); v = b2 v + (1-b2) g^2; p += step x m / (sqrt(v / bias2) + eps).
inline void adamw_element(float* p, const float* g, float* m, float* v, int64_t i, const AdamScalars& a) {
  const float gi = g[i] * a.grad_scale;
  const float mi = m[i] + a.avg_weight * (gi - m[i]);
  const float vi = v[i] * a.beta2 + a.sq_weight * (gi * gi);
  m[i] = mi;
  v[i] = vi;
  p[i] = p[i] * a.keep + a.step * (mi / (std::sqrt(vi / a.bias2) + a.eps));
}

/// AdamW over elements [lo, hi) of a CPU shard in one pass: p, g, m, v are read once and p, m, v
/// written once, where the op-by-op form makes eight passes over the shard and a temporary. 8
/// lanes with AVX2 (the build's baseline has 4, where the divide and square root made the pass
/// slower than ATen's own AVX2 kernels: bench/host_adamw_bench); the same operations in the same
/// order without FMA, so every lane rounds as the element-by-element tail does.
#if defined(__x86_64__)
__attribute__((target("avx2"))) void adamw_span_avx2(float* p, const float* g, float* m, float* v, int64_t lo,
                                                     int64_t hi, const AdamScalars& a) {
  const __m256 scale = _mm256_set1_ps(a.grad_scale);
  const __m256 keep = _mm256_set1_ps(a.keep), w = _mm256_set1_ps(a.avg_weight), b2 = _mm256_set1_ps(a.beta2),
               c2 = _mm256_set1_ps(a.sq_weight), bias2 = _mm256_set1_ps(a.bias2), eps = _mm256_set1_ps(a.eps),
               step = _mm256_set1_ps(a.step);
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), scale);
    __m256 mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
    mi = _mm256_add_ps(mi, _mm256_mul_ps(w, _mm256_sub_ps(gi, mi)));
    vi = _mm256_add_ps(_mm256_mul_ps(vi, b2), _mm256_mul_ps(c2, _mm256_mul_ps(gi, gi)));
    const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vi, bias2)), eps);
    const __m256 pi =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), keep), _mm256_mul_ps(step, _mm256_div_ps(mi, denom)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(p + i, pi);
  }
  for (; i < hi; ++i) adamw_element(p, g, m, v, i, a);
}
#endif

void adamw_span(float* p, const float* g, float* m, float* v, int64_t lo, int64_t hi, const AdamScalars& a) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return adamw_span_avx2(p, g, m, v, lo, hi, a);
#endif
  for (int64_t i = lo; i < hi; ++i) adamw_element(p, g, m, v, i, a);
}

/// The span split over ATen's intra-op threads; returns how many ran a part (ATen's OpenMP form
/// gives each thread one contiguous part). at::parallel_for is inline: this file is compiled with
/// OpenMP (engine/CMakeLists.txt), without which it would run every part on the calling thread.
int adamw_cpu_range(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, const AdamScalars& a) {
  std::atomic<int> parts{0};
  at::parallel_for(begin, end, 16384, [&](int64_t lo, int64_t hi) {
    parts.fetch_add(1, std::memory_order_relaxed);
    adamw_span(p, g, m, v, lo, hi, a);
  });
  return parts.load();
}

/// Calls fn(begin, end, decayed) for each non-empty span of a shard [0, numel) in order: the
/// decayed spans and, between them, the `no_decay` ranges (norm weights, padding). Both AdamW
/// passes split a shard this way.
template <typename Fn>
void for_each_decay_span(const std::vector<std::pair<int64_t, int64_t>>& no_decay, int64_t numel, Fn&& fn) {
  auto span = [&](int64_t begin, int64_t end, bool decayed) {
    if (end > begin) fn(begin, end, decayed);
  };
  int64_t at_elem = 0;
  for (const auto& [begin, end] : no_decay) {
    span(at_elem, begin, true);
    span(begin, end, false);
    at_elem = end;
  }
  span(at_elem, numel, true);
}

}  // namespace

AdamStep AdamW::begin_step(double lr, double grad_scale) {
  ++steps_;
  host_threads_ = 0;
  const double t = static_cast<double>(steps_);
  return {steps_, lr, grad_scale, 1.0 - std::pow(training_.beta1, t), 1.0 - std::pow(training_.beta2, t)};
}

HostShard AdamW::host_shard(FlatParamGroup* g) {
  g->finish_gradient_copy();  // the gradient is complete (landed on the host, or zeroed if none came)
  HostShard shard;
  shard.params = g->master.detach().data_ptr<float>();
  shard.grads = g->grad().data_ptr<float>();
  shard.exp_avg = g->exp_avg.data_ptr<float>();
  shard.exp_avg_sq = g->exp_avg_sq.data_ptr<float>();
  shard.numel = g->shard_numel();
  shard.no_decay = g->no_decay_ranges();
  return shard;
}

int AdamW::host_pass(const HostShard& shard, const AdamStep& s) {
  // One fused pass, decay on the elements outside the no-decay ranges.
  AdamScalars a{static_cast<float>(s.grad_scale),          1.0f,
                static_cast<float>(1.0 - training_.beta1), static_cast<float>(training_.beta2),
                static_cast<float>(1.0 - training_.beta2), static_cast<float>(s.bias2),
                static_cast<float>(training_.adam_eps),    static_cast<float>(-s.lr / s.bias1)};
  const float decay_keep = static_cast<float>(1.0 - s.lr * training_.weight_decay);
  int threads = 0;
  for_each_decay_span(shard.no_decay, shard.numel, [&](int64_t begin, int64_t end, bool decayed) {
    a.keep = decayed ? decay_keep : 1.0f;
    threads =
        std::max(threads, adamw_cpu_range(shard.params, shard.grads, shard.exp_avg, shard.exp_avg_sq, begin, end, a));
  });
  int seen = host_threads_.load();
  while (threads > seen && !host_threads_.compare_exchange_weak(seen, threads)) {
  }
  return threads;
}

void AdamW::update_group(FlatParamGroup* g, const AdamStep& s) {
  at::NoGradGuard no_grad;
  if (g->master.device().is_cpu()) {
    // The host optimizer (a CPU run, or the states offloaded), then this group's update goes up
    // now (async on a GPU, so it overlaps the next group's pass).
    host_pass(host_shard(g), s);
    g->refresh_device_params();
    return;
  }
  g->finish_gradient_copy();
  device_pass(g->master.detach(), g->grad(), g->exp_avg, g->exp_avg_sq, g->no_decay_ranges(), s);
}

void AdamW::device_pass(const at::Tensor& params, const at::Tensor& grads, const at::Tensor& exp_avg,
                        const at::Tensor& exp_avg_sq, const std::vector<std::pair<int64_t, int64_t>>& no_decay,
                        const AdamStep& s) const {
  at::NoGradGuard no_grad;
  CategoryScope category(MemCategory::Other);  // two scalars (the step, the clip's inverse); no [shard] temporary
  // The spans, as views of the four [shard] tensors: decayed (between the no-decay ranges, the
  // padding among the latter) and not.
  std::vector<at::Tensor> p[2], g[2], m[2], v[2];  // [0] decayed, [1] no decay
  for_each_decay_span(no_decay, params.numel(), [&](int64_t begin, int64_t end, bool decayed) {
    const int which = decayed ? 0 : 1;
    p[which].push_back(params.narrow(0, begin, end - begin));
    g[which].push_back(grads.narrow(0, begin, end - begin));
    m[which].push_back(exp_avg.narrow(0, begin, end - begin));
    v[which].push_back(exp_avg_sq.narrow(0, begin, end - begin));
  });
  // The kernel reads the step count from a float tensor per span (torch.optim advances it before
  // the call); the bias corrections are 1 - beta^t of it, as begin_step's.
  const at::Tensor step = at::full({}, static_cast<double>(s.t), params.options().dtype(at::kFloat));  // []
  std::optional<at::Tensor> inverse_clip;
  if (s.grad_scale != 1.0)
    inverse_clip = at::full({}, 1.0 / s.grad_scale, params.options().dtype(at::kFloat));  // [] the kernel divides by it
  for (int which = 0; which < 2; ++which) {
    if (p[which].empty()) continue;
    const std::vector<at::Tensor> steps(p[which].size(), step);
    at::_fused_adamw_(p[which], g[which], m[which], v[which], /*max_exp_avg_sqs=*/{}, steps, s.lr, training_.beta1,
                      training_.beta2, which == 0 ? training_.weight_decay : 0.0, training_.adam_eps,
                      /*amsgrad=*/false, /*maximize=*/false, inverse_clip, /*found_inf=*/std::nullopt);
  }
}

void AdamW::step(const std::vector<FlatParamGroup*>& groups, double lr, double grad_scale) {
  const AdamStep s = begin_step(lr, grad_scale);
  for (auto* g : groups) update_group(g, s);
}

void AdamW::zero_grad(const std::vector<FlatParamGroup*>& groups) {
  for (auto* g : groups) g->zero_gradient();
}

/// One group's pass in the pipeline: the shard and scalars, taken on the trainer's thread, and
/// whether the worker has finished it (guarded by the pipeline's mutex).
struct HostUpdatePipeline::Job {
  AdamW* optimizer = nullptr;
  HostShard shard;
  AdamStep step;
  bool done = false;
};

HostUpdatePipeline::~HostUpdatePipeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;  // the worker finishes what is queued first: no group is left half updated
  }
  queued_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void HostUpdatePipeline::start(AdamW& optimizer, const std::vector<FlatParamGroup*>& groups, const AdamStep& s) {
  if (!worker_.joinable()) worker_ = std::thread([this] { run_worker(); });  // started once, kept
  std::vector<std::shared_ptr<Job>> jobs;
  for (FlatParamGroup* g : groups) {  // every shard first: a failure here leaves no group pending
    g->await_update();                // a group the last forward did not use: its previous pass lands first
    auto job = std::make_shared<Job>();
    job->optimizer = &optimizer;
    job->shard = AdamW::host_shard(g);
    job->step = s;
    jobs.push_back(std::move(job));
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::shared_ptr<Job>& job = jobs[i];
    // The group's thread waits here (await_update); the worker sets `done` under the lock.
    groups[i]->set_pending_update(
        [this, job] {
          std::unique_lock<std::mutex> lock(mutex_);
          finished_.wait(lock, [&] { return job->done; });
        },
        [this, job] {
          std::lock_guard<std::mutex> lock(mutex_);
          return job->done;
        });
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch_started_ = false;
    batch_begin_s_ = batch_end_s_ = 0;
    for (auto& job : jobs) queue_.push_back(std::move(job));
  }
  queued_.notify_one();
}

std::pair<double, double> HostUpdatePipeline::last_pass_span_s() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!queue_.empty() || running_ > 0) return {0.0, 0.0};
  return {batch_begin_s_, batch_end_s_};
}

void HostUpdatePipeline::run_worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to finish
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    // at::parallel_for sizes this thread's OpenMP team from at::set_num_threads (ATen sets it on
    // each thread's first parallel region), so the pass runs on the trainer's intra-op threads.
    const double begin_s = telemetry_now_s();
    job->optimizer->host_pass(job->shard, job->step);
    const double end_s = telemetry_now_s();
    lock.lock();
    if (!batch_started_) batch_begin_s_ = begin_s;
    batch_started_ = true;
    batch_end_s_ = end_s;
    job->done = true;
    --running_;
    finished_.notify_all();
  }
}

}  // namespace odyssey
