// Retagging the bytes of one tensor's storage between memory categories (a checkpointed block
// input becomes saved_activations; an offloaded copy stays offloaded). LibTorch header.
// defines: retag_tensor, tracker_category_of, counting_cpu_allocator
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "engine/telemetry/memory_tracker.h"

namespace c10 {
struct Allocator;
}

namespace odyssey {

/// Moves the bytes of `tensor`'s storage into `category` (the storage keeps its rank and pool).
/// Returns false and does nothing when the storage was not allocated by the counting CPU
/// allocator (CUDA tensors, from_blob, tensors made before install_cpu_allocator, undefined).
/// Usage: retag_tensor(saved_input, MemCategory::SavedActivations);
bool retag_tensor(const at::Tensor& tensor, MemCategory category);

/// The category `tensor`'s storage is charged to, or nullopt when the tracker did not allocate it.
std::optional<MemCategory> tracker_category_of(const at::Tensor& tensor);

/// The counting allocator itself (benches swap it against c10's default to measure overhead).
c10::Allocator* counting_cpu_allocator();

}  // namespace odyssey
