// Gated delta-net linear attention (Qwen3.5) on the cpu: the causal convolution (channels split over the stream's
// threads, eight channels a vector, each window read in place from the carried rows and x), the gated delta rule
// (value heads split over the threads, each head's S x S state updated token by token), and the head split. Same
// arithmetic as ref's, in the same order per output, except that dot products take the build's accumulation order
// and the convolution's silu the vector exp (exp8, as silu_mul's); the conformance bounds state it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

void l2_normalize(const float* x, float* y, int64_t s, float eps) {
  const float scale = 1.0f / std::max(std::sqrt(dot(x, x, s)), eps);
  for (int64_t i = 0; i < s; ++i) y[i] = x[i] * scale;
}

// One sweep over a state row m (S keys): each element becomes m * a (kDecay) or m + a * k (the delta), is stored,
// and the sweep returns the new row's dot product with `with`, summed in this build's order (avx512: two 16-lane
// chains, added, folded to 8 lanes; then 8 lanes; the lanes; the rest one at a time).
template <bool kDecay>
float sweep(float* m, const float* k, const float* with, int64_t s, float a) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 a16 = _mm512_set1_ps(a);
  auto step16 = [&](int64_t at) {
    const __m512 old = _mm512_loadu_ps(m + at);
    const __m512 v = kDecay ? _mm512_mul_ps(old, a16) : _mm512_fmadd_ps(a16, _mm512_loadu_ps(k + at), old);
    _mm512_storeu_ps(m + at, v);
    return v;
  };
  __m512 acc16 = _mm512_setzero_ps(), odd16 = _mm512_setzero_ps();  // two chains: half the FMA latency a row waits
  for (; i + 32 <= s; i += 32) {
    const __m512 v = step16(i), w = step16(i + 16);
    acc16 = _mm512_fmadd_ps(v, _mm512_loadu_ps(with + i), acc16);
    odd16 = _mm512_fmadd_ps(w, _mm512_loadu_ps(with + i + 16), odd16);
  }
  for (; i + 16 <= s; i += 16) acc16 = _mm512_fmadd_ps(step16(i), _mm512_loadu_ps(with + i), acc16);
  // The 16 lanes folded to 8, through memory (GCC 12 warns inside _mm512_reduce_add_ps and the 512-bit shuffles).
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(acc16, odd16));
  __m256 acc8 = _mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8));
#elif defined(__AVX2__)
  __m256 acc8 = _mm256_setzero_ps();
#endif
  float dot = 0.0f;
#if defined(__AVX2__)
  const __m256 a8 = _mm256_set1_ps(a);
  for (; i + 8 <= s; i += 8) {
    const __m256 old = _mm256_loadu_ps(m + i);
    const __m256 v = kDecay ? _mm256_mul_ps(old, a8) : _mm256_fmadd_ps(a8, _mm256_loadu_ps(k + i), old);
    _mm256_storeu_ps(m + i, v);
    acc8 = _mm256_fmadd_ps(v, _mm256_loadu_ps(with + i), acc8);
  }
  dot = hsum(acc8);
#endif
  for (; i < s; ++i) {
    m[i] = kDecay ? m[i] * a : m[i] + a * k[i];
    dot += m[i] * with[i];
  }
  return dot;
}

// One state row m (value j: its S keys) through one token's delta step: m *= g; d = (v_j - m . k) * b; m += d k;
// returns m . q. ref's four passes over the row (scale, dot, axpy, dot) as two sweeps, each element meeting the same
// operations in the same order: the row then comes from L2 (prefill) or memory (decode) once a token, not four times.
float delta_row(float* m, const float* k, const float* q, int64_t s, float g, float vj, float b) {
  const float dk = sweep<true>(m, k, k, s, g);
  return sweep<false>(m, k, q, s, (vj - dk) * b);
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
        int64_t c = c0;
#if defined(__AVX2__)
        // Eight channels a vector: their taps gathered into registers once, then each row of the window is one load.
        // Longer kernels than kMaxTaps (Qwen3.5's are 4) go one channel at a time.
        constexpr int64_t kMaxTaps = 8;
        const __m256i lane_taps =
            _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(taps)));
        for (; c + 8 <= c1 && taps <= kMaxTaps; c += 8) {
          __m256 wt[kMaxTaps];
          for (int64_t i = 0; i < taps; ++i) wt[i] = _mm256_i32gather_ps(weight + c * taps + i, lane_taps, 4);
          // Row r of the window [state; x] for these eight channels.
          auto row = [&](int64_t r) {
            return r >= keep ? _mm256_loadu_ps(x + (r - keep) * channels + c)
                   : reset   ? _mm256_setzero_ps()
                             : _mm256_loadu_ps(state + r * channels + c);
          };
          for (int64_t t = 0; t < n; ++t) {
            __m256 sum = _mm256_setzero_ps();
            for (int64_t i = 0; i < taps; ++i) sum = _mm256_fmadd_ps(row(t + i), wt[i], sum);
            const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), sum));
            _mm256_storeu_ps(out + t * channels + c, _mm256_div_ps(sum, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
          }
          for (int64_t r = 0; r < keep; ++r) _mm256_storeu_ps(state + r * channels + c, row(n + r));
        }
#endif
        for (; c < c1; ++c) {
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
          for (int64_t j = 0; j < s; ++j) o[j] = delta_row(m + j * s, k.data(), q.data(), s, g, v[j], b) * scale;
        }
      },
      static_cast<double>(n * s * s * 4), 1 << 14);
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
