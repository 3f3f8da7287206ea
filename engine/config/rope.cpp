// The rotary frequency rule (see rope.h): Hugging Face's _compute_default/linear/llama3/yarn
// parameters of transformers' modeling_rope_utils, in float64; and the RoPE a model runs in words.
#include "engine/config/rope.h"

#include <algorithm>
#include <cmath>

#include "engine/config/sizes.h"
#include "engine/util/json.h"
#include "engine/util/printf_string.h"

namespace odyssey {

namespace {

// YaRN: the dimension whose wavelength fits `rotations` times into the pretraining context.
double yarn_correction_dim(double rotations, double dim, double base, double max_position) {
  return dim * std::log(max_position / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

/// The numbers the kind of `r` reads besides its factor, in the preset's key order, without the
/// "rope_" prefix; the YaRN attention factor as rope_attention_factor resolves it.
std::vector<std::pair<const char*, double>> read_scaling_numbers(const ModelConfig& m) {
  const RopeScaling& r = m.rope_scaling;
  switch (r.kind) {
    case RopeScalingKind::Llama3:
      return {{"low_freq_factor", r.low_freq_factor}, {"high_freq_factor", r.high_freq_factor}};
    case RopeScalingKind::Yarn:
      return {{"beta_fast", r.beta_fast}, {"beta_slow", r.beta_slow}, {"attention_factor", rope_attention_factor(m)}};
    case RopeScalingKind::None:
    case RopeScalingKind::Linear:
      break;
  }
  return {};
}

}  // namespace

bool reads_original_context(RopeScalingKind kind) {
  return kind == RopeScalingKind::Llama3 || kind == RopeScalingKind::Yarn;
}

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

std::string describe_rope(const ModelConfig& m) {
  const RopeScaling& r = m.rope_scaling;
  std::string text = printf_string("RoPE theta %.15g, ", m.rope_theta);
  if (r.kind == RopeScalingKind::None) return text + "no scaling";
  text += printf_string("%s x%.15g", std::string(to_string(r.kind)).c_str(), r.factor);
  if (r.kind == RopeScalingKind::Linear) return text + " (positions divided by the factor)";
  text += " over " + format_size(r.original_max_position) + " pretraining positions (";
  const auto numbers = read_scaling_numbers(m);
  for (size_t i = 0; i < numbers.size(); ++i)
    text += printf_string("%s%s %.4g", i ? ", " : "", numbers[i].first, numbers[i].second);
  return text + ")";
}

void write_rope_json(JsonWriter& w, const ModelConfig& m) {
  const RopeScaling& r = m.rope_scaling;
  w.begin_object().key("theta").value(m.rope_theta).key("scaling").value(to_string(r.kind));
  if (r.kind != RopeScalingKind::None) w.key("factor").value(r.factor);
  if (reads_original_context(r.kind)) w.key("original_max_position").value(r.original_max_position);
  for (const auto& [name, number] : read_scaling_numbers(m)) w.key(name).value(number);
  w.end_object();
}

}  // namespace odyssey
