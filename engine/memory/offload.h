// Offload of checkpointed block inputs (and of kept attention) to the host: put() after a block's
// forward, take() before its recompute (while the block below is prefetched), release() when its
// backward is done. defines: OffloadedKind, offloaded_kind_names, OffloadTransport, OffloadStore,
// make_host_clone_transport, make_cuda_transport, offload_copy_span
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "engine/layout/planned_buffers.h"
#include "kernels/slot_rotation.h"

namespace odyssey {

struct DeviceSpan;

/// What a store carries to the host.
///   BlockInputs:   the checkpointed block inputs [B, s, d] of offloaded_blocks (memory.offload_activations).
///   KeptAttention: each block's kept attention packed into bytes (KeptAttentionPayload) of
///                  kept_attention_offloaded_blocks (memory.offload_kept_attention).
enum class OffloadedKind : uint8_t { BlockInputs, KeptAttention };
/// What differs between the kinds, in one place: the trace's names, the planned-buffer tags and
/// the key that turns the offload on.
struct OffloadedKindNames {
  const char* span_word;    ///< "block" / "attention": span "d2h block.3"
  const char* track;        ///< "offload" / "kept attention": track "offload d2h"
  PlannedBuffer host_copy;  ///< the host copy's tag (CPU transport)
  PlannedBuffer slot;       ///< the device slot's tag
  const char* what;         ///< "block inputs" / "blocks' kept attention"
  const char* key;          ///< "memory.offload_activations" / "memory.offload_kept_attention"
};
const OffloadedKindNames& offloaded_kind_names(OffloadedKind kind);

/// The trace's span of one offload copy (category "copy"), untimed: each transport times it on
/// its own clock. Block inputs: track "offload d2h" / "offload h2d", named "d2h block.N" /
/// "h2d block.N". Kept attention: track "kept attention d2h" / "... h2d", named "d2h attention.N".
DeviceSpan offload_copy_span(OffloadedKind kind, int64_t layer, bool to_host, int64_t bytes);

/// How the bytes of the offloaded inputs move between the device and the host. The store decides
/// when (the schedule and the two device slots); a transport only copies.
///   CPU:  host clones under PoolScope(Host), category offloaded (make_host_clone_transport).
///   CUDA: one pinned slab of one region per offloaded block (offloaded_blocks: 1..n_layers-2)
///         allocated once, D2H on a side stream after an
///         event on the compute stream, H2D prefetch on another (make_cuda_transport).
class OffloadTransport {
 public:
  virtual ~OffloadTransport() = default;
  /// A step starts whose `blocks` (engine/layout/planned_buffers.h: 1..n_layers-2) each offload
  /// `input_bytes` (the slab is sized here, once: its host bytes are charged from the first step on).
  virtual void start_step(const OffloadedBlocks& blocks, int64_t input_bytes) = 0;
  /// Starts copying x [B, s, d] (contiguous) to `layer`'s host copy. x must stay alive until
  /// fence_copy(layer) (OffloadStore holds it).
  virtual void offload(int64_t layer, const at::Tensor& x) = 0;
  /// Compute work queued from here on runs after `layer`'s copy to the host has read x, so x may
  /// be freed now (CUDA: the compute stream waits for the copy's event, no host wait; CPU: the
  /// copy was synchronous).
  virtual void fence_copy(int64_t layer) = 0;
  /// Starts filling `slot` [B, s, d] from `layer`'s host copy.
  virtual void prefetch(int64_t layer, const at::Tensor& slot) = 0;
  /// Compute reads `layer`'s slot from here on (CUDA: the compute stream waits for the H2D).
  virtual void acquire(int64_t layer) = 0;
  /// Compute has queued its last read of `layer`'s slot.
  virtual void release(int64_t layer) = 0;
  /// Waits for every copy in flight and forgets the step (its end, or a failure half-way).
  virtual void end_step() = 0;
  /// Host bytes held now.
  virtual int64_t host_bytes() const = 0;
};

/// The CPU transport: each offload is a clone in the host pool, freed once prefetched.
std::unique_ptr<OffloadTransport> make_host_clone_transport(OffloadedKind kind = OffloadedKind::BlockInputs);
/// The CUDA transport on `device` (kernels::PinnedSlab + kernels::OffloadEngine, one slab and one
/// pair of copy streams per store); throws std::runtime_error on a build without the CUDA kernels.
std::unique_ptr<OffloadTransport> make_cuda_transport(at::Device device,
                                                      OffloadedKind kind = OffloadedKind::BlockInputs);

/// The offloaded inputs (or kept attention payloads) of one step, keyed by layer, and the two
/// device slots that bring them back
/// (kernels::SlotRotation: block i uses slot i % 2, so block i-1 is prefetched into the other slot
/// while block i recomputes). Memory: a slot is allocated at the first prefetch that needs it and
/// freed when no offloaded block is left to use it, so during the backward of block i the device
/// holds exactly block i's input and block i-1's (docs/planner.md), as the planner counts them.
class OffloadStore {
 public:
  /// The host-clone transport on CPU devices, the pinned-slab transport on CUDA (made at the first
  /// start_step: a run without offload never pins anything).
  explicit OffloadStore(at::Device device, OffloadedKind kind = OffloadedKind::BlockInputs);
  /// A given transport (tests).
  OffloadStore(at::Device device, std::unique_ptr<OffloadTransport> transport,
               OffloadedKind kind = OffloadedKind::BlockInputs);
  ~OffloadStore();
  OffloadStore(const OffloadStore&) = delete;
  OffloadStore& operator=(const OffloadStore&) = delete;

  /// Replaces the transport (tests: a recording one); only between steps.
  void set_transport(std::unique_ptr<OffloadTransport> transport);

  /// A step with offload starts: the inputs of `blocks` (offloaded_blocks, or
  /// kept_attention_offloaded_blocks) go to the host, each [input_sizes] of `dtype` (drops what a
  /// previous step left). Kept attention: [payload bytes] uint8 (LlamaModel::start_kept_offload_step).
  void start_step(const OffloadedBlocks& blocks, at::IntArrayRef input_sizes, at::ScalarType dtype);
  /// Starts copying x [B, s, d] to the host. The caller drops its device reference; the store
  /// keeps x until release_copied_input(), which the next block's forward calls after its
  /// attention.
  /// Memory: x stays on the device one block longer, through the next block's attention, so that
  /// its copy overlaps that attention (a side stream) and compute never waits for it. Freeing x at
  /// once would leave its memory to the caching allocator until the copy is seen done on the host
  /// (recordStream), and the host runs blocks ahead of the device: on the H200 (2026-11-27) up to
  /// 12 block inputs, 2.5 GiB, stayed held that way. Planned as this rule (engine/planner/step_walk.cpp).
  void put(int64_t layer, const at::Tensor& x);
  /// The input put() last is freed once compute is fenced behind its copy; no-op when none is held.
  void release_copied_input();
  /// Starts bringing `layer` back into its device slot. No-op when absent or already on its way.
  void prefetch(int64_t layer);
  /// `layer`'s input on the device [B, s, d] (prefetched, or brought back now), valid until
  /// release(layer); the store forgets the host copy.
  at::Tensor take(int64_t layer);
  /// The backward of `layer` is done with what take() returned: its slot is free for block
  /// layer - 2, or freed when no such block remains.
  void release(int64_t layer);

  /// `layer`'s input is on the host (put and not yet taken).
  bool holds(int64_t layer) const { return offloaded_.count(layer) > 0; }
  /// Drops everything, after waiting for copies in flight (end of step, or after a failed step).
  void clear();
  /// Bytes in the host pool (CUDA: the whole slab) / in the device slots.
  int64_t host_bytes() const;
  int64_t device_bytes() const;
  /// Inputs offloaded since construction (tests: proves offload really happened).
  int64_t total_offloaded() const { return total_offloaded_; }

 private:
  at::Device device_;
  OffloadedKind kind_;
  std::unique_ptr<OffloadTransport> transport_;
  std::vector<int64_t> input_sizes_;  ///< [B, s, d] of this step's inputs
  at::ScalarType dtype_ = at::kFloat;
  std::map<int64_t, bool> offloaded_;  ///< layer -> its prefetch was started
  int64_t copying_layer_ = -1;         ///< the layer whose input copying_source_ is (-1: none held)
  at::Tensor copying_source_;          ///< [B, s, d] device: put() last, until release_copied_input()
  kernels::SlotRotation rotation_;
  std::array<at::Tensor, kernels::SlotRotation::kSlots> slots_;  ///< [B, s, d] device, allocated on demand
  int64_t total_offloaded_ = 0;
};

}  // namespace odyssey
