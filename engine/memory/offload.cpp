// OffloadStore (the schedule and the two device slots) and the CPU host-clone transport; the CUDA
// transport is in offload_cuda.cpp. defines: OffloadStore methods, make_host_clone_transport
#include "engine/memory/offload.h"

#include <exception>
#include <stdexcept>
#include <string>

#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/phase.h"
#include "engine/telemetry/planned_buffer_log.h"

namespace odyssey {

const OffloadedKindNames& offloaded_kind_names(OffloadedKind kind) {
  static const OffloadedKindNames kInputs{"block",
                                          "offload",
                                          PlannedBuffer::OffloadSlot,
                                          PlannedBuffer::OffloadPrefetchSlot,
                                          "block inputs",
                                          "memory.offload_activations"};
  static const OffloadedKindNames kKept{"attention",
                                        "kept attention",
                                        PlannedBuffer::KeptAttentionHostCopy,
                                        PlannedBuffer::KeptAttentionSlot,
                                        "blocks' kept attention",
                                        "memory.offload_kept_attention"};
  return kind == OffloadedKind::BlockInputs ? kInputs : kKept;
}

DeviceSpan offload_copy_span(OffloadedKind kind, int64_t layer, bool to_host, int64_t bytes) {
  const OffloadedKindNames& names = offloaded_kind_names(kind);
  const std::string direction = to_host ? "d2h" : "h2d";
  DeviceSpan span;
  span.name = direction + " " + names.span_word + "." + std::to_string(layer);
  span.category = "copy";
  span.track = std::string(names.track) + " " + direction;
  span.bytes = bytes;
  return span;
}

namespace {

/// The CPU's copies are synchronous on the rank thread: timed on the host clock from t_begin_s.
void note_host_copy(OffloadedKind kind, int64_t layer, bool to_host, int64_t bytes, double t_begin_s) {
  PhaseRecorder* recorder = PhaseRecorder::current();
  if (recorder == nullptr) return;
  DeviceSpan span = offload_copy_span(kind, layer, to_host, bytes);
  span.t_begin_s = t_begin_s;
  span.t_end_s = telemetry_now_s();
  recorder->add_host_span(std::move(span));
}

/// CPU: the host copy is a clone made under PoolScope(Host), category offloaded, so the tracker
/// shows device bytes falling and host bytes rising by exactly the input size; it is freed once
/// copied back into its slot.
class HostCloneTransport final : public OffloadTransport {
 public:
  explicit HostCloneTransport(OffloadedKind kind) : kind_(kind) {}
  void start_step(const OffloadedBlocks&, int64_t) override {}
  void offload(int64_t layer, const at::Tensor& x) override {
    const double t_begin = telemetry_now_s();
    {
      PoolScope pool(MemPool::Host);
      CategoryScope category(MemCategory::Offloaded);
      host_[layer] = x.detach().clone();  // [B, s, d] host (kept attention: [payload] uint8)
    }
    note_host_copy(kind_, layer, /*to_host=*/true, static_cast<int64_t>(x.nbytes()), t_begin);
    note_planned_buffer(offloaded_kind_names(kind_).host_copy, host_[layer]);
  }
  void prefetch(int64_t layer, const at::Tensor& slot) override {
    auto it = host_.find(layer);
    if (it == host_.end())
      throw std::logic_error("offload: block " + std::to_string(layer) + " has no host copy to prefetch");
    at::NoGradGuard no_grad;
    const double t_begin = telemetry_now_s();
    at::Tensor(slot).copy_(it->second);
    note_host_copy(kind_, layer, /*to_host=*/false, static_cast<int64_t>(it->second.nbytes()), t_begin);
    host_.erase(it);  // memory: the host copy is not needed once the device has it
  }
  void fence_copy(int64_t) override {}  // the clone is done: nothing reads x any more
  void acquire(int64_t) override {}
  void release(int64_t) override {}
  void end_step() override { host_.clear(); }
  int64_t host_bytes() const override {
    int64_t bytes = 0;
    for (const auto& [layer, t] : host_) bytes += static_cast<int64_t>(t.nbytes());
    return bytes;
  }

 private:
  OffloadedKind kind_;
  std::map<int64_t, at::Tensor> host_;
};

}  // namespace

std::unique_ptr<OffloadTransport> make_host_clone_transport(OffloadedKind kind) {
  return std::make_unique<HostCloneTransport>(kind);
}

OffloadStore::OffloadStore(at::Device device, OffloadedKind kind) : device_(device), kind_(kind) {}

OffloadStore::OffloadStore(at::Device device, std::unique_ptr<OffloadTransport> transport, OffloadedKind kind)
    : device_(device), kind_(kind), transport_(std::move(transport)) {}

OffloadStore::~OffloadStore() {
  try {
    clear();
  } catch (...) {  // a destructor must not throw; the copies are waited for or the device is gone
  }
}

void OffloadStore::set_transport(std::unique_ptr<OffloadTransport> transport) {
  clear();
  transport_ = std::move(transport);
}

void OffloadStore::start_step(const OffloadedBlocks& blocks, at::IntArrayRef input_sizes, at::ScalarType dtype) {
  if (!offloaded_.empty() || slots_[0].defined() || slots_[1].defined()) clear();  // a step left half-way
  if (!transport_)  // made at the first step that offloads: a run without offload never needs one
    transport_ = device_.is_cuda() ? make_cuda_transport(device_, kind_) : make_host_clone_transport(kind_);
  input_sizes_.assign(input_sizes.begin(), input_sizes.end());
  dtype_ = dtype;
  int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t n : input_sizes_) bytes *= n;
  transport_->start_step(blocks, bytes);
}

void OffloadStore::put(int64_t layer, const at::Tensor& x) {
  if (!transport_ || !x.sizes().equals(input_sizes_) || x.scalar_type() != dtype_)
    throw std::logic_error("offload: block " + std::to_string(layer) + "'s " +
                           (kind_ == OffloadedKind::KeptAttention ? "packed kept attention" : "input") + " is " +
                           std::string(x.toString()) + " of another shape than the step's " +
                           c10::str(at::IntArrayRef(input_sizes_)) + " (start_step)");
  release_copied_input();  // at most one input waits for its copy
  copying_source_ = x.is_contiguous() ? x : x.contiguous();
  copying_layer_ = layer;
  transport_->offload(layer, copying_source_);
  offloaded_[layer] = false;
  ++total_offloaded_;
}

void OffloadStore::release_copied_input() {
  if (copying_layer_ < 0) return;
  transport_->fence_copy(copying_layer_);
  copying_source_ = at::Tensor();  // memory: the device copy of the input is freed here
  copying_layer_ = -1;
}

void OffloadStore::prefetch(int64_t layer) {
  auto it = offloaded_.find(layer);
  if (it == offloaded_.end() || it->second) return;
  const int slot = rotation_.begin_fill(layer);  // throws when the block above still uses the slot
  at::Tensor& memory = slots_[static_cast<size_t>(slot)];
  if (!memory.defined()) {
    PoolScope pool(MemPool::Device);
    CategoryScope category(MemCategory::SavedActivations);
    memory = at::empty(input_sizes_, at::TensorOptions().dtype(dtype_).device(device_));  // [B, s, d]
    note_planned_buffer(offloaded_kind_names(kind_).slot, memory);
  }
  transport_->prefetch(layer, memory);
  it->second = true;
}

at::Tensor OffloadStore::take(int64_t layer) {
  if (!holds(layer))
    throw std::logic_error("offload: the input of block " + std::to_string(layer) + " was never offloaded");
  prefetch(layer);
  const int slot = rotation_.acquire(layer);
  transport_->acquire(layer);
  offloaded_.erase(layer);
  // An alias of the slot with its own version counter: the next refill of the slot (block
  // layer - 2) must not look like an in-place change to what this block's graph saved.
  const at::Tensor& memory = slots_[static_cast<size_t>(slot)];
  at::Tensor x = at::empty({0}, memory.options());
  x.set_(memory.storage(), 0, memory.sizes(), memory.strides());
  return x;
}

void OffloadStore::release(int64_t layer) {
  const int slot = rotation_.release(layer);
  transport_->release(layer);
  for (const auto& [waiting, prefetched] : offloaded_)
    if (kernels::SlotRotation::slot_for(waiting) == slot) return;  // a block below reuses the slot
  slots_[static_cast<size_t>(slot)] = at::Tensor();                // memory: no block left for this slot
}

void OffloadStore::clear() {
  // first: no copy may still write a slot that is freed below. A wait that fails (a device in
  // error) still leaves the store empty, then reports.
  std::exception_ptr failed;
  if (transport_) {
    try {
      transport_->end_step();
    } catch (...) {
      failed = std::current_exception();
    }
  }
  copying_source_ = at::Tensor();  // its copy is done (end_step waited for it)
  copying_layer_ = -1;
  offloaded_.clear();
  rotation_.reset();
  for (at::Tensor& s : slots_) s = at::Tensor();
  if (failed) std::rethrow_exception(failed);
}

int64_t OffloadStore::host_bytes() const { return transport_ ? transport_->host_bytes() : 0; }

int64_t OffloadStore::device_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& s : slots_)
    if (s.defined()) bytes += static_cast<int64_t>(s.nbytes());
  return bytes;
}

}  // namespace odyssey
