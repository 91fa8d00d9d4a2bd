// Gated delta-net linear attention (Qwen3.5), the oracle: the causal convolution with its carried window, the gated
// delta rule with its carried state (llama.cpp's recurrent form, token by token, sequential float sums), and the
// head split of Qwen3.5's gated query projection.
#include <cstring>
#include <vector>

#include "ops/ref/kernels.h"

namespace tessera::ops::ref {

Status run_split_heads(const SplitHeadsOp& op) {
  const int64_t rows = op.a.dim(0) * op.a.dim(1), d = op.a.dim(2);
  const auto* x = data<const float>(op.x);
  auto* a = data<float>(op.a);
  auto* b = data<float>(op.b);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(a + r * d, x + r * 2 * d, static_cast<size_t>(d) * sizeof(float));
    std::memcpy(b + r * d, x + r * 2 * d + d, static_cast<size_t>(d) * sizeof(float));
  }
  return ok_status();
}

Status run_causal_conv1d(const CausalConv1dOp& op) {
  const int64_t n = op.x.dim(0), channels = op.x.dim(1), taps = op.weight.dim(1), keep = taps - 1;
  // The window: the carried rows, then x.
  std::vector<float> w(static_cast<size_t>((keep + n) * channels), 0.0f);
  if (!op.reset) std::memcpy(w.data(), data<const float>(op.state), static_cast<size_t>(keep * channels) * 4);
  std::memcpy(w.data() + keep * channels, data<const float>(op.x), static_cast<size_t>(n * channels) * 4);
  const auto* weight = data<const float>(op.weight);
  auto* out = data<float>(op.out);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      float sum = 0.0f;
      for (int64_t i = 0; i < taps; ++i) sum += w[static_cast<size_t>((t + i) * channels + c)] * weight[c * taps + i];
      out[t * channels + c] = sum / (1.0f + std::exp(-sum));
    }
  }
  std::memcpy(data<float>(op.state), w.data() + n * channels, static_cast<size_t>(keep * channels) * 4);
  return ok_status();
}

namespace {

void l2_normalize(const float* x, float* y, int64_t s, float eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < s; ++i) sum += x[i] * x[i];
  const float scale = 1.0f / std::max(std::sqrt(sum), eps);
  for (int64_t i = 0; i < s; ++i) y[i] = x[i] * scale;
}

float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

}  // namespace

Status run_gated_delta_rule(const GatedDeltaRuleOp& op) {
  const int64_t n = op.qkv.dim(0), hv = op.state.dim(0), s = op.state.dim(1), hk = op.k_heads;
  const int64_t width = op.qkv.dim(1);
  const auto* qkv = data<const float>(op.qkv);
  const auto* alpha = data<const float>(op.alpha);
  const auto* beta = data<const float>(op.beta);
  const auto* dt_bias = data<const float>(op.dt_bias);
  const auto* a = data<const float>(op.a);
  auto* state = data<float>(op.state);
  auto* out = data<float>(op.out);
  if (op.reset) std::fill(state, state + hv * s * s, 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s));
  std::vector<float> q(static_cast<size_t>(s)), k(static_cast<size_t>(s)), d(static_cast<size_t>(s));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv + t * width;
    for (int64_t h = 0; h < hv; ++h) {
      const int64_t kh = h % hk;
      l2_normalize(row + kh * s, q.data(), s, op.eps);
      l2_normalize(row + (hk + kh) * s, k.data(), s, op.eps);
      const float* v = row + 2 * hk * s + h * s;
      const float g = std::exp(softplus(alpha[t * hv + h] + dt_bias[h]) * a[h]);
      const float b = 1.0f / (1.0f + std::exp(-beta[t * hv + h]));
      float* m = state + h * s * s;  // m[j * s + i]: value j, key i
      for (int64_t e = 0; e < s * s; ++e) m[e] *= g;
      for (int64_t j = 0; j < s; ++j) {
        float sum = 0.0f;
        for (int64_t i = 0; i < s; ++i) sum += m[j * s + i] * k[static_cast<size_t>(i)];
        d[static_cast<size_t>(j)] = (v[j] - sum) * b;
      }
      for (int64_t j = 0; j < s; ++j)
        for (int64_t i = 0; i < s; ++i) m[j * s + i] += d[static_cast<size_t>(j)] * k[static_cast<size_t>(i)];
      float* o = out + (t * hv + h) * s;
      for (int64_t j = 0; j < s; ++j) {
        float sum = 0.0f;
        for (int64_t i = 0; i < s; ++i) sum += m[j * s + i] * q[static_cast<size_t>(i)];
        o[j] = sum * scale;
      }
    }
  }
  return ok_status();
}

}  // namespace tessera::ops::ref
