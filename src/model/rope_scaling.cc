#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/core.h>

#include "model/weight_export.h"

namespace tessera::model {
namespace {

double base_inv_freq(double theta, int j, int head_dim) { return std::pow(theta, -2.0 * j / head_dim); }

Result<std::vector<float>> factor_tensor(const ModelWeights& w, const char* name, int pairs, const char* why) {
  const WeightTensor* t = w.find(name);
  if (t == nullptr) return invalid_argument(fmt::format("{} needs the tensor {}, which the model lacks", why, name));
  if (t->numel() != pairs)
    return invalid_argument(fmt::format("{} has {} values, expected head_dim / 2 = {}", name, t->numel(), pairs));
  TS_ASSIGN_OR_RETURN(std::vector<float> f, tensor_to_f32(*t));
  for (float v : f)
    if (!(v > 0.0f) || !std::isfinite(v))
      return invalid_argument(fmt::format("{} holds {}, but rotary factors must be positive", name, v));
  return f;
}

}  // namespace

std::vector<float> llama3_freq_factors(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  const int pairs = c.head_dim / 2;
  const double orig = r.original_context;
  const double low_wavelen = orig / r.low_freq_factor, high_wavelen = orig / r.high_freq_factor;
  std::vector<float> out(static_cast<size_t>(pairs));
  for (int j = 0; j < pairs; ++j) {
    // Computed in f32 as the converter does (its frequencies are a float32 tensor).
    const float freq = 1.0f / std::pow(c.rope_theta, static_cast<float>(2 * j) / static_cast<float>(c.head_dim));
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = r.factor;
    } else {
      const double smooth = (orig / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / r.factor + smooth);
    }
    out[static_cast<size_t>(j)] = static_cast<float>(f);
  }
  return out;
}

Result<RopeFrequencies> rope_frequencies(const ModelConfig& c, const ModelWeights& w, int layer, int context) {
  RopeFrequencies out;
  const bool own_base = c.is_sliding_layer(layer) && c.rope_theta_sliding > 0.0f;
  out.theta = own_base ? c.rope_theta_sliding : c.rope_theta;
  const RopeScaling& r = c.rope_scaling;
  const int pairs = c.head_dim / 2;
  std::vector<float> factors;
  if (!own_base) {
    if (w.find("rope_freqs.weight") != nullptr) {
      TS_ASSIGN_OR_RETURN(factors, factor_tensor(w, "rope_freqs.weight", pairs, "rope frequency factors"));
    } else if (r.type == RopeScalingType::kLlama3) {
      factors = llama3_freq_factors(c);
    } else if (r.type == RopeScalingType::kLongrope) {
      const bool long_set = context > r.original_context;
      TS_ASSIGN_OR_RETURN(factors, factor_tensor(w, long_set ? "rope_factors_long.weight" : "rope_factors_short.weight",
                                                 pairs, "longrope scaling"));
    }
  }
  const RopeScalingType type = own_base ? RopeScalingType::kNone : r.type;
  if (factors.empty() && type == RopeScalingType::kNone) return out;  // the plain path, exactly as before
  out.inv_freq.resize(static_cast<size_t>(pairs));
  // YaRN's ramp: pairs below `low` keep their frequency (extrapolate), pairs above `high` are interpolated.
  double low = 0, high = 0;
  if (type == RopeScalingType::kYarn) {
    auto corr = [&](double rotations) {
      return c.head_dim * std::log(r.original_context / (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(static_cast<double>(out.theta)));
    };
    low = std::max(0.0, std::floor(corr(r.beta_fast)));
    high = std::min(static_cast<double>(c.head_dim - 1), std::ceil(corr(r.beta_slow)));
    if (high == low) high += 0.001;
  }
  for (int j = 0; j < pairs; ++j) {
    double inv = base_inv_freq(out.theta, j, c.head_dim);
    if (!factors.empty()) inv /= factors[static_cast<size_t>(j)];
    if (type == RopeScalingType::kLinear) inv /= r.factor;
    if (type == RopeScalingType::kYarn) {
      const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
      inv = inv / r.factor * ramp + inv * (1.0 - ramp);
    }
    out.inv_freq[static_cast<size_t>(j)] = static_cast<float>(inv);
  }
  if (type == RopeScalingType::kYarn || type == RopeScalingType::kLongrope) out.mscale = r.mscale;
  return out;
}

}  // namespace tessera::model
