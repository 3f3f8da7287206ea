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
    throw std::out_of_range(std::string(where) + ": rank " + std::to_string(rank) +
                            " outside the tracked range [0, " + std::to_string(kMaxTrackedRanks) +
                            ")");
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

void MemoryTracker::Impl::admit(BlockHeader* block) {
  RankState& rs = ranks[static_cast<size_t>(block->rank)];
  {
    std::lock_guard<std::mutex> lock(rs.mutex);
    const int64_t limit = rs.device_limit.load(std::memory_order_relaxed);
    const bool over = block->pool == MemPool::Device && limit > 0 &&
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
  TORCH_CHECK_WITH(OutOfMemoryError, false, "odyssey memory tracker: out of memory on rank ", rank,
                   " in phase '", phase, "': tried to allocate ", requested, " bytes (",
                   human_bytes(requested), ") with ", held, " device bytes held; the device limit is ",
                   limit, " bytes (", human_bytes(limit), ")");
  __builtin_unreachable();
}

// [SECTION] CUDA statistics ----------------------------------------------------------------------

namespace {
struct CudaStats {
  int64_t allocated = 0, peak = 0, reserved = 0, retries = 0, ooms = 0;
};

#if defined(ODYSSEY_WITH_CUDA)
CudaStats read_cuda(int device) {
  namespace cca = c10::cuda::CUDACachingAllocator;
  const auto stats = cca::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return {stats.allocated_bytes[agg].current, stats.allocated_bytes[agg].peak,
          stats.reserved_bytes[agg].current, stats.num_alloc_retries, stats.num_ooms};
}
void reset_cuda_peak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}
bool cuda_available() { return at::hasCUDA(); }
#else
CudaStats read_cuda(int) { return {}; }
void reset_cuda_peak(int) {}
bool cuda_available() { return false; }
#endif

/// The caching allocator keeps one peak per device. Phase windows nest, so at every window edge
/// the peak of the interval since the previous edge is folded into the base and every open
/// window, then the device peak is reset: each window ends up with the exact maximum over its
/// own interval. Call under the rank mutex.
int64_t fold_cuda_peak(RankState& rs) {
  const CudaStats s = read_cuda(rs.cuda_device);
  rs.base.device_peak = std::max(rs.base.device_peak, s.peak);
  for (int i = 0; i < rs.window_count; ++i)
    rs.windows[i].device_peak = std::max(rs.windows[i].device_peak, s.peak);
  reset_cuda_peak(rs.cuda_device);
  return s.allocated;
}
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
  std::lock_guard<std::mutex> lock(rs.mutex);
  s.category_bytes = rs.category_bytes;
  s.device_bytes = rs.pool_bytes[0].load(std::memory_order_relaxed);
  s.host_bytes = rs.pool_bytes[1].load(std::memory_order_relaxed);
  s.device_peak = rs.base.device_peak;
  s.host_peak = rs.base.host_peak;
  s.category_at_peak = rs.base.category_at_peak;
  s.ooms = rs.ooms;
  if (rs.cuda_device >= 0) {
    const CudaStats c = read_cuda(rs.cuda_device);
    s.device_bytes = c.allocated;
    s.device_peak = std::max(rs.base.device_peak, c.peak);
    s.device_reserved = c.reserved;
    s.alloc_retries = c.retries;
    s.ooms += c.ooms;
  }
  return s;
}

int64_t MemoryTracker::device_bytes(int rank) const {
  const RankState& rs = impl_->rank(rank);
  if (rs.cuda_device >= 0) return read_cuda(rs.cuda_device).allocated;
  return rs.pool_bytes[0].load(std::memory_order_relaxed);
}

int64_t MemoryTracker::host_bytes(int rank) const {
  return impl_->rank(rank).pool_bytes[1].load(std::memory_order_relaxed);
}

void MemoryTracker::reset_peak(int rank) {
  RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  if (rs.cuda_device >= 0) fold_cuda_peak(rs);
  const int64_t device = rs.cuda_device >= 0 ? read_cuda(rs.cuda_device).allocated
                                             : rs.pool_bytes[0].load(std::memory_order_relaxed);
  rs.base.device_peak = device;
  rs.base.host_peak = rs.pool_bytes[1].load(std::memory_order_relaxed);
  rs.base.category_at_peak = rs.category_bytes;
}

void MemoryTracker::set_device_limit(int rank, int64_t bytes) {
  if (bytes < 0)
    throw std::invalid_argument("MemoryTracker::set_device_limit: negative limit " +
                                std::to_string(bytes) + " for rank " + std::to_string(rank));
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
    const int64_t held = std::min(rs.category_bytes[static_cast<size_t>(category)],
                                  rs.pool_bytes[static_cast<size_t>(pool)].load());
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
    throw std::length_error("MemoryTracker::open_peak_window: rank " + std::to_string(rank) +
                            " already has " + std::to_string(rs.window_count) +
                            " nested windows (the most is " + std::to_string(kMaxPeakWindows) + ")");
  int64_t device = rs.pool_bytes[0].load(std::memory_order_relaxed);
  if (rs.cuda_device >= 0) device = fold_cuda_peak(rs);
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
    throw std::logic_error("MemoryTracker::close_peak_window: rank " + std::to_string(rank) +
                           " closes window " + std::to_string(depth) + " but the innermost open one is " +
                           std::to_string(rs.window_count - 1) + " (windows close innermost first)");
  if (rs.cuda_device >= 0) fold_cuda_peak(rs);
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
  RankState& rs = impl_->rank(rank);
  // CUDA first: resetPeakStats on a device nobody initialised fails ("did you call init?").
  if (device_index >= 0) prepare_cuda();
  if (device_index >= 0 && !cuda_available())
    throw std::invalid_argument("MemoryTracker::set_cuda_device: rank " + std::to_string(rank) +
                                " asked for cuda:" + std::to_string(device_index) +
                                " but this build or machine has no CUDA");
  std::lock_guard<std::mutex> lock(rs.mutex);
  rs.cuda_device = device_index < 0 ? -1 : device_index;
  if (rs.cuda_device >= 0) reset_cuda_peak(rs.cuda_device);
}

int MemoryTracker::cuda_device(int rank) const {
  const RankState& rs = impl_->rank(rank);
  std::lock_guard<std::mutex> lock(rs.mutex);
  return rs.cuda_device;
}

}  // namespace odyssey
