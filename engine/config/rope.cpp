// The rotary frequency rule (see rope.h): Hugging Face's _compute_default/linear/llama3/yarn
// parameters of transformers' modeling_rope_utils, in float64. defines: rope_inv_freq,
// rope_attention_factor, rope_scaling_rule
#include "engine/config/rope.h"

#include <algorithm>
#include <cmath>

namespace odyssey {

namespace {

// YaRN: the dimension whose wavelength fits `rotations` times into the pretraining context.
double yarn_correction_dim(double rotations, double dim, double base, double max_position) {
  return dim * std::log(max_position / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

std::vector<double> rope_inv_freq(const ModelConfig& m) {
  const int64_t half = m.head_dim / 2;
  const double dim = static_cast<double>(m.head_dim);
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv[i] = std::pow(m.rope_theta, -2.0 * static_cast<double>(i) / dim);
  const RopeScaling& r = m.rope_scaling;
  switch (r.kind) {
    case RopeScalingKind::None:
      break;
    case RopeScalingKind::Linear:  // positions divided by the factor
      for (double& f : inv) f /= r.factor;
      break;
    case RopeScalingKind::Llama3: {
      // Long wavelengths (beyond original / low_freq_factor) are interpolated by the factor, short
      // ones (below original / high_freq_factor) kept, the band between blended smoothly.
      const double original = static_cast<double>(r.original_max_position);
      const double low_wavelen = original / r.low_freq_factor;
      const double high_wavelen = original / r.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen > low_wavelen) {
          f /= r.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (original / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          f = (1.0 - smooth) * f / r.factor + smooth * f;
        }
      }
      break;
    }
    case RopeScalingKind::Yarn: {
      // Dimensions rotating more than beta_fast times over the pretraining context extrapolate,
      // fewer than beta_slow interpolate, a linear ramp between (truncated to whole dimensions).
      const double original = static_cast<double>(r.original_max_position);
      double low = std::floor(yarn_correction_dim(r.beta_fast, dim, m.rope_theta, original));
      double high = std::ceil(yarn_correction_dim(r.beta_slow, dim, m.rope_theta, original));
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1.0);
      if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
      for (int64_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;
        inv[i] = inv[i] / r.factor * (1.0 - extrapolation) + inv[i] * extrapolation;
      }
      break;
    }
  }
  return inv;
}

double rope_attention_factor(const ModelConfig& m) {
  const RopeScaling& r = m.rope_scaling;
  if (r.kind != RopeScalingKind::Yarn) return 1.0;
  if (r.attention_factor > 0) return r.attention_factor;
  return r.factor <= 1.0 ? 1.0 : 0.1 * std::log(r.factor) + 1.0;
}

std::optional<RopeRuleBreak> rope_scaling_rule(const RopeScaling& r) {
  if (r.kind == RopeScalingKind::None) return std::nullopt;
  const std::string when = std::string(" when model.rope_scaling = \"") + std::string(to_string(r.kind)) + "\"";
  if (!(r.factor >= 1.0))
    return RopeRuleBreak{"model.rope_factor", "must be at least 1" + when + " (it stretches the context)"};
  if (r.kind == RopeScalingKind::Llama3 && !(r.high_freq_factor > r.low_freq_factor))
    return RopeRuleBreak{"model.rope_high_freq_factor",
                         "must exceed model.rope_low_freq_factor = " + std::to_string(r.low_freq_factor) + when};
  if (r.kind == RopeScalingKind::Yarn && !(r.beta_fast > r.beta_slow))
    return RopeRuleBreak{"model.rope_beta_fast",
                         "must exceed model.rope_beta_slow = " + std::to_string(r.beta_slow) + when};
  return std::nullopt;
}

}  // namespace odyssey
