// Gated delta-net linear attention (Qwen3.5) on the cpu: the causal convolution (channels split over the stream's
// threads, each channel's window read in place from the carried rows and x), the gated delta rule (value heads split
// over the threads, each head's S x S state updated token by token with the build's dot and axpy), and the head
// split. Same arithmetic as ref's, in the same order per output except that dot products take the build's
// accumulation order (the conformance bounds state it).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

void l2_normalize(const float* x, float* y, int64_t s, float eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < s; ++i) sum += x[i] * x[i];
  const float scale = 1.0f / std::max(std::sqrt(sum), eps);
  for (int64_t i = 0; i < s; ++i) y[i] = x[i] * scale;
}

float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

}  // namespace

Status split_heads(const SplitHeadsOp& op, const Ctx& ctx) {
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

Status causal_conv1d(const CausalConv1dOp& op, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), channels = op.x.dim(1), taps = op.weight.dim(1), keep = taps - 1;
  const auto* x = data<const float>(op.x);
  const auto* weight = data<const float>(op.weight);
  auto* state = data<float>(op.state);
  auto* out = data<float>(op.out);
  const bool reset = op.reset;
  constexpr int64_t kSpan = 64;  // channels per work item
  parallel_for(
      ctx, (channels + kSpan - 1) / kSpan,
      [&](int64_t blk) {
        const int64_t c0 = blk * kSpan, c1 = std::min(channels, c0 + kSpan);
        // Row r of the window [state; x], for channel c.
        auto at = [&](int64_t r, int64_t c) {
          return r < keep ? (reset ? 0.0f : state[r * channels + c]) : x[(r - keep) * channels + c];
        };
        for (int64_t c = c0; c < c1; ++c) {
          const float* w = weight + c * taps;
          for (int64_t t = 0; t < n; ++t) {
            float sum = 0.0f;
            for (int64_t i = 0; i < taps; ++i) sum += at(t + i, c) * w[i];
            out[t * channels + c] = sum / (1.0f + std::exp(-sum));
          }
          // The last keep rows of the window; ascending r reads rows at or after r, so in place is safe.
          for (int64_t r = 0; r < keep; ++r) state[r * channels + c] = at(n + r, c);
        }
      },
      static_cast<double>(kSpan * n * taps), 1 << 14);
  return ok_status();
}

Status gated_delta_rule(const GatedDeltaRuleOp& op, const Ctx& ctx) {
  const int64_t n = op.qkv.dim(0), hv = op.state.dim(0), s = op.state.dim(1), hk = op.k_heads;
  const int64_t width = op.qkv.dim(1);
  const auto* qkv = data<const float>(op.qkv);
  const auto* alpha = data<const float>(op.alpha);
  const auto* beta = data<const float>(op.beta);
  const auto* dt_bias = data<const float>(op.dt_bias);
  const auto* a = data<const float>(op.a);
  auto* state = data<float>(op.state);
  auto* out = data<float>(op.out);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s));
  parallel_for(
      ctx, hv,
      [&](int64_t h) {
        std::vector<float> q(static_cast<size_t>(s)), k(static_cast<size_t>(s));
        float* m = state + h * s * s;  // m[j * s + i]: value j, key i
        if (op.reset) std::fill(m, m + s * s, 0.0f);
        const int64_t kh = h % hk;
        for (int64_t t = 0; t < n; ++t) {
          const float* row = qkv + t * width;
          l2_normalize(row + kh * s, q.data(), s, op.eps);
          l2_normalize(row + (hk + kh) * s, k.data(), s, op.eps);
          const float* v = row + 2 * hk * s + h * s;
          const float g = std::exp(softplus(alpha[t * hv + h] + dt_bias[h]) * a[h]);
          const float b = 1.0f / (1.0f + std::exp(-beta[t * hv + h]));
          float* o = out + (t * hv + h) * s;
          for (int64_t j = 0; j < s; ++j) {
            float* mj = m + j * s;
            for (int64_t i = 0; i < s; ++i) mj[i] *= g;
            const float d = (v[j] - dot(mj, k.data(), s)) * b;
            axpy(d, k.data(), mj, s);
            o[j] = dot(mj, q.data(), s) * scale;
          }
        }
      },
      static_cast<double>(n * s * s * 4), 1 << 14);
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
