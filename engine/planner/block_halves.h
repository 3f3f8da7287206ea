// The attention and MLP halves of one decoder block for the planner's liveness walk: what each
// allocates, keeps for backward and frees, in the engine's order (autograd's order in backward:
// the most recently created ready node runs first). Internal to engine/planner.
// defines: AttnSaved, MlpSaved, BlockHalves
#pragma once

#include <cstdint>
#include <vector>

#include "engine/planner/plan_shapes.h"
#include "engine/planner/step_walk.h"

namespace odyssey::planner_detail {

/// What the attention half leaves for its backward (handles; -1 = none).
struct AttnSaved {
  int n1 = -1, rstd = -1, q_pre = -1, k_pre = -1;  // norm output and 1/rms, pre-qk-norm q/k
  int q_h = -1, k_h = -1, v_h = -1, o_h = -1, lse = -1, o = -1;  // standard: SDPA's saved set, o_proj input
  int out = -1, lse_rest = -1;                                  // untied: the preallocated output, later LSEs
};

/// What the MLP half leaves for its backward.
struct MlpSaved {
  int n2 = -1, rstd = -1, gate = -1, up = -1, act = -1, prod = -1;
};

/// Walks the halves of a block on a ledger. Weight gradients are appended to `grads`: they live
/// until the block's reduce-scatter phase packs them (the engine holds them until it returns).
class BlockHalves {
 public:
  BlockHalves(const PlanShapes& s, LiveSet& m) : s_(s), m_(m) {}
  /// rmsnorm -> attention -> residual; returns h. With grad, `sv` gets what autograd keeps.
  int attention_forward(bool grad, AttnSaved& sv);
  /// From dh: frees `sv`, returns dx (the norm's input gradient with dh added in place).
  int attention_backward(int dh, AttnSaved& sv, std::vector<int>& grads);
  /// rmsnorm -> MLP (tiled or not) -> residual; returns the block output.
  int mlp_forward(bool grad, MlpSaved& sv);
  /// From dy: frees `sv`, returns dh (the norm's input gradient with dy added in place).
  int mlp_backward(MlpSaved& sv, std::vector<int>& grads);

  /// RMSNorm forward (output `kind` Hidden): the output and 1/rms; without grad 1/rms dies at once.
  int norm_forward(bool grad, const char* name, PlanCategory cat, int& rstd);
  /// RMSNorm backward from `dy` (freed, with `rstd`): the input gradient; the weight gradient goes
  /// to `grads` when given.
  int norm_backward(int& dy, int& rstd, PlanCategory cat, std::vector<int>* grads);

 private:
  int a(const char* name, TensorKind kind, PlanCategory cat, int32_t count = 1);
  void f(int& h);
  int rope(int& x, TensorKind kind, const char* name);
  int seq_to_heads(int& x, TensorKind local, TensorKind head, const char* name, bool drop_input = true);
  int heads_to_seq(int& x, TensorKind head, TensorKind local, const char* name, bool drop_input = true);
  void flash_forward_scratch();
  void mlp_tile_backward(std::vector<int>& accumulators);
  // Untied Ulysses (untied_walk.cpp)
  int untied_forward(bool grad, AttnSaved& sv);
  void untied_forward_stage(bool kv_new, bool straddle);
  int untied_backward(int d_o, AttnSaved& sv, std::vector<int>& grads);
  void untied_backward_stage(bool first_of_range, bool last_of_range, int& k_rows, int& v_rows, int& dk_acc32,
                             int& dv_acc32);
  void untied_projection_backward(TensorKind local, TensorKind rows, bool rope);

  const PlanShapes& s_;
  LiveSet& m_;
};

}  // namespace odyssey::planner_detail
