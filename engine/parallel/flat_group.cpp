// FlatParamGroup: layout, deterministic init, unshard/reshard through a StorageImpl data-pointer
// swap, and gradient packing + reduce-scatter / all-reduce through the RankContext's Comm.
// defines: FlatParamGroup methods, ParamSpec::numel
#include "engine/parallel/flat_group.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/ops/layers.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"
#include "engine/telemetry/planned_buffer_log.h"
#if defined(ODYSSEY_WITH_CUDA)
#include "kernels/pinned_slab.h"
#endif

namespace odyssey {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {

// SplitMix64 step: decorrelates per-parameter seeds derived from one run seed.
uint64_t mix_seed(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

at::TensorOptions fp32_on(at::Device device) { return at::TensorOptions().dtype(at::kFloat).device(device); }

}  // namespace

int64_t lay_out_flat(std::vector<ParamSpec>& specs) {
  int64_t numel = 0;
  for (auto& spec : specs) {
    spec.offset = numel;
    numel += spec.numel();
  }
  return numel;
}

FlatParamGroup::FlatParamGroup(std::string name, std::vector<ParamSpec> specs, const RankContext& ctx,
                               const FlatGroupOptions& options)
    : name_(std::move(name)), specs_(std::move(specs)), ctx_(ctx), options_(options) {
  numel_ = lay_out_flat(specs_);
  if (numel_ <= 0) throw std::invalid_argument("flat group " + name_ + " has no parameters");
  shards_ = options_.fsdp ? ctx_.world_size : 1;
  if (shards_ < 1) throw std::invalid_argument("flat group " + name_ + ": world size " + std::to_string(shards_));
  const FlatShardLayout layout = flat_shard_layout(numel_, shards_);  // the planner's too
  shard_numel_ = layout.shard_numel;
  padded_numel_ = layout.padded_numel;
  shard_offset_ = options_.fsdp ? shard_numel_ * ctx_.rank : 0;
  // Local no-decay ranges: the intersection of each no-decay parameter (and the padding) with
  // this rank's shard, in local coordinates.
  auto add_range = [&](int64_t begin, int64_t end) {
    const int64_t lo = std::max(begin, shard_offset_), hi = std::min(end, shard_offset_ + shard_numel_);
    if (hi <= lo) return;
    if (!no_decay_ranges_.empty() && no_decay_ranges_.back().second == lo - shard_offset_)
      no_decay_ranges_.back().second = hi - shard_offset_;  // adjacent: merge
    else
      no_decay_ranges_.emplace_back(lo - shard_offset_, hi - shard_offset_);
  };
  for (const auto& spec : specs_)
    if (!spec.decay) add_range(spec.offset, spec.offset + spec.numel());
  add_range(numel_, padded_numel_);

  place_states(options_.offload_optimizer);
}

namespace {

/// Host state tensors on a CUDA device are pinned (the copies run at PCIe speed and asynchronously),
/// each one exact allocation: LibTorch's pinned allocator rounds up to a power of two (a Llama3-8B
/// block's 872 MB fp32 shard would take 1 GiB), which the planner does not charge. That memory is
/// not the counting CPU allocator's, so its bytes are charged to the tracker's host pool by hand
/// and returned when the tensor's storage is freed.
at::Tensor host_state_tensor(int64_t numel, at::Device device, MemCategory category) {
  CategoryScope scope(category);
  if (!device.is_cuda()) {
    PoolScope pool(MemPool::Host);  // CPU: the counting allocator charges the host pool
    return at::zeros({numel}, fp32_on(at::kCPU));
  }
  struct Holder {  // the memory and its charge, freed together with the storage
    int rank;
    MemCategory category;
    int64_t bytes;
#if defined(ODYSSEY_WITH_CUDA)
    std::unique_ptr<kernels::PinnedSlab> slab;
#else
    at::Tensor pinned;
#endif
    ~Holder() { MemoryTracker::instance().on_alloc(rank, MemPool::Host, category, -bytes); }
  };
  auto holder = std::make_shared<Holder>();
  holder->rank = current_rank();
  holder->category = category;
  holder->bytes = numel * 4;
  void* data = nullptr;
#if defined(ODYSSEY_WITH_CUDA)
  kernels::SlabLayout layout;
  layout.add(static_cast<size_t>(holder->bytes));
  holder->slab = std::make_unique<kernels::PinnedSlab>(std::move(layout));  // one exact cudaHostAlloc
  data = holder->slab->region(0);
#else
  holder->pinned = at::empty({numel}, fp32_on(at::kCPU).pinned_memory(true));
  data = holder->pinned.data_ptr();
#endif
  MemoryTracker::instance().on_alloc(holder->rank, MemPool::Host, category, holder->bytes);
  at::Tensor t = at::from_blob(
      data, {numel}, [holder](void*) mutable { holder.reset(); }, fp32_on(at::kCPU));
  t.zero_();  // [numel] fp32 in pinned host memory
  return t;
}

}  // namespace

void FlatParamGroup::place_states(bool on_host) {
  finish_gradient_copy();  // the old gradient is complete before it moves
  at::NoGradGuard no_grad;
  // The current states (undefined in the constructor), whose values move to the new home.
  const at::Tensor old_master = master.defined() ? master.detach() : at::Tensor();
  const at::Tensor old_grad = master.defined() ? master.grad() : at::Tensor();
  const at::Tensor old_avg = exp_avg, old_avg_sq = exp_avg_sq;
  auto fresh = [&](MemCategory category) {
    if (on_host) return host_state_tensor(shard_numel_, options_.device, category);
    CategoryScope scope(category);
    return at::zeros({shard_numel_}, fp32_on(options_.device));  // [shard] fp32
  };
  auto moved = [](at::Tensor to, const at::Tensor& from) {
    if (from.defined()) to.copy_(from);
    return to;
  };
  master = at::Tensor();  // free the old states as each new one arrives
  at::Tensor next_master = moved(fresh(MemCategory::Params), old_master);  // [shard] fp32 master weights
  at::Tensor next_grad = moved(fresh(MemCategory::Grads), old_grad);       // [shard] fp32 grads
  exp_avg = moved(fresh(MemCategory::Optimizer), old_avg);                 // [shard] AdamW first moment
  exp_avg_sq = moved(fresh(MemCategory::Optimizer), old_avg_sq);           // [shard] AdamW second moment
  master = next_master;
  master.requires_grad_(true);
  master.mutable_grad() = next_grad;
  for (const at::Tensor& shard : {master, master.grad(), exp_avg, exp_avg_sq})
    note_planned_buffer(tag(GroupBuffer::Shard), shard);
  states_on_host_ = on_host;

  // The device's compute-dtype shard: what the all-gather reads (or `full` itself, unsharded).
  device_params_ = at::Tensor();
  if (on_host) {
    CategoryScope category(MemCategory::Params);
    device_params_ = at::empty({shard_numel_}, at::TensorOptions().dtype(options_.compute).device(options_.device));
    note_planned_buffer(tag(GroupBuffer::DeviceParams), device_params_);
    device_params_.copy_(master.detach());  // [shard] compute dtype, host -> device
  }

  const int64_t element = static_cast<int64_t>(c10::elementSize(options_.compute));
  full_resident_ = !keeps_gathered_copy(shards_, element, on_host);  // the planner's rule too
  pending_gather_.reset();
  gather_staging_ = at::Tensor();
  views_.clear();
  if (full_resident_) {
    full_ = on_host ? device_params_ : master.detach();  // the parameters are views of it
  } else {
    // `full` keeps one StorageImpl for its whole life; (un)shard swaps the memory behind it.
    CategoryScope category(MemCategory::GatheredParams);
    full_ = at::empty({padded_numel_}, at::TensorOptions().dtype(options_.compute).device(options_.device));
    note_planned_buffer(tag(GroupBuffer::Full), full_);
  }
  unsharded_ = true;
  for (const auto& spec : specs_) views_.push_back(full_.narrow(0, spec.offset, spec.numel()).view(spec.shape));
  reshard();
}

void FlatParamGroup::set_states_on_host(bool on_host) {
  await_update();
  if (on_host == states_on_host_) return;
  reshard();
  place_states(on_host);
}

void FlatParamGroup::accumulate_gradient(const at::Tensor& shard) {
  at::NoGradGuard no_grad;
  at::Tensor& grad = master.mutable_grad();
  if (shard.device() == grad.device()) {
    if (grad_zeroed_)
      grad.copy_(shard);  // 0 + shard is shard (zero_gradient left the buffer as it was)
    else
      grad.add_(shard);
    grad_zeroed_ = grad_stale_ = false;
    return;
  }
  if (grad_zeroed_ && shard.device().is_cuda() && grad.is_pinned()) {
    // 0 + shard is shard: copy straight into the pinned gradient, asynchronously on the current
    // stream. The device shard may be freed at once: the caching allocator reuses its block only
    // for work queued after the copy on this stream.
    grad.copy_(shard, /*non_blocking=*/true);
    record_gradient_copy(shard.device());
    device_grad_norm_ = norm_in_double(shard);  // [] fp64 on the device, of the whole gradient
    grad_zeroed_ = grad_stale_ = false;
    return;
  }
  finish_gradient_copy();  // also zeroes a stale buffer: the paths below add into it
  if (shard.device().is_cuda() && grad.is_pinned()) {
    // A later contribution on a GPU (the tied embedding's second): the first comes back up and the
    // sum is made on the device, then goes down asynchronously as the first did. Time: two pinned
    // copies at PCIe speed, where a pageable copy down and an add over the host's memory took
    // 0.63 s a step for the 1B on the H200 (2026-11-26). Memory: one [shard] fp32 on the device
    // for the sum (the planner's TiedGradBack), in the embedding's backward.
    at::Tensor sum;
    {
      CategoryScope category(MemCategory::Grads);
      sum = grad.to(shard.device(), /*non_blocking=*/true);  // [shard] fp32, the first contribution
    }
    sum.add_(shard);  // first + later: the on-device gradient's add_, the same order
    grad.copy_(sum, /*non_blocking=*/true);
    record_gradient_copy(shard.device());
    device_grad_norm_ = norm_in_double(sum);  // [] fp64 on the device, of the whole gradient
    return;
  }
  // Down to the host (a transient [shard] fp32 host copy), then the add there.
  at::Tensor on_host;
  {
    CategoryScope category(MemCategory::Grads);
    PoolScope pool(MemPool::Host);
    on_host = shard.to(at::kCPU);
  }
  grad.add_(on_host);
  grad_zeroed_ = false;
  device_grad_norm_ = at::Tensor();  // the sum exists on the host only
}

void FlatParamGroup::record_gradient_copy(at::Device device) {
  c10::impl::VirtualGuardImpl guard(device.type());
  grad_copy_done_ = std::make_unique<c10::Event>(device.type());
  grad_copy_done_->record(guard.getStream(device));  // after the copy queued on the current stream
}

void FlatParamGroup::finish_gradient_copy() {
  if (grad_copy_done_) {
    grad_copy_done_->synchronize();
    grad_copy_done_.reset();
  }
  if (grad_stale_) {  // no contribution reached the group since zero_gradient: it reads zeros
    at::NoGradGuard no_grad;
    master.mutable_grad().zero_();
    grad_stale_ = false;
  }
}

void FlatParamGroup::zero_gradient() {
  finish_gradient_copy();
  // Time: no pass over the buffer now. The step's first contribution overwrites it (a copy: 0 +
  // shard is shard), so the host optimizer's gradients are not written twice a step (4 B a
  // parameter of host memory traffic); a group no contribution reaches is zeroed when it is read
  // (finish_gradient_copy, which every reader calls first).
  grad_zeroed_ = true;
  grad_stale_ = true;
  device_grad_norm_ = at::Tensor();
}

/// Bytes a parameter of the fp32 states: master, gradient and the two AdamW moments.
constexpr int64_t kStateBytesPerParam = 4 * 4;

int64_t FlatParamGroup::device_state_bytes() const {
  return states_on_host_ ? static_cast<int64_t>(device_params_.nbytes()) : kStateBytesPerParam * shard_numel_;
}

int64_t FlatParamGroup::host_state_bytes() const { return states_on_host_ ? kStateBytesPerParam * shard_numel_ : 0; }

void FlatParamGroup::refresh_device_params() {
  if (!states_on_host_) return;
  at::NoGradGuard no_grad;
  if (pending_gather_) unshard();
  const at::Tensor from = master.detach();  // [shard] fp32, pinned host memory on a GPU
  if (!device_params_.is_cuda() || device_params_.scalar_type() == at::kFloat) {
    // A CPU run: the cast itself. A GPU in fp32: pinned -> device, asynchronously.
    device_params_.copy_(from, /*non_blocking=*/device_params_.is_cuda());
    return;
  }
  // Time: ATen's copy_ across devices and dtypes casts on the host into fresh pageable memory and
  // copies that synchronously (0.54 s a step for the 1B on the H200, 2026-11-26). Instead the fp32
  // shard crosses PCIe asynchronously from pinned memory into a [shard] fp32 device buffer and is
  // cast there; the host goes on with the next group's AdamW pass. Memory: that buffer is the
  // planner's OptimizerTemp (largest shard x 4 B, category other); its block is reused only by
  // work queued after the cast on this stream. Every host write of the master (AdamW, a checkpoint
  // restore, init) is followed by a refresh, queued after any copy still in flight, so the
  // device's copy ends equal to the master.
  at::Tensor staging;
  {
    CategoryScope category(MemCategory::Other);
    staging = at::empty({shard_numel_}, fp32_on(options_.device));  // [shard] fp32 on the device
  }
  staging.copy_(from, /*non_blocking=*/true);
  device_params_.copy_(staging);  // [shard] compute dtype, cast on the device
}

void FlatParamGroup::await_update() {
  if (!pending_update_) return;
  // Taken before the refresh below, which may unshard (and so come back here).
  const std::function<void()> wait = std::exchange(pending_update_, nullptr);
  pending_finished_ = nullptr;
  // The phase shows what the step waits for: the pass, when the worker has not finished it yet,
  // and the upload (on a GPU queued on this stream ahead of the group's first kernel). Named by
  // the group ("block.3/host_update"): a block's is awaited outside its own forward's phases.
  PhaseScope phase(name_ + "/host_update");
  wait();
  try {
    refresh_device_params();
  } catch (...) {
    // The pass has finished but its upload failed (its staging buffer, after a step that ran out
    // of device memory): the update stays pending, so the group's next use uploads it again
    // instead of computing with the old weights. The wait is done: a no-op stands in for it.
    pending_update_ = [] {};
    pending_finished_ = [] { return true; };
    throw;
  }
}

FlatParamGroup::~FlatParamGroup() = default;

uint32_t init_chunk_seed(uint64_t seed, int64_t chunk) {
  uint32_t x = static_cast<uint32_t>(chunk);  // murmur3's fmix32: a bijection of 32-bit numbers
  x ^= x >> 16;
  x *= 0x85EBCA6BU;
  x ^= x >> 13;
  x *= 0xC2B2AE35U;
  x ^= x >> 16;
  return x ^ static_cast<uint32_t>(mix_seed(seed, 0));
}

int64_t FlatParamGroup::init(uint64_t seed, int64_t first_chunk) {
  // Rule: each tensor's values are drawn in chunks of kInitChunkElements, chunk n (numbered over
  // the model from the embedding's first) from its own generator seeded init_chunk_seed(seed, n),
  // so a rank draws only the chunks its shard overlaps and every rank's slice equals the
  // single-rank run's, whatever the world size. Time and memory reason: drawing the whole group
  // on every rank made the 8B's setup about 50 s a rank (8 ranks' 32 GB of fp32 on one thread
  // under emulation); the shard is an eighth of it, its chunks drawn in parallel.
  at::Tensor shard;  // [shard] fp32 on the CPU, padding zero
  {
    CategoryScope category(MemCategory::Other);
    shard = at::zeros({shard_numel_}, fp32_on(at::kCPU));
  }
  const int64_t lo = shard_offset_, hi = shard_offset_ + shard_numel_;
  struct Chunk {
    int64_t begin, end;  // group elements [begin, end)
    double std;
    int64_t number;  // over the model: its generator's seed
  };
  std::vector<Chunk> chunks;  // those this rank's shard overlaps
  int64_t number = first_chunk;
  for (const ParamSpec& spec : specs_) {
    const int64_t spec_end = spec.offset + spec.numel();
    if (spec.init_std <= 0) {  // norms: ones, no generator
      const int64_t begin = std::max(lo, spec.offset), end = std::min(hi, spec_end);
      if (begin < end) shard.narrow(0, begin - lo, end - begin).fill_(1.0);
      continue;
    }
    for (int64_t begin = spec.offset; begin < spec_end; begin += kInitChunkElements, ++number) {
      const int64_t end = std::min(begin + kInitChunkElements, spec_end);
      if (begin < hi && end > lo) chunks.push_back({begin, end, spec.init_std, number});
    }
  }
  const int rank_slot = ctx_.slot;  // the workers' allocations count as this rank's
  at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t first, int64_t last) {
    RankScope rank(rank_slot);
    CategoryScope category(MemCategory::Other);
    for (int64_t c = first; c < last; ++c) {
      const Chunk& chunk = chunks[c];
      auto gen = at::make_generator<at::CPUGeneratorImpl>(init_chunk_seed(seed, chunk.number));
      const int64_t begin = std::max(lo, chunk.begin), end = std::min(hi, chunk.end);
      at::Tensor target = shard.narrow(0, begin - lo, end - begin);
      if (begin == chunk.begin && end == chunk.end) {
        target.normal_(0.0, chunk.std, gen);  // the whole chunk is this rank's
      } else {                                // a chunk across the shard's edge: drawn whole, this rank's part kept
        at::Tensor drawn = at::empty({chunk.end - chunk.begin}, fp32_on(at::kCPU)).normal_(0.0, chunk.std, gen);
        target.copy_(drawn.narrow(0, begin - chunk.begin, end - begin));
      }
    }
  });
  at::NoGradGuard no_grad;
  master.copy_(shard);
  refresh_device_params();
  if (unsharded_ && !full_resident_) {
    unsharded_ = false;  // refill from the new master
    unshard();
  }
  return number;
}

void FlatParamGroup::allocate_full_memory() {
  const int64_t nbytes = padded_numel_ * static_cast<int64_t>(c10::elementSize(options_.compute));
  c10::Allocator* allocator = c10::GetAllocator(options_.device.type());
  CategoryScope category(MemCategory::GatheredParams);
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(allocator->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

void FlatParamGroup::unshard() {
  await_update();         // the host AdamW's update of the last step, at this first use
  if (pending_gather_) {  // a prefetch: the gather was started, now its output is needed
    std::unique_ptr<PendingCollective> pending = std::move(pending_gather_);
    pending->finish();
    gather_staging_ = at::Tensor();
    unsharded_ = true;
    return;
  }
  if (unsharded_) return;
  if (shards_ > 1) {
    unshard_async();
    unshard();
    return;
  }
  allocate_full_memory();
  at::Tensor writer = at::empty({0}, full_.options());
  writer.set_(full_.storage(), 0, {padded_numel_}, {1});
  at::NoGradGuard no_grad;
  writer.copy_(master.detach());  // cast fp32 -> compute dtype
  unsharded_ = true;
}

void FlatParamGroup::unshard_async() {
  await_update();
  if (unsharded_ || pending_gather_) return;
  if (shards_ <= 1) {
    unshard();  // a cast: nothing to overlap
    return;
  }
  allocate_full_memory();
  // Write through an alias with its own version counter: the views (which autograd may have
  // saved) must not see a version bump, only the same StorageImpl refilled.
  at::Tensor writer = at::empty({0}, full_.options());
  writer.set_(full_.storage(), 0, {padded_numel_}, {1});
  at::NoGradGuard no_grad;
  const int64_t element = static_cast<int64_t>(c10::elementSize(options_.compute));
  if (!gathers_from_cast(shards_, element, states_on_host_)) {
    // the device's compute-dtype copy of offloaded states, or the fp32 master itself
    gather_staging_ = states_on_host_ ? device_params_ : master.detach();
  } else {
    CategoryScope category(MemCategory::CommBuffers);
    gather_staging_ = master.detach().to(options_.compute);  // [shard] compute dtype staging for the all-gather
    note_planned_buffer(tag(GroupBuffer::ShardCast), gather_staging_);
  }
  pending_gather_ = ctx_.world->start_all_gather(writer, gather_staging_);
}

void FlatParamGroup::reshard() {
  if (pending_gather_) unshard();  // never free memory a collective is still writing
  if (!unsharded_ || full_resident_) return;
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, options_.device));  // frees the gathered bytes
  storage->set_nbytes(0);
  unsharded_ = false;
}

at::Tensor FlatParamGroup::pack_gradients(const std::vector<at::Tensor>& param_grads) const {
  if (param_grads.size() != specs_.size())
    throw std::invalid_argument("flat group " + name_ + ": " + std::to_string(param_grads.size()) + " gradients for " +
                                std::to_string(specs_.size()) + " parameters");
  at::Tensor flat;
  {
    CategoryScope category(MemCategory::CommBuffers);
    flat = at::empty({padded_numel_}, fp32_on(options_.device));  // [padded] fp32 packed gradients
    note_planned_buffer(tag(GroupBuffer::Pack), flat);
  }
  at::NoGradGuard no_grad;
  // Every element written once: the parameters lie back to back from 0 (lay_out_flat), each slot
  // takes its gradient or zeros (no gradient reached it), then the padding's zeros. A zero-filled
  // allocation would write the whole [padded] fp32 buffer once more (a block of the 1B: 243 MB).
  for (size_t i = 0; i < specs_.size(); ++i) {
    at::Tensor slot = flat.narrow(0, specs_[i].offset, specs_[i].numel());
    if (param_grads[i].defined())
      slot.copy_(param_grads[i].reshape(-1));
    else
      slot.zero_();
  }
  if (padded_numel_ > numel_) flat.narrow(0, numel_, padded_numel_ - numel_).zero_();
  return flat;
}

at::Tensor FlatParamGroup::reduce_gradients(const std::vector<at::Tensor>& param_grads) const {
  return reduce_flat(pack_gradients(param_grads));
}

FlatParamGroup::PendingGradient FlatParamGroup::start_reduce_gradients(
    const std::vector<at::Tensor>& param_grads) const {
  PendingGradient out;
  if (shards_ <= 1) {
    out.shard = reduce_gradients(param_grads);  // an all-reduce (or nothing): the result is final
    return out;
  }
  out.pack = pack_gradients(param_grads);
  CategoryScope category(MemCategory::CommBuffers);
  out.shard = at::empty({shard_numel_}, fp32_on(options_.device));  // [shard] reduce-scatter output
  note_planned_buffer(tag(GroupBuffer::ShardOut), out.shard);
  out.pending = ctx_.world->start_reduce_scatter_sum(out.shard, out.pack);
  return out;
}

at::Tensor FlatParamGroup::reduce_flat(at::Tensor flat) const {
  if (flat.numel() != padded_numel_ || flat.scalar_type() != at::kFloat)
    throw std::invalid_argument("flat group " + name_ + ": packed gradient has " + std::to_string(flat.numel()) +
                                " elements, expected fp32 " + std::to_string(padded_numel_));
  at::NoGradGuard no_grad;
  if (shards_ > 1) {
    at::Tensor shard;
    {
      CategoryScope category(MemCategory::CommBuffers);
      shard = at::empty({shard_numel_}, fp32_on(options_.device));  // [shard] reduce-scatter output
      note_planned_buffer(tag(GroupBuffer::ShardOut), shard);
    }
    ctx_.world->reduce_scatter_sum(shard, flat);
    return shard;
  }
  // Not sharded: every rank holds all N; ranks with different tokens sum their gradients.
  if (ctx_.world_size > 1) ctx_.world->all_reduce_sum(flat);
  return flat;
}

}  // namespace odyssey
