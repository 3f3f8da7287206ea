// The memory categories of DESIGN.md, one definition for the planner (which predicts bytes per
// category) and the memory tracker (which counts them), so a plan and a measurement compare directly.
// defines: MemCategory, kMemCategoryCount, kMemCategoryNames, to_string(MemCategory)
#pragma once

#include <array>
#include <cstdint>

namespace odyssey {

/// Which tensors belong to which category: docs/architecture.md.
enum class MemCategory : uint8_t {
  Params,
  Grads,
  Optimizer,
  GatheredParams,
  SavedActivations,
  Offloaded,
  AttentionWorkspace,
  MlpWorkspace,
  LossWorkspace,
  CommBuffers,
  Other,
};
inline constexpr int kMemCategoryCount = 11;

/// The names used in JSON, traces, the CLI and the studio, in enum order.
inline constexpr std::array<const char*, kMemCategoryCount> kMemCategoryNames = {"params",
                                                                                 "grads",
                                                                                 "optimizer",
                                                                                 "gathered_params",
                                                                                 "saved_activations",
                                                                                 "offloaded",
                                                                                 "attention_workspace",
                                                                                 "mlp_workspace",
                                                                                 "loss_workspace",
                                                                                 "comm_buffers",
                                                                                 "other"};

constexpr const char* to_string(MemCategory c) { return kMemCategoryNames[static_cast<int>(c)]; }

}  // namespace odyssey
