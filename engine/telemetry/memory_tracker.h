// The memory tracker: counts every tensor byte per rank, per pool (device vs host offload) and per
// category. On CPU through a counting allocator installed with c10::SetCPUAllocator; on CUDA
// through the caching allocator's trace hook (every allocation and free, charged to the same
// thread-local rank and category), with reserved bytes, retries and OOMs from its statistics. defines: MemCategory, MemPool, CategoryScope, PoolScope,
// RankScope, MemorySnapshot, PeakWindow, MemoryTracker. How counting works: docs/telemetry.md.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "engine/config/memory_category.h"

namespace odyssey {

// MemCategory, kMemCategoryCount and to_string(MemCategory) come from engine/config/memory_category.h.

enum class MemPool : uint8_t { Device, Host };
constexpr int kMemPoolCount = 2;

/// The most ranks one process tracks (in-process rank threads).
constexpr int kMaxTrackedRanks = 64;

/// Allocations made on this thread while the scope lives are charged to `category` (nestable;
/// restores the previous category). Cheap: a thread-local store.
class CategoryScope {
 public:
  explicit CategoryScope(MemCategory category);
  ~CategoryScope();
  CategoryScope(const CategoryScope&) = delete;
  CategoryScope& operator=(const CategoryScope&) = delete;

 private:
  MemCategory previous_;
};

/// Allocations on this thread go to `pool` while the scope lives (offload copies use Host).
class PoolScope {
 public:
  explicit PoolScope(MemPool pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  MemPool previous_;
};

/// Binds this thread to a rank for the scope's life (rank threads set it once; autograd and
/// intra-op worker threads inherit nothing and are charged to the current rank only if the
/// engine sets it there too). Unbound threads are charged to rank 0. Throws std::out_of_range
/// unless 0 <= rank < kMaxTrackedRanks.
class RankScope {
 public:
  explicit RankScope(int rank);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  int previous_;
};

/// Current thread's bindings.
int current_rank();
MemCategory current_category();
MemPool current_pool();

/// Bytes of one rank at one instant.
struct MemorySnapshot {
  std::array<int64_t, kMemCategoryCount> category_bytes{};  ///< live bytes per category (both pools)
  int64_t device_bytes = 0;                                 ///< live bytes in the device pool
  int64_t host_bytes = 0;                                   ///< live bytes in the host pool
  int64_t device_peak = 0;                                  ///< peak device bytes since the last reset_peak
  int64_t host_peak = 0;                                    ///< peak host bytes since the last reset_peak
  /// Category bytes at the moment device_peak was reached.
  std::array<int64_t, kMemCategoryCount> category_at_peak{};
  int64_t device_reserved = 0;  ///< CUDA: reserved by the caching allocator (0 on CPU)
  int64_t alloc_retries = 0;    ///< CUDA: cudaMalloc retries
  int64_t ooms = 0;             ///< out-of-memory errors raised (tracker limit or CUDA)
};

/// The peak of one window (a phase): the most bytes reached while it was open, counted at
/// allocation time, and the category breakdown at the moment the device peak was reached.
struct PeakWindow {
  int64_t device_peak = 0;
  int64_t host_peak = 0;
  std::array<int64_t, kMemCategoryCount> category_at_peak{};
};

/// Nesting depth of peak windows per rank (phase scopes open one each).
constexpr int kMaxPeakWindows = 32;

/// Process-wide tracker. Thread-safe; counters are per rank.
class MemoryTracker {
 public:
  static MemoryTracker& instance();

  /// Installs the counting CPU allocator (idempotent). Tensors allocated before this call are
  /// not counted; call it before building any model.
  void install_cpu_allocator();
  bool cpu_allocator_installed() const;

  /// Counts of `rank` now. On CUDA devices, device_* come from the caching allocator.
  MemorySnapshot snapshot(int rank) const;
  /// Device bytes of `rank` now (fast path for phase edges).
  int64_t device_bytes(int rank) const;
  int64_t host_bytes(int rank) const;
  /// Starts a new peak window for `rank` (phase scopes use their own windows, see phase.h).
  void reset_peak(int rank);

  /// A failing allocation limit for tests and the OOM path: an allocation that would take the
  /// rank's device bytes above `bytes` throws c10::OutOfMemoryError naming the bytes requested,
  /// the rank and the current phase. 0 removes the limit.
  void set_device_limit(int rank, int64_t bytes);

  /// A monotonic allocation sequence number; allocations made later have larger numbers.
  uint64_t mark() const;
  /// Moves every live allocation of `rank` made after `marker` whose category is `from` into
  /// `to` (the block's forward left these alive: they are saved activations now).
  void retag_since(int rank, uint64_t marker, MemCategory from, MemCategory to);
  // Retagging one tensor's storage (checkpointed inputs): retag_tensor() in tensor_tags.h.

  /// Charges `bytes` (positive on allocation, negative on free) to a rank, pool and category
  /// without a block behind it (external memory the engine wants counted). The counting
  /// allocator does not use this path. A free never takes a counter below zero.
  void on_alloc(int rank, MemPool pool, MemCategory category, int64_t bytes);
  /// Name of the innermost phase of `rank` for OOM messages (set by phase scopes).
  void set_phase_name(int rank, const std::string& name);
  std::string phase_name(int rank) const;

  // --- extensions (telemetry-owned) ---

  /// Opens a nested peak window on `rank` (PhaseScope does this): it starts at the current
  /// bytes and follows every later allocation of that rank until closed. Returns its depth,
  /// which close_peak_window must be given (windows close innermost first). Throws past
  /// kMaxPeakWindows.
  int open_peak_window(int rank);
  /// Closes the innermost window of `rank` (`depth` from open_peak_window) and returns its peaks.
  PeakWindow close_peak_window(int rank, int depth);
  /// Open windows of `rank`.
  int peak_window_depth(int rank) const;

  /// The device limit of `rank` (0 = none).
  int64_t device_limit(int rank) const;
  /// Blocks the counting allocator has charged to `rank` and not yet freed.
  int64_t live_blocks(int rank) const;
  /// Allocations counted by the CPU allocator so far, all ranks (cheap; for tests and benches).
  uint64_t allocations_counted() const;

  /// `rank` runs on CUDA device `device_index`: its device side is counted from the caching
  /// allocator's trace hook (attached once per process, after prepare_cuda), its reserved bytes,
  /// retries and OOMs read from the allocator's statistics; -1 (default) counts on the CPU
  /// allocator. Without CUDA in the build or at run time, setting an index >= 0 throws.
  void set_cuda_device(int rank, int device_index);
  int cuda_device(int rank) const;

  /// The trace hook's work, public so that tests drive it without a GPU: `rank` is counted for
  /// CUDA device `device` (set_cuda_device without touching CUDA).
  void count_cuda_device(int rank, int device);
  /// An allocation of `bytes` at `addr` on CUDA device `device` by this thread: charged like a CPU
  /// block to this thread's rank, category and the device pool; to the rank counted for
  /// `device` when this thread's rank is not (NCCL's and autograd's own threads). Never throws
  /// (it runs under the allocator's lock): the device limit is the CPU counter's alone.
  void on_cuda_alloc(int device, uintptr_t addr, int64_t bytes);
  /// The free of a block on_cuda_alloc counted; unknown addresses (allocated before counting
  /// began, or on an uncounted device) are ignored.
  void on_cuda_free(int device, uintptr_t addr);
  /// Moves the counted CUDA block at `addr` into `to` (retag_tensor's CUDA half). False if unknown.
  bool retag_cuda(int device, uintptr_t addr, MemCategory to);
  /// CUDA blocks counted now, all devices.
  int64_t cuda_blocks() const;

  /// Internal state, shared with the counting allocator (tracker_state.h).
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  MemoryTracker();
  Impl* impl_;
};

}  // namespace odyssey
