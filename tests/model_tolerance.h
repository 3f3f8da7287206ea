// The equivalence tolerances of a whole model's step, derived from the rounding of its arithmetic
// (fp_tolerance.h) over the model's shape: for the engine suites and the CLI's multi-process runs.
// No LibTorch. defines: block_chain, loss_chain, gradient_chain, kModelKappa, loss_tolerance,
// gradient_tolerance, optimizer_tolerance
#pragma once

#include <cstdint>

#include "engine/config/run_config.h"
#include "fp_tolerance.h"

namespace odyssey::test {

/// Rounded operations on the longest chain of one block's forward: the reductions over d (two
/// RMSNorms, the Q/K/V and gate/up projections), head_dim (QK^T), the sequence twice (softmax
/// normaliser, P.V), q_dim (output projection) and d_ffn (down projection).
inline int64_t block_chain(const RunConfig& c) {
  const ModelConfig& m = c.model;
  return 4 * m.d_model + m.head_dim + 2 * c.training.seq_len + m.q_dim() + m.d_ffn;
}
/// The loss of a step over `sequences` sequences: every block, the final norm and the LM head
/// (over d), the log-sum-exp over the vocabulary and the mean over the batch's tokens.
inline int64_t loss_chain(const RunConfig& c, int64_t sequences) {
  return c.model.n_layers * block_chain(c) + 2 * c.model.d_model + c.model.vocab_size + sequences * c.training.seq_len;
}
/// A parameter's gradient: the loss's chain, back through every block (about twice the forward's
/// reductions: activations' and weights' gradients), and the weight-gradient sum over the tokens.
inline int64_t gradient_chain(const RunConfig& c, int64_t sequences) {
  return loss_chain(c, sequences) + 2 * c.model.n_layers * block_chain(c) + sequences * c.training.seq_len;
}
/// kappa of a randomly initialised model's activations and gradients: terms of mixed sign whose
/// magnitudes sum to at most twice the largest value of the compared tensor (the loss's own mean
/// is of terms >= 0).
constexpr double kModelKappa = 2.0;
/// The loss, relative to itself.
inline double loss_tolerance(const RunConfig& c, int64_t sequences) {
  return reordering_tolerance(loss_chain(c, sequences), kModelKappa);
}
/// Each parameter's gradient, relative to its largest element (per_param_max_relative_diff).
inline double gradient_tolerance(const RunConfig& c, int64_t sequences) {
  return reordering_tolerance(gradient_chain(c, sequences), kModelKappa);
}
/// Each parameter after `steps` AdamW steps on identical gradients (run_trajectory's `drive`),
/// relative to its largest element. Two things differ between the sides: (a) each element's
/// update arithmetic (the host's fused pass: lerp, two ops for v, sqrt, divide, add eps,
/// multiply-add, 8 rounded ops a step; a GPU's on-device kernel, at::_fused_adamw_: about 16,
/// `ops_per_step`) in other vector lanes, of scale lr x |m/sqrt(v)| <= 4 lr against parameters
/// of scale >= 0.02 (the init's std); (b) the clip factor, from a norm over all n gradient
/// elements, which scales every gradient alike and which m/sqrt(v) cancels but for eps: at most
/// half its relative error times an update of at most 4 lr. Both against the smallest parameter
/// scale, 0.02.
inline double optimizer_tolerance(const RunConfig& c, int steps, int64_t gradient_elements, int ops_per_step = 8) {
  const double step_scale = 4.0 * c.training.lr / 0.02;
  return reordering_tolerance(int64_t{ops_per_step} * steps, 1.0) * step_scale +
         steps * reordering_tolerance(gradient_elements, 1.0) * step_scale;
}

}  // namespace odyssey::test
