// FlatParamGroup: layout, deterministic init, unshard/reshard through a StorageImpl data-pointer
// swap, and gradient packing + reduce-scatter / all-reduce through the RankContext's Comm.
// defines: FlatParamGroup methods, ParamSpec::numel
#include "engine/parallel/flat_group.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/Allocator.h>

#include <stdexcept>

#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/planned_buffer_log.h"

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
  full_is_master_ = !keeps_gathered_copy(shards_, static_cast<int64_t>(c10::elementSize(options_.compute)));

  {
    CategoryScope category(MemCategory::Params);
    master = at::zeros({shard_numel_}, fp32_on(options_.device));  // [shard] fp32 master weights
    master.requires_grad_(true);
  }
  {
    CategoryScope category(MemCategory::Grads);
    master.mutable_grad() = at::zeros({shard_numel_}, fp32_on(options_.device));  // [shard] fp32 grads
  }
  {
    CategoryScope category(MemCategory::Optimizer);
    exp_avg = at::zeros({shard_numel_}, fp32_on(options_.device));     // [shard]
    exp_avg_sq = at::zeros({shard_numel_}, fp32_on(options_.device));  // [shard]
  }
  for (const at::Tensor& shard : {master, master.grad(), exp_avg, exp_avg_sq})
    note_planned_buffer(tag(GroupBuffer::Shard), shard);

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

  if (full_is_master_) {
    full_ = master.detach();  // the parameters are views of the master itself
    unsharded_ = true;
  } else {
    // `full` keeps one StorageImpl for its whole life; (un)shard swaps the memory behind it.
    CategoryScope category(MemCategory::GatheredParams);
    full_ = at::empty({padded_numel_}, at::TensorOptions().dtype(options_.compute).device(options_.device));
    note_planned_buffer(tag(GroupBuffer::Full), full_);
    unsharded_ = true;
  }
  for (const auto& spec : specs_) views_.push_back(full_.narrow(0, spec.offset, spec.numel()).view(spec.shape));
  reshard();
}

FlatParamGroup::~FlatParamGroup() = default;

void FlatParamGroup::init(uint64_t seed) {
  at::Tensor whole;
  {
    CategoryScope category(MemCategory::Other);
    whole = at::zeros({padded_numel_}, fp32_on(at::kCPU));  // [padded] fp32, generated on the CPU
    for (size_t i = 0; i < specs_.size(); ++i) {
      const auto& spec = specs_[i];
      at::Tensor slot = whole.narrow(0, spec.offset, spec.numel());
      if (spec.init_std <= 0) {
        slot.fill_(1.0);
      } else {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, i));
        slot.normal_(0.0, spec.init_std, gen);
      }
    }
  }
  at::NoGradGuard no_grad;
  master.copy_(whole.narrow(0, shard_offset_, shard_numel_));
  if (unsharded_ && !full_is_master_) {
    unsharded_ = false;  // refill from the new master
    unshard();
  }
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
  if (options_.compute == at::kFloat) {
    gather_staging_ = master.detach();
  } else {
    CategoryScope category(MemCategory::CommBuffers);
    gather_staging_ = master.detach().to(options_.compute);  // [shard] compute dtype staging for the all-gather
    note_planned_buffer(tag(GroupBuffer::ShardCast), gather_staging_);
  }
  pending_gather_ = ctx_.world->start_all_gather(writer, gather_staging_);
}

void FlatParamGroup::reshard() {
  if (pending_gather_) unshard();  // never free memory a collective is still writing
  if (!unsharded_ || full_is_master_) return;
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, options_.device));  // frees the gathered bytes
  storage->set_nbytes(0);
  unsharded_ = false;
}

at::Tensor FlatParamGroup::pack_gradients(const std::vector<at::Tensor>& param_grads) const {
  if (param_grads.size() != specs_.size())
    throw std::invalid_argument("flat group " + name_ + ": " + std::to_string(param_grads.size()) +
                                " gradients for " + std::to_string(specs_.size()) + " parameters");
  at::Tensor flat;
  {
    CategoryScope category(MemCategory::CommBuffers);
    flat = at::zeros({padded_numel_}, fp32_on(options_.device));  // [padded] fp32 packed gradients
    note_planned_buffer(tag(GroupBuffer::Pack), flat);
  }
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!param_grads[i].defined()) continue;
    flat.narrow(0, specs_[i].offset, specs_[i].numel()).copy_(param_grads[i].reshape(-1));
  }
  return flat;
}

at::Tensor FlatParamGroup::reduce_gradients(const std::vector<at::Tensor>& param_grads) const {
  return reduce_flat(pack_gradients(param_grads));
}

FlatParamGroup::PendingGradient FlatParamGroup::start_reduce_gradients(const std::vector<at::Tensor>& param_grads) const {
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
