// The attention and MLP halves of one decoder block for the planner's liveness walk: what each
// allocates, keeps for backward and frees, in the engine's order. Internal to engine/planner.
// defines: AttnSaved, MlpSaved, AttnGrads, MlpGrads, FlashBackwardBuffers, BlockHalves
#pragma once

#include <array>
#include <cstdint>

#include "engine/planner/plan_shapes.h"
#include "engine/planner/step_walk.h"

namespace odyssey::planner_detail {

/// What the attention half leaves for its backward (handles; -1 = none).
struct AttnSaved {
  int n1 = -1, rstd = -1, q_pre = -1, k_pre = -1;                // norm output and stats, pre-qk-norm q/k
  int q_h = -1, k_h = -1, v_h = -1, o_h = -1, lse = -1, o = -1;  // standard: SDPA's saved set, o_proj input
  int out = -1;                                                  // untied: the preallocated output
  // memory.keep_attention: the checkpointed forward's output and LSE, kept for the recompute (which
  // replays them as o_h/out and lse)
  int kept_out = -1, kept_lse = -1;
};

/// The MLP weight gradients of one block, each made when its node (or the tiled Function) makes it
/// and held until the block's reduce-scatter (handles; -1 = none).
struct MlpGrads {
  int down = -1;           ///< the down projection's: the untiled backward's first product
  int gate = -1, up = -1;  ///< the gate and up projections': the untiled backward's last products
  int norm = -1;           ///< the MLP RMSNorm's: the backward's last
  std::array<int*, 4> handles() { return {&down, &gate, &up, &norm}; }
};

/// What the MLP half leaves for its backward.
struct MlpSaved {
  int n2 = -1, rstd = -1, gate = -1, up = -1, prod = -1;
};

/// The attention weight gradients of one block, each made when autograd (or the Untied Function)
/// makes it, and held until the block's reduce-scatter (handles; -1 = none).
struct AttnGrads {
  int out = -1;          ///< o_proj's: the backward's first product
  int projections = -1;  ///< wq, wk, wv (+ q/k norm): after the attention kernel's backward
  int norm = -1;         ///< the attention RMSNorm's: the backward's last
  std::array<int*, 3> handles() { return {&out, &projections, &norm}; }
};

/// A flash-attention backward's own buffers besides dq/dk/dv (handles; -1 = none).
struct FlashBackwardBuffers {
  /// document masking: one segment's dq, dk, dv before they are copied into the whole ones
  int segment_dq = -1, segment_dk = -1, segment_dv = -1;
  int softmax_d = -1;              ///< CUDA: FA-2's fp32 rowsum(dO * O), one per query row and head
  int accumulator = -1;            ///< CUDA: FA-2's fp32 dq accumulator; CPU: the kernel's block scratch
  int dk_wide = -1, dv_wide = -1;  ///< CUDA with GQA: dK/dV at the query-head count
};

/// Walks the halves of a block on a ledger.
class BlockHalves {
 public:
  BlockHalves(const PlanShapes& s, LiveSet& m) : s_(s), m_(m) {}
  /// The halves walked next are block `i`'s (whether it keeps its attention: PlanShapes::kept).
  void begin_block(int32_t i) { keeps_ = s_.keep_attention && s_.kept.keeps(i); }
  /// rmsnorm -> attention -> residual; returns h. With grad, `sv` gets what autograd keeps. Where
  /// the block keeps its attention (begin_block) the forward without grad keeps its output and LSE
  /// in `sv` (kept_out, kept_lse: saved_activations), and the recompute replays them: no kernel.
  int attention_forward(bool grad, AttnSaved& sv);
  /// From dh: frees `sv`, returns dx (written into dh); `grads` gets the attention weight gradients.
  int attention_backward(int dh, AttnSaved& sv, AttnGrads& grads);
  /// rmsnorm -> MLP (tiled or not) -> residual; returns the block output (-1 without need_output).
  int mlp_forward(bool grad, MlpSaved& sv, bool need_output = true);
  /// From dy: frees `sv`, returns dh = dy + d(MLP) (written into dy); `grads` gets the MLP weight
  /// gradients.
  int mlp_backward(MlpSaved& sv, MlpGrads& grads, int dy);

 private:
  /// The walk's two verbs: alloc a live tensor of `kind` (`count` of them; bytes from kind_bytes,
  /// the one table) and return its handle; release a handle (nothing for -1) and set it to -1.
  int alloc(const char* name, TensorKind kind, PlanCategory cat, int32_t count = 1);
  void release(int& h);
  int rope(int& x, TensorKind kind, PlanCategory cat);
  int rope_backward(int& dx, TensorKind kind, PlanCategory cat);
  int all_to_all(int& x, TensorKind from, TensorKind to, const char* recv_name, bool drop_input = true);
  int stage_rope(int& x, TensorKind local);
  int stage_to_heads(int& x, TensorKind local, TensorKind head, const char* recv_name, bool packed);
  int untied_forward(bool grad, AttnSaved& sv);
  int standard_backward(int dh, AttnSaved& sv, AttnGrads& grads);
  int projections_backward(int& dq, int& dk, int& dv, AttnSaved& sv, AttnGrads& grads);
  int untied_backward(int dh, AttnSaved& sv, AttnGrads& grads);
  /// The kernel's buffers of one flash-attention backward (`stage`: one Untied stage's sizes),
  /// allocated after its dq/dk/dv; free_flash_buffers releases them.
  FlashBackwardBuffers flash_backward_buffers(bool stage);
  void free_flash_buffers(FlashBackwardBuffers& b);
  /// What the flash forward holds while it runs besides its whole output and LSE (`stage`: one
  /// Untied stage's sizes): under document masking one segment's output and LSE, and on the CPU
  /// the kernel's per-thread buffer; all released when it returns.
  void flash_forward_transients(bool stage);
  /// ops::swiglu_backward_'s buffers: d up in up's memory (CUDA) or a new one (CPU); frees dp.
  int swiglu_backward(int& dp, int& up, TensorKind kind, const char* d_up_name);
  /// The fp32 CUDA kernel's K and V repeated to the query heads of a stage (`stage`) or of the
  /// standard call, for the call (none when the kernel takes GQA natively: kernel_repeats_kv).
  void repeated_kv(bool stage, int& k, int& v);
  void gathered_stage_kv(int& k, int& v);

  const PlanShapes& s_;
  LiveSet& m_;
  bool keeps_ = false;  ///< the block walked keeps its attention (begin_block)
  /// Inside an Untied pass at P > 1: the all-to-alls send through the pass's staging (held from
  /// its start to its end, hold_stage_staging), not through a send buffer of their own.
  bool staged_ = false;
  int hold_stage_staging();
  void drop_stage_staging(int& staging);
};

}  // namespace odyssey::planner_detail
