// The counting CPU allocator: c10::alloc_cpu with a 64-byte header before every block recording
// the rank, pool, category and size it was charged, installed with c10::SetCPUAllocator.
// defines: CountingCpuAllocator, MemoryTracker::install_cpu_allocator, retag_tensor
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <optional>
#include <stdexcept>
#include <utility>

#include "engine/telemetry/tensor_tags.h"
#include "engine/telemetry/tracker_state.h"

namespace odyssey {

namespace {

constexpr size_t kHeaderBytes = sizeof(BlockHeader);
/// Above SetCPUAllocator's default priority 0, so a later default registration cannot undo it.
constexpr uint8_t kCountingPriority = 100;

BlockHeader* header_of(void* data) { return reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kHeaderBytes); }

/// The deleter: uncharges exactly what the header says, on whatever thread frees the block.
void counting_delete(void* data) {
  if (data == nullptr) return;
  BlockHeader* block = header_of(data);
  MemoryTracker::instance().impl().release(block);
  block->magic = 0;
  c10::free_cpu(block);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return {nullptr, nullptr, &counting_delete, cpu};
    MemoryTracker::Impl& impl = MemoryTracker::instance().impl();
    const int rank = current_rank();
    const MemPool pool = current_pool();
    // Cheap pre-check so that a request far over the limit fails as an OOM before malloc.
    RankState& rs = impl.ranks[static_cast<size_t>(rank)];
    const int64_t limit = rs.device_limit.load(std::memory_order_relaxed);
    if (limit > 0 && pool == MemPool::Device &&
        rs.pool_bytes[0].load(std::memory_order_relaxed) + static_cast<int64_t>(n) > limit)
      impl.throw_oom(rank, static_cast<int64_t>(n));
    // alloc_cpu aligns to 64 bytes; the 64-byte header keeps the data aligned the same way.
    void* raw = c10::alloc_cpu(n + kHeaderBytes);
    auto* block = new (raw) BlockHeader();
    block->magic = kBlockMagic;
    block->bytes = static_cast<int64_t>(n);
    block->rank = static_cast<int16_t>(rank);
    block->pool = pool;
    block->category = current_category();
    try {
      impl.admit(block);  // exact limit check under the rank lock; throws OutOfMemoryError
    } catch (...) {
      c10::free_cpu(raw);
      throw;
    }
    void* data = static_cast<char*>(raw) + kHeaderBytes;
    // context == data: is_simple_data_ptr holds and raw_allocate/raw_deallocate work.
    return {data, data, &counting_delete, cpu};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &counting_delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

CountingCpuAllocator g_counting_allocator;  // must outlive every tensor: static, never replaced

/// The header of a tensor's storage when the counting allocator made it, else nullptr.
BlockHeader* counted_block(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return nullptr;
  const c10::DataPtr& ptr = tensor.storage().data_ptr();
  if (ptr.get_deleter() != &counting_delete || ptr.get() == nullptr) return nullptr;
  BlockHeader* block = header_of(ptr.get());
  return block->magic == kBlockMagic ? block : nullptr;
}

}  // namespace

void MemoryTracker::install_cpu_allocator() {
  std::lock_guard<std::mutex> lock(impl_->install_mutex);
  if (impl_->installed.load()) return;
  c10::SetCPUAllocator(&g_counting_allocator, kCountingPriority);
  // SetCPUAllocator ignores a call below the current priority without a word: check.
  if (c10::GetCPUAllocator() != &g_counting_allocator)
    throw std::runtime_error(
        "MemoryTracker::install_cpu_allocator: c10 kept another CPU allocator (one was set with a "
        "priority above " +
        std::to_string(kCountingPriority) + "); CPU bytes cannot be counted");
  impl_->installed.store(true);
}

/// The (device, address) of a CUDA tensor's storage, as the caching allocator's hook reported it.
static std::optional<std::pair<int, uintptr_t>> cuda_block_of(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage() || !tensor.is_cuda()) return std::nullopt;
  return std::make_pair(static_cast<int>(tensor.device().index()),
                        reinterpret_cast<uintptr_t>(tensor.storage().data_ptr().get()));
}

bool retag_tensor(const at::Tensor& tensor, MemCategory category) {
  if (const auto cuda = cuda_block_of(tensor))
    return MemoryTracker::instance().retag_cuda(cuda->first, cuda->second, category);
  BlockHeader* block = counted_block(tensor);
  if (block == nullptr) return false;
  MemoryTracker::instance().impl().retag(block, category);
  return true;
}

std::optional<MemCategory> tracker_category_of(const at::Tensor& tensor) {
  BlockHeader* block = counted_block(tensor);
  if (block == nullptr) return std::nullopt;
  const RankState& rs = MemoryTracker::instance().impl().ranks[static_cast<size_t>(block->rank)];
  std::lock_guard<std::mutex> lock(rs.mutex);
  return block->category;
}

c10::Allocator* counting_cpu_allocator() { return &g_counting_allocator; }

}  // namespace odyssey
