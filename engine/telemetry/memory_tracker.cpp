// The memory tracker's counters: thread-local rank/pool/category bindings, per-rank charging with
// exact peaks and nested peak windows, the device limit (OOM path), retagging and CUDA statistics.
// defines: the members of MemoryTracker, CategoryScope, PoolScope, RankScope, RankState::charge
#include "engine/telemetry/memory_tracker.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/tracker_state.h"

#if defined(ODYSSEY_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace odyssey {

// [SECTION] thread-local bindings ---------------------------------------------------------------

namespace {
thread_local int t_rank = 0;
thread_local MemCategory t_category = MemCategory::Other;
thread_local MemPool t_pool = MemPool::Device;

void check_rank(int rank, const char* where) {
  if (rank < 0 || rank >= kMaxTrackedRanks)
    throw std::out_of_range(std::string(where) + ": rank " + std::to_string(rank) + " outside the tracked range [0, " +
                            std::to_string(kMaxTrackedRanks) + ")");
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}
}  // namespace

CategoryScope::CategoryScope(MemCategory category) : previous_(t_category) { t_category = category; }
CategoryScope::~CategoryScope() { t_category = previous_; }

PoolScope::PoolScope(MemPool pool) : previous_(t_pool) { t_pool = pool; }
PoolScope::~PoolScope() { t_pool = previous_; }

RankScope::RankScope(int rank) : previous_(t_rank) {
  check_rank(rank, "RankScope");
  t_rank = rank;
}
RankScope::~RankScope() { t_rank = previous_; }

int current_rank() { return t_rank; }
MemCategory current_category() { return t_category; }
MemPool current_pool() { return t_pool; }

// [SECTION] charging and peaks -----------------------------------------------------------------

void RankState::charge(MemPool pool, MemCategory category, int64_t delta) {
  const auto p = static_cast<size_t>(pool);
  const int64_t now = pool_bytes[p].load(std::memory_order_relaxed) + delta;
  pool_bytes[p].store(now, std::memory_order_relaxed);
  category_bytes[static_cast<size_t>(category)] += delta;
  if (delta <= 0) return;
  // Windows nest, so an outer window's peak is never below an inner one's: walk outward from
  // the innermost and stop at the first window the new total does not pass (usually at once).
  if (pool == MemPool::Device) {
    if (now > base.device_peak) {
      base.device_peak = now;
      base.category_at_peak = category_bytes;
    }
    for (int i = window_count - 1; i >= 0 && now > windows[i].device_peak; --i) {
      windows[i].device_peak = now;
      windows[i].category_at_peak = category_bytes;
    }
  } else {
    base.host_peak = std::max(base.host_peak, now);
    for (int i = window_count - 1; i >= 0 && now > windows[i].host_peak; --i) windows[i].host_peak = now;
  }
}

RankState& MemoryTracker::Impl::rank(int r) {
  check_rank(r, "MemoryTracker");
  return ranks[static_cast<size_t>(r)];
}
const RankState& MemoryTracker::Impl::rank(int r) const {
  check_rank(r, "MemoryTracker");
  return ranks[static_cast<size_t>(r)];
}

void MemoryTracker::Impl::admit(BlockHeader* block, bool enforce_limit) {
  RankState& rs = ranks[static_cast<size_t>(block->rank)];
  {
    std::lock_guard<std::mutex> lock(rs.mutex);
    const int64_t limit = rs.device_limit.load(std::memory_order_relaxed);
    const bool over = enforce_limit && block->pool == MemPool::Device && limit > 0 &&
                      rs.pool_bytes[0].load(std::memory_order_relaxed) + block->bytes > limit;
    if (!over) {
      block->seq = next_seq.fetch_add(1, std::memory_order_relaxed);
      block->prev = rs.live.prev;  // append: the live list stays in sequence order per rank
      block->next = &rs.live;
      rs.live.prev->next = block;
      rs.live.prev = block;
      ++rs.live_blocks;
      rs.charge(block->pool, block->category, block->bytes);
      allocations.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  throw_oom(block->rank, block->bytes);
}

void MemoryTracker::Impl::release(BlockHeader* block) {
  RankState& rs = ranks[static_cast<size_t>(block->rank)];
  std::lock_guard<std::mutex> lock(rs.mutex);
  block->prev->next = block->next;
  block->next->prev = block->prev;
  --rs.live_blocks;
  rs.charge(block->pool, block->category, -block->bytes);
}

void MemoryTracker::Impl::retag(BlockHeader* block, MemCategory to) {
  RankState& rs = ranks[static_cast<size_t>(block->rank)];
  std::lock_guard<std::mutex> lock(rs.mutex);
  if (block->category == to) return;
  rs.category_bytes[static_cast<size_t>(block->category)] -= block->bytes;
  rs.category_bytes[static_cast<size_t>(to)] += block->bytes;
  block->category = to;
}

void MemoryTracker::Impl::throw_oom(int rank, int64_t requested) {
  RankState& rs = ranks[static_cast<size_t>(rank)];
  std::string phase;
  int64_t held = 0, limit = 0;
  {
    std::lock_guard<std::mutex> lock(rs.mutex);
    ++rs.ooms;
    phase = rs.phase_name.empty() ? std::string("(no phase)") : rs.phase_name;
    held = rs.pool_bytes[0].load(std::memory_order_relaxed);
    limit = rs.device_limit.load(std::memory_order_relaxed);
  }
  TORCH_CHECK_WITH(OutOfMemoryError, false, "odyssey memory tracker: out of memory on rank ", rank, " in phase '",
                   phase, "': tried to allocate ", requested, " bytes (", human_bytes(requested), ") with ", held,
                   " device bytes held; the device limit is ", limit, " bytes (", human_bytes(limit), ")");
  __builtin_unreachable();
}

// [SECTION] CUDA statistics ----------------------------------------------------------------------

namespace {
/// What only the caching allocator knows (the bytes themselves are counted by the trace hook).
/// Read without any rank lock held: the allocator calls the hook under its own lock, and the hook
/// takes the rank's, so the other order would deadlock.
struct CudaStats {
  int64_t reserved = 0, retries = 0, ooms = 0;
};

#if defined(ODYSSEY_WITH_CUDA)
CudaStats read_cuda(int device) {
  namespace cca = c10::cuda::CUDACachingAllocator;
  const auto stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return {stats.reserved_bytes[agg].current, stats.num_alloc_retries, stats.num_ooms};
}
bool cuda_available() { return at::hasCUDA(); }
/// Attaches the trace hook once per process: allocations and completed frees of every device go
/// to the tracker (the allocator holds its lock while calling; the hook takes only the tracker's).
void attach_cuda_hook(MemoryTracker& tracker) {
  c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(
      [&tracker](const c10::CachingDeviceAllocator::TraceEntry& e) {
        using Action = c10::CachingDeviceAllocator::TraceEntry::Action;
        if (e.action_ == Action::ALLOC)
          tracker.on_cuda_alloc(e.device_, e.addr_, static_cast<int64_t>(e.size_));
        else if (e.action_ == Action::FREE_COMPLETED)
          tracker.on_cuda_free(e.device_, e.addr_);
      });
}
#else
CudaStats read_cuda(int) { return {}; }
bool cuda_available() { return false; }
void attach_cuda_hook(MemoryTracker&) {}
#endif
}  // namespace

// [SECTION] public API ---------------------------------------------------------------------------

MemoryTracker& MemoryTracker::instance() {
  // Never destroyed: deleters of tensors that outlive main's statics still reach it.
  static MemoryTracker* tracker = new MemoryTracker();
  return *tracker;
}

MemoryTracker::MemoryTracker() : impl_(new Impl()) {}

bool MemoryTracker::cpu_allocator_installed() const { return impl_->installed.load(); }

MemorySnapshot MemoryTracker::snapshot(int rank) const {
  RankState& rs = impl_->rank(rank);
  MemorySnapshot s;
  const int cuda = rs.cuda_device.load();
  // Before the lock; only for a device the hook counts for real (tests count fakes without CUDA).
  const CudaStats c = cuda >= 0 && impl_->cuda_hook_attached.load() ? read_cuda(cuda) : CudaStats{};
  std::lock_guard<std::mutex> lock(rs.mutex);
  s.category_bytes = rs.category_bytes;
  s.device_bytes = rs.pool_bytes[0].load(std::memory_order_relaxed);
  s.host_bytes = rs.pool_bytes[1].load(std::memory_order_relaxed);
  s.device_peak = rs.base.device_peak;
  s.host_peak = rs.base.host_peak;
  s.category_at_peak = rs.base.category_at_peak;
  s.ooms = rs.ooms + c.ooms;
  s.device_reserved = c.reserved;
  s.alloc_retries = c.retries;
  return s;
}

int64_t MemoryTracker::device_bytes(int rank) const {
  return impl_->rank(rank).pool_bytes[0].load(std::memory_order_relaxed);
}

int64_t MemoryTracker::host_bytes(int rank) const {
  return impl_->rank(rank).pool_bytes[1].load(std::memory_order_relaxed);
}

void MemoryTracker::reset_peak(int rank) {
  RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  const int64_t device = rs.pool_bytes[0].load(std::memory_order_relaxed);
  rs.base.device_peak = device;
  rs.base.host_peak = rs.pool_bytes[1].load(std::memory_order_relaxed);
  rs.base.category_at_peak = rs.category_bytes;
}

void MemoryTracker::set_device_limit(int rank, int64_t bytes) {
  if (bytes < 0)
    throw std::invalid_argument("MemoryTracker::set_device_limit: negative limit " + std::to_string(bytes) +
                                " for rank " + std::to_string(rank));
  impl_->rank(rank).device_limit.store(bytes);
}

int64_t MemoryTracker::device_limit(int rank) const { return impl_->rank(rank).device_limit.load(); }

uint64_t MemoryTracker::mark() const { return impl_->next_seq.load(std::memory_order_relaxed); }

void MemoryTracker::retag_since(int rank, uint64_t marker, MemCategory from, MemCategory to) {
  if (from == to) return;
  RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  // Newest first; the list is in sequence order, so stop at the first block older than marker.
  for (BlockHeader* b = rs.live.prev; b != &rs.live && b->seq >= marker; b = b->prev) {
    if (b->category != from) continue;
    rs.category_bytes[static_cast<size_t>(from)] -= b->bytes;
    rs.category_bytes[static_cast<size_t>(to)] += b->bytes;
    b->category = to;
  }
}

void MemoryTracker::on_alloc(int rank, MemPool pool, MemCategory category, int64_t bytes) {
  RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  if (bytes < 0) {  // never below zero, whatever was freed
    const int64_t held =
        std::min(rs.category_bytes[static_cast<size_t>(category)], rs.pool_bytes[static_cast<size_t>(pool)].load());
    bytes = -std::min(-bytes, std::max<int64_t>(held, 0));
  }
  if (bytes != 0) rs.charge(pool, category, bytes);
}

void MemoryTracker::set_phase_name(int rank, const std::string& name) {
  RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  rs.phase_name = name;
}

std::string MemoryTracker::phase_name(int rank) const {
  const RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  return rs.phase_name;
}

int MemoryTracker::open_peak_window(int rank) {
  RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  if (rs.window_count >= kMaxPeakWindows)
    throw std::length_error("MemoryTracker::open_peak_window: rank " + std::to_string(rank) + " already has " +
                            std::to_string(rs.window_count) + " nested windows (the most is " +
                            std::to_string(kMaxPeakWindows) + ")");
  const int64_t device = rs.pool_bytes[0].load(std::memory_order_relaxed);
  PeakWindow& w = rs.windows[static_cast<size_t>(rs.window_count)];
  w.device_peak = device;
  w.host_peak = rs.pool_bytes[1].load(std::memory_order_relaxed);
  w.category_at_peak = rs.category_bytes;
  return rs.window_count++;
}

PeakWindow MemoryTracker::close_peak_window(int rank, int depth) {
  RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  if (depth != rs.window_count - 1)
    throw std::logic_error("MemoryTracker::close_peak_window: rank " + std::to_string(rank) + " closes window " +
                           std::to_string(depth) + " but the innermost open one is " +
                           std::to_string(rs.window_count - 1) + " (windows close innermost first)");
  return rs.windows[static_cast<size_t>(--rs.window_count)];
}

int MemoryTracker::peak_window_depth(int rank) const {
  const RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  return rs.window_count;
}

int64_t MemoryTracker::live_blocks(int rank) const {
  const RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  return rs.live_blocks;
}

uint64_t MemoryTracker::allocations_counted() const { return impl_->allocations.load(); }

void MemoryTracker::set_cuda_device(int rank, int device_index) {
  // CUDA first: statistics calls on a device nobody initialised fail ("did you call init?").
  if (device_index >= 0) prepare_cuda();
  if (device_index >= 0 && !cuda_available())
    throw std::invalid_argument("MemoryTracker::set_cuda_device: rank " + std::to_string(rank) + " asked for cuda:" +
                                std::to_string(device_index) + " but this build or machine has no CUDA");
  if (device_index >= 0 && !impl_->cuda_hook_attached.exchange(true)) attach_cuda_hook(*this);
  count_cuda_device(rank, device_index);
}

void MemoryTracker::count_cuda_device(int rank, int device) {
  RankState& rs = impl_->rank(rank);
  if (device >= kMaxTrackedRanks)
    throw std::out_of_range("MemoryTracker: cuda:" + std::to_string(device) + " past the " +
                            std::to_string(kMaxTrackedRanks) + " devices one process counts");
  const int previous = rs.cuda_device.exchange(device < 0 ? -1 : device);
  if (previous >= 0) impl_->device_slot[static_cast<size_t>(previous)].store(-1);
  if (device >= 0) impl_->device_slot[static_cast<size_t>(device)].store(rank);
  rs.cuda_counted.store(device >= 0);
}

void MemoryTracker::on_cuda_alloc(int device, uintptr_t addr, int64_t bytes) {
  if (device < 0 || device >= kMaxTrackedRanks || bytes <= 0) return;
  // This thread's rank when it runs on `device`; else the rank counted for `device` (threads no
  // rank scope binds: NCCL's, an autograd device thread), else nobody's.
  int rank = current_rank();
  if (impl_->ranks[static_cast<size_t>(rank)].cuda_device.load() != device)
    rank = impl_->device_slot[static_cast<size_t>(device)].load();
  if (rank < 0) return;
  auto* block = new BlockHeader();
  block->magic = kBlockMagic;
  block->bytes = bytes;
  block->rank = static_cast<int16_t>(rank);
  block->pool = MemPool::Device;
  block->category = current_category();
  {
    std::lock_guard<std::mutex> lock(impl_->cuda_mutex);
    auto [it, fresh] = impl_->cuda_blocks.emplace(std::make_pair(device, addr), block);
    if (!fresh) {  // an address reused without our seeing its free: settle the old block first
      impl_->release(it->second);
      delete it->second;
      it->second = block;
    }
  }
  impl_->admit(block, /*enforce_limit=*/false);
}

void MemoryTracker::on_cuda_free(int device, uintptr_t addr) {
  BlockHeader* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->cuda_mutex);
    auto it = impl_->cuda_blocks.find({device, addr});
    if (it == impl_->cuda_blocks.end()) return;
    block = it->second;
    impl_->cuda_blocks.erase(it);
  }
  impl_->release(block);
  delete block;
}

bool MemoryTracker::retag_cuda(int device, uintptr_t addr, MemCategory to) {
  std::lock_guard<std::mutex> lock(impl_->cuda_mutex);
  auto it = impl_->cuda_blocks.find({device, addr});
  if (it == impl_->cuda_blocks.end()) return false;
  impl_->retag(it->second, to);
  return true;
}

int64_t MemoryTracker::cuda_blocks() const {
  std::lock_guard<std::mutex> lock(impl_->cuda_mutex);
  return static_cast<int64_t>(impl_->cuda_blocks.size());
}

int MemoryTracker::cuda_device(int rank) const {
  const RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  return rs.cuda_device;
}

}  // namespace odyssey
