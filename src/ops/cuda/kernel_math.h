// The per-element and per-row arithmetic of the cuda kernels (kernels.cu), written once as __host__ __device__
// functions so that a host test (tests/ops/cuda_math_test.cc) can run the very code the kernels run and compare
// it with ops/ref on a machine without a GPU. Each function follows its ops/ref counterpart operation for
// operation (ops/ref/kernels.h gated(), ref/encoder.cc activate(), ops/moe_route.cc route_experts_row(),
// ref/linear_attention.cc), so on the host the results are equal bit for bit; on the device expf, erff, logf and
// tanhf are CUDA's (within 2 ulp) and nvcc may fuse a multiply and an add, which the conformance bounds allow.
//
// Plain C++ as seen by g++: no CUDA header is needed, and the enumerations below stand for ops.h's (cuda_backend.cc
// checks that their values agree).
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TS_HD __host__ __device__ __forceinline__
#else
#define TS_HD inline
#endif

namespace tessera::ops::cuda {

// ops::Activation's values.
enum : int { kActSilu = 0, kActGeluTanh = 1, kActSwigluOai = 2, kActGeluErf = 3, kActSigmoid = 4, kActTanh = 5 };
// ops::MoeGating's values.
enum : int { kGateSoftmax = 0, kGateSigmoid = 1, kGateSoftmaxWeight = 2 };
// ops::PoolKind's values.
enum : int { kPoolMean = 0, kPoolFirst = 1, kPoolLast = 2 };

// std::min, std::max and std::clamp as the reference calls them (a NaN first argument passes through).
TS_HD float min_of(float a, float b) { return b < a ? b : a; }
TS_HD float max_of(float a, float b) { return a < b ? b : a; }
TS_HD float clamp_to(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }

// act(g) * u of SiluMulOp and MoeExpertsOp (ops.h): silu, GELU's tanh approximation evaluated as
// x / (1 + exp(-2a)), the sigmoid gate, and gpt-oss's clamped SwiGLU with alpha and limit.
TS_HD float gated_value(int act, float g, float u, float alpha, float limit) {
  if (act == kActGeluTanh) {
    const float c = 0.79788456080286535588f, a = 0.044715f;
    return g / (1.0f + expf(-2.0f * c * g * (1.0f + a * g * g))) * u;
  }
  if (act == kActSigmoid) return u / (1.0f + expf(-g));
  if (act == kActSwigluOai) {
    const float x = min_of(g, limit), y = clamp_to(u, -limit, limit);
    return x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
  }
  float v = g;
  v *= (1.0f / (1.0f + expf(-v)));
  return v * u;
}

// ActivationOp's ungated activations: silu, GELU (tanh approximation), GELU with erf, and tanh.
TS_HD float activation_value(int act, float x) {
  if (act == kActSilu) return x * (1.0f / (1.0f + expf(-x)));
  if (act == kActGeluTanh) {
    const float c = 0.79788456080286535588f, a = 0.044715f;
    return x / (1.0f + expf(-2.0f * c * x * (1.0f + a * x * x)));
  }
  if (act == kActGeluErf) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  if (act == kActTanh) return tanhf(x);
  return x;
}

// The routing order: the larger score first, NaN last, ties to the lower expert (a strict total order over
// distinct experts, so the j-th choice is the best expert that ranks after the (j-1)-th).
TS_HD bool ranks_before(float a, int ia, float b, int ib) {
  if (isnan(a)) return isnan(b) && ia < ib;
  if (isnan(b)) return true;
  return a > b || (a == b && ia < ib);
}

// MoeRouteOp for one row: logits [experts] -> ids [k], weights [k] (ops.h). No scratch: an expert's probability is
// recomputed from the row's maximum and sum whenever it is needed (the same operations each time, so the same
// value as ref's stored p), and instead of a taken[] array each pass looks for the best expert ranking after the
// previous pass's choice. bias and expert_scale may be null.
TS_HD void route_row(const float* l, int experts, const float* bias, int k, int gating, bool normalize, float scale,
                     const float* expert_scale, int32_t* ids, float* w) {
  float mx = -INFINITY, sum = 0.0f;
  if (gating == kGateSoftmax) {
    for (int i = 0; i < experts; ++i) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < experts; ++i) sum += expf(l[i] - mx);
  }
  auto prob = [&](int i) {
    if (gating == kGateSoftmax) return expf(l[i] - mx) / sum;
    if (gating == kGateSigmoid) return 1.0f / (1.0f + expf(-l[i]));
    return l[i];
  };
  int prev = -1;
  float prev_score = 0.0f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_score = 0.0f;
    for (int i = 0; i < experts; ++i) {
      const float s = bias ? prob(i) + bias[i] : prob(i);
      if (prev >= 0 && !ranks_before(prev_score, prev, s, i)) continue;  // chosen by an earlier pass
      if (best < 0 || ranks_before(s, i, best_score, best)) {
        best = i;
        best_score = s;
      }
    }
    ids[j] = best;
    w[j] = prob(best);
    prev = best;
    prev_score = best_score;
  }
  if (gating == kGateSoftmaxWeight) {
    float m = -INFINITY, s = 0.0f;
    for (int j = 0; j < k; ++j) m = w[j] > m ? w[j] : m;
    for (int j = 0; j < k; ++j) s += (w[j] = expf(w[j] - m));
    for (int j = 0; j < k; ++j) w[j] /= s;
  }
  if (normalize) {
    float s = 0.0f;
    for (int j = 0; j < k; ++j) s += w[j];
    s = max_of(s, 6.103515625e-5f);  // llama.cpp's clamp: the smallest normal f16
    for (int j = 0; j < k; ++j) w[j] /= s;
  }
  if (scale != 1.0f)
    for (int j = 0; j < k; ++j) w[j] *= scale;
  if (expert_scale)
    for (int j = 0; j < k; ++j) w[j] *= expert_scale[ids[j]];
}

// CausalConv1dOp for one channel c over all n tokens (ops.h): out[t][c] = silu(sum_i weight[c][i] w[t + i][c]) with
// w = [state; x], then the channel's column of state becomes the last taps - 1 rows of w. Channels are independent,
// so one thread may own one. state's rows are rewritten in ascending order: row r takes w[n + r], which is x or a
// later state row not yet rewritten.
TS_HD void conv_channel(const float* x, const float* weight, float* state, float* out, int n, int channels, int taps,
                        bool reset, int c) {
  const int keep = taps - 1;
  auto w = [&](int64_t r) -> float {
    if (r >= keep) return x[(r - keep) * channels + c];
    return reset ? 0.0f : state[r * channels + c];
  };
  const float* wc = weight + static_cast<int64_t>(c) * taps;
  for (int t = 0; t < n; ++t) {
    float sum = 0.0f;
    for (int i = 0; i < taps; ++i) sum += w(t + i) * wc[i];
    out[static_cast<int64_t>(t) * channels + c] = sum / (1.0f + expf(-sum));
  }
  for (int r = 0; r < keep; ++r) state[static_cast<int64_t>(r) * channels + c] = w(n + r);
}

// softplus as ggml: x above 20, else log(1 + exp(x)).
TS_HD float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

// 1 / max(|x|, eps) for the s elements of x: the l2 normalisation's factor (ref's l2_normalize).
TS_HD float l2_factor(const float* x, int s, float eps) {
  float sum = 0.0f;
  for (int i = 0; i < s; ++i) sum += x[i] * x[i];
  return 1.0f / max_of(sqrtf(sum), eps);
}

// GatedDeltaRuleOp for value head h and value element j over all n tokens (ops.h): row j of head h's state
// (m, s floats) and out[t][h][j]. The row is all that element j's recurrence reads or writes, so one thread may own
// it; the query and key factors, the gate and beta are recomputed by each (cheap next to the row's 4 s operations).
// The loops are ref's, fused per element (the state decays, then its dot with k; then the update, then its dot
// with q): the same operations on the same values in the same order.
TS_HD void delta_rule_row(const float* qkv, const float* alpha, const float* beta, const float* dt_bias, const float* a,
                          float* m, float* out, int n, int hv, int hk, int s, float eps, bool reset, int h, int j) {
  if (reset)
    for (int i = 0; i < s; ++i) m[i] = 0.0f;
  const int64_t width = static_cast<int64_t>(2 * hk + hv) * s;
  const int kh = h % hk;
  const float scale = 1.0f / sqrtf(static_cast<float>(s));
  for (int t = 0; t < n; ++t) {
    const float* row = qkv + t * width;
    const float* q = row + static_cast<int64_t>(kh) * s;
    const float* k = row + static_cast<int64_t>(hk + kh) * s;
    const float v = row[static_cast<int64_t>(2 * hk + h) * s + j];
    const float fq = l2_factor(q, s, eps), fk = l2_factor(k, s, eps);
    const int64_t th = static_cast<int64_t>(t) * hv + h;
    const float g = expf(softplus(alpha[th] + dt_bias[h]) * a[h]);
    const float b = 1.0f / (1.0f + expf(-beta[th]));
    float sum = 0.0f;
    for (int i = 0; i < s; ++i) {
      m[i] *= g;
      sum += m[i] * (k[i] * fk);
    }
    const float d = (v - sum) * b;
    float o = 0.0f;
    for (int i = 0; i < s; ++i) {
      m[i] += d * (k[i] * fk);
      o += m[i] * (q[i] * fq);
    }
    out[th * s + j] = o * scale;
  }
}

// KV cache elements in the types of llama.cpp's -ctk/-ctv, as base/quant converts them: bf16 and f16 by the bits
// (round to nearest even, NaN kept quiet), q8_0 and q4_0 blocks of 32 (quantize_q8_0 / quantize_q4_0: the scale as
// f16, halves away from zero as std::lround, q4_0's truncation after + 8.5, element j in the low nibble of byte j
// and j + 16 in the high one). Products are rounded on their own (mul_rn): nvcc would otherwise fuse q4_0's
// x * id + 8.5 into one rounding that ref does not make.
enum : int { kCacheF32 = 0, kCacheF16 = 1, kCacheBf16 = 2, kCacheQ8_0 = 3, kCacheQ4_0 = 4 };

TS_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TS_HD uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
TS_HD float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
TS_HD uint16_t to_bf16(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
TS_HD float from_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }
TS_HD uint16_t to_f16(float f) {
  const uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000u, ex = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (ex == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int32_t e = static_cast<int32_t>(ex) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}
TS_HD float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return float_of(sign);
    float v = static_cast<float>(m) * (1.0f / 16777216.0f);  // m * 2^-24, exact
    return sign ? -v : v;
  }
  if (e == 0x1fu) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}
TS_HD void quantize_block_q8_0(const float* x, uint8_t* blk) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t h = to_f16(d);
  blk[0] = static_cast<uint8_t>(h & 0xffu);
  blk[1] = static_cast<uint8_t>(h >> 8);
  for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(lroundf(mul_rn(x[i], id))));
}
TS_HD void quantize_block_q4_0(const float* x, uint8_t* blk) {
  float amax = 0.0f, mx = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (fabsf(x[i]) > amax) {
      amax = fabsf(x[i]);
      mx = x[i];
    }
  }
  const float d = mx / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t h = to_f16(d);
  blk[0] = static_cast<uint8_t>(h & 0xffu);
  blk[1] = static_cast<uint8_t>(h >> 8);
  for (int j = 0; j < 16; ++j) {
    const int a = static_cast<int>(mul_rn(x[j], id) + 8.5f), b = static_cast<int>(mul_rn(x[j + 16], id) + 8.5f);
    const int qa = a < 0 ? 0 : (a > 15 ? 15 : a), qb = b < 0 ? 0 : (b > 15 ? 15 : b);
    blk[2 + j] = static_cast<uint8_t>(qa | (qb << 4));
  }
}
// Element idx of a q8_0 (q8) or q4_0 cache, as base/quant's dequantize: d * q, d * (nibble - 8).
TS_HD float block_elem(const uint8_t* p, int64_t idx, bool q8) {
  const int j = static_cast<int>(idx % 32);
  const uint8_t* blk = p + (idx / 32) * (q8 ? 34 : 18);
  const float d = from_f16(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
  if (q8) return d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
  const int nib = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
  return d * static_cast<float>(nib - 8);
}

}  // namespace tessera::ops::cuda
