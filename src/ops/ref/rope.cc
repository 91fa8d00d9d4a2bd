// Rotary position embedding in both pairings. The angle is computed as run.c does (float powf, cosf, sinf)
// so that the reference reproduces it bit for bit.
#include <cmath>

#include "ops/ref/kernels.h"

namespace tessera::ops::ref {
namespace {

// freqs == nullptr: run.c's angle; otherwise pos * freqs[j], cos and sin times mscale.
// Turns the first `rot` elements of each head (rot == head_dim: all of them).
void rotate_heads(float* v, int64_t heads, int64_t head_dim, int64_t rot, int32_t pos, float theta, RopeLayout layout,
                  const float* freqs, float mscale) {
  const int64_t half = rot / 2;
  for (int64_t j = 0; j < half; ++j) {
    float freq = freqs ? freqs[j] : 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(rot));
    float angle = static_cast<float>(pos) * freq;
    float c = std::cos(angle);
    float s = std::sin(angle);
    if (freqs) {
      c *= mscale;
      s *= mscale;
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* x = v + h * head_dim;
      int64_t a = layout == RopeLayout::kInterleaved ? 2 * j : j;
      int64_t b = layout == RopeLayout::kInterleaved ? 2 * j + 1 : j + half;
      float x0 = x[a];
      float x1 = x[b];
      x[a] = x0 * c - x1 * s;
      x[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

Status run_rope(const RopeOp& op) {
  const int64_t n = op.q.dim(0), hd = op.q.dim(2), rot = op.rotated(hd);
  const auto* pos = data<const int32_t>(op.positions);
  const float* freqs = op.freqs.valid() ? data<const float>(op.freqs) : nullptr;
  for (int64_t t = 0; t < n; ++t) {
    rotate_heads(data<float>(op.q) + t * op.q.row_elems(), op.q.dim(1), hd, rot, pos[t], op.theta, op.layout, freqs,
                 op.mscale);
    rotate_heads(data<float>(op.k) + t * op.k.row_elems(), op.k.dim(1), hd, rot, pos[t], op.theta, op.layout, freqs,
                 op.mscale);
  }
  return ok_status();
}

}  // namespace tessera::ops::ref
