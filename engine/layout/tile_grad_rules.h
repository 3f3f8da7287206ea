// How the tiled MLP's backward and the tiled loss's CPU path add each tile's weight-gradient
// product into a sum over the tiles, for the engine (engine/memory/tiled_mlp.cpp, tiled_loss.cpp)
// and the planner's walks of them. defines: mlp_tile_grads_need_accumulators, tile_weight_grad_needs_temporary
#pragma once

namespace odyssey {

/// Rule: the tiled MLP's three [f, d] weight gradients are summed over the tiles in fp32. With
/// fp32 weights the sums are the gradients themselves; otherwise they are fp32 accumulators beside
/// the compute-dtype gradients they are cast to at the end (3 x [f, d] x 4 B while the tiles run).
inline bool mlp_tile_grads_need_accumulators(bool fp32_compute) { return !fp32_compute; }

/// Rule: each tile's weight-gradient product ([f, d] of the MLP, [V, d] of the LM head) goes
/// straight into its fp32 sum (one GEMM with beta = 1) when the product's dtype is fp32 or the
/// device writes a bf16 GEMM into fp32 (CUDA: addmm with out_dtype); otherwise (bf16 on the CPU,
/// which has no such GEMM) it is made in the compute dtype first and then added: one temporary a
/// product. Memory and traffic reason: the temporaries were written, read and added per tile (16
/// tiles a layer of the 1B at 32K: the tiled MLP's 1.9 points of its step on the H200).
inline bool tile_weight_grad_needs_temporary(bool fp32_compute, bool cuda) { return !fp32_compute && !cuda; }

}  // namespace odyssey
