// Rotary frequencies per layer: the plain theta^(-2j/d) or, under a scaling config, an explicit table of
// per-pair inverse frequencies and a cos/sin multiplier, which every scaling type reduces to:
//   linear    inv[j] = theta^(-2j/d) / factor
//   llama3    inv[j] = theta^(-2j/d) / f[j], f = rope_freqs.weight (llama3_freq_factors() from a config)
//   yarn      inv[j] = blend of theta^(-2j/d) / factor and theta^(-2j/d), ramped between the pairs that
//             turn beta_fast and beta_slow times over the original context; multiplier mscale
//   longrope  inv[j] = theta^(-2j/d) / f[j], f = rope_factors_long.weight when the serving context exceeds
//             the original one, else rope_factors_short.weight (as llama.cpp chooses); multiplier mscale
// Gemma 3's sliding layers use their own base (rope_theta_sliding) and no scaling.
#pragma once

#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace tessera::model {

struct RopeFrequencies {
  float theta = 10000.0f;
  std::vector<float> inv_freq;  // head_dim / 2 values; empty: the plain theta^(-2j/d) (bit-exact old path)
  float mscale = 1.0f;
};

// Llama 3.1's per-frequency divisors (head_dim / 2 values) from its rope_scaling parameters: 1 for short
// wavelengths, `factor` for long ones, a smooth blend between (what llama.cpp's converter writes as
// rope_freqs.weight).
std::vector<float> llama3_freq_factors(const ModelConfig& c);

// `context`: the positions the runner serves (chooses longrope's set). InvalidArgument when a scaling type
// needs a factor tensor the weights lack or it has the wrong shape.
Result<RopeFrequencies> rope_frequencies(const ModelConfig& c, const ModelWeights& w, int layer, int context);

}  // namespace tessera::model
