// Matrix products with GGUF's 32-element block weights: q8_0, q4_0, q4_1, q5_0, q5_1. The activation row is quantised
// once to int8 blocks of 32 with an f32 scale, then every weight block is an int8 x int8 dot product: on AVX2 without
// VNNI that is maddubs (|w| as unsigned times x carrying w's sign, pairs summed to int16; 2 * 127 * 127 fits) and madd
// (pairs to int32); with VNNI (the avx512 build) one vpdpbusd; then one int->float conversion and one FMA with the two
// scales per block. Decode (a few activation rows) streams one weight row at a time; larger batches take weight rows
// four at a time so the activation block is loaded once for four rows. The _1 types' minimum m adds m * xd * sum(x_q)
// per block; the activation sums are computed once with the quantisation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

constexpr int64_t kTile = 4;
constexpr int64_t kRowBlock = 64;
constexpr int64_t kSmallBatch = 4;  // fewer activation rows than this: row-by-row dot products

struct QuantRows {
  std::vector<int8_t> q;  // n * k
  std::vector<float> d;   // n * k / 32
  std::vector<float> s;   // n * k / 32: d * sum(q), for the weight types with a minimum
};

void quantize_rows(const float* x, int64_t n, int64_t k, QuantRows& out, const Ctx& ctx) {
  out.q.resize(static_cast<size_t>(n * k));
  out.d.resize(static_cast<size_t>(n * k / kQuantBlock));
  out.s.resize(static_cast<size_t>(n * k / kQuantBlock));
  const int64_t blocks = n * k / kQuantBlock;
  parallel_for(
      ctx, blocks,
      [&](int64_t b) {
        const float* xb = x + b * kQuantBlock;
#if defined(__AVX2__)
        {
          // Same result as the scalar loop below: cvtps rounds to nearest even, as nearbyint does by default.
          const __m256 sign = _mm256_set1_ps(-0.0f);
          __m256 v[4], m = _mm256_setzero_ps();
          for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
          }
          __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
          h = _mm_max_ps(h, _mm_movehl_ps(h, h));
          h = _mm_max_ss(h, _mm_movehdup_ps(h));
          const float d = _mm_cvtss_f32(h) / 127.0f;
          const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
          out.d[static_cast<size_t>(b)] = d;
          const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], id)),
                        i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], id));
          const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], id)),
                        i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], id));
          // packs work within 128-bit lanes; the permute puts the 32 bytes back in order.
          const __m256i p16a = _mm256_packs_epi32(i0, i1), p16b = _mm256_packs_epi32(i2, i3);
          const __m256i p8 =
              _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + b * kQuantBlock), p8);
          out.s[static_cast<size_t>(b)] =
              d * static_cast<float>(hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3))));
          return;
        }
#endif
        float amax = 0.0f;
        for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out.d[static_cast<size_t>(b)] = d;
        int sum = 0;
        for (int i = 0; i < kQuantBlock; ++i) {
          out.q[static_cast<size_t>(b * kQuantBlock + i)] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
          sum += out.q[static_cast<size_t>(b * kQuantBlock + i)];
        }
        out.s[static_cast<size_t>(b)] = d * static_cast<float>(sum);
      },
      1.0, 257.0);
}

#if defined(__AVX2__)
inline __m256i weights_i8(const BlockQ8_0& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
inline __m256i weights_i8(const BlockQ4_0& b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
  return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
}
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}
// 0x10 in byte j where bit j of the 32-bit qh is set: each byte picks its qh byte, then tests its own bit.
inline __m256i fifth_bits(const uint8_t* qh4) {
  uint32_t h;
  std::memcpy(&h, qh4, 4);
  const __m256i pick =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)), pick);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}
inline __m256i weights_i8(const BlockQ4_1& b) { return nibbles(b.qs); }
inline __m256i weights_i8(const BlockQ5_0& b) {
  return _mm256_sub_epi8(_mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh)), _mm256_set1_epi8(16));
}
inline __m256i weights_i8(const BlockQ5_1& b) { return _mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh)); }
// 8 int32 partial sums of w . x as floats. VNNI's vpdpbusd multiplies u8 by s8 and sums groups of four
// into int32 in one instruction, where AVX2 needs maddubs (to int16 pairs) and madd (to int32).
inline __m256 dot_i8(__m256i w, __m256i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_cvtepi32_ps(
      _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)));
#else
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}
inline float scale(uint16_t h) { return _cvtsh_ss(h); }
#else
inline float scale(uint16_t h) { return f16_to_f32(h); }
#endif

// The 32 weights of a block as integers (the tail and the baseline build).
inline void weights_of(const BlockQ8_0& b, int* w) {
  for (int i = 0; i < 32; ++i) w[i] = b.qs[i];
}
inline void nibbles_of(const uint8_t* qs, int offset, int* w) {
  for (int j = 0; j < 16; ++j) {
    w[j] = (qs[j] & 0x0f) - offset;
    w[j + 16] = (qs[j] >> 4) - offset;
  }
}
inline void add_fifth_bits(const uint8_t* qh4, int* w) {
  uint32_t h;
  std::memcpy(&h, qh4, 4);
  for (int i = 0; i < 32; ++i) w[i] += static_cast<int>((h >> i) & 1u) << 4;
}
inline void weights_of(const BlockQ4_0& b, int* w) { nibbles_of(b.qs, 8, w); }
inline void weights_of(const BlockQ4_1& b, int* w) { nibbles_of(b.qs, 0, w); }
inline void weights_of(const BlockQ5_0& b, int* w) {
  nibbles_of(b.qs, 16, w);
  add_fifth_bits(b.qh, w);
}
inline void weights_of(const BlockQ5_1& b, int* w) {
  nibbles_of(b.qs, 0, w);
  add_fifth_bits(b.qh, w);
}

// sum over blocks of m * xd * sum(x_q) for the types with a minimum; zero (and no work) for the others.
template <typename B>
float min_term(const B* w, int64_t nb, const float* xs) {
  float s = 0.0f;
  if constexpr (std::is_same_v<B, BlockQ4_1> || std::is_same_v<B, BlockQ5_1>) {
    for (int64_t b = 0; b < nb; ++b) s += scale(w[b].m) * xs[b];
  }
  return s;
}

// One block's contribution, in plain integer arithmetic (the tail and the baseline build).
template <typename B>
float block_dot(const B& blk, const int8_t* xq, float xd) {
  int w[kQuantBlock];
  weights_of(blk, w);
  int32_t acc = 0;
  for (int i = 0; i < kQuantBlock; ++i) acc += w[i] * xq[i];
  return scale(blk.d) * xd * static_cast<float>(acc);
}

// dot(one weight row of `nb` blocks, x), two accumulators so consecutive blocks do not wait on each other.
template <typename B>
float row_dot(const B* w, int64_t nb, const int8_t* xq, const float* xd, const float* xs) {
  int64_t b = 0;
  float s = 0.0f;
#if defined(__AVX2__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQuantBlock));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + (b + 1) * kQuantBlock));
    a0 = _mm256_fmadd_ps(_mm256_set1_ps(scale(w[b].d) * xd[b]), dot_i8(weights_i8(w[b]), x0), a0);
    a1 = _mm256_fmadd_ps(_mm256_set1_ps(scale(w[b + 1].d) * xd[b + 1]), dot_i8(weights_i8(w[b + 1]), x1), a1);
  }
  s = hsum(_mm256_add_ps(a0, a1));
#endif
  for (; b < nb; ++b) {
    s += block_dot(w[b], xq + b * kQuantBlock, xd[b]);
  }
  return s + min_term(w, nb, xs);
}

// out[t] = dot(weight row t, x) for `rows` (<= 4) weight rows of `nb` blocks each, each summed in exactly the
// order row_dot() uses, so a row's result does not depend on the batch size it was computed in.
template <typename B>
void tile(const B* w, int64_t nb, int64_t rows, const int8_t* xq, const float* xd, const float* xs, float* out) {
#if defined(__AVX2__)
  if (rows == kTile) {
    const B* r[4] = {w, w + nb, w + 2 * nb, w + 3 * nb};
    __m256 a[4], c[4];
    for (int t = 0; t < 4; ++t) a[t] = c[t] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQuantBlock));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + (b + 1) * kQuantBlock));
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        a[t] = _mm256_fmadd_ps(_mm256_set1_ps(scale(r[t][b].d) * xd[b]), dot_i8(weights_i8(r[t][b]), x0), a[t]);
        c[t] = _mm256_fmadd_ps(_mm256_set1_ps(scale(r[t][b + 1].d) * xd[b + 1]), dot_i8(weights_i8(r[t][b + 1]), x1),
                               c[t]);
      }
    }
    for (int t = 0; t < 4; ++t) {
      float s = hsum(_mm256_add_ps(a[t], c[t]));
      for (int64_t e = b; e < nb; ++e) s += block_dot(r[t][e], xq + e * kQuantBlock, xd[e]);
      out[t] = s + min_term(r[t], nb, xs);
    }
    return;
  }
#endif
  for (int64_t t = 0; t < rows; ++t) out[t] = row_dot(w + t * nb, nb, xq, xd, xs);
}

template <typename B>
void matmul_blocks(const MatMulOp& op, const QuantRows& xq, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0), nb = k / kQuantBlock;
  const B* w = data<const B>(op.w);
  float* out = data<float>(op.out);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  if (n < kSmallBatch) {
    // Decode: one weight row at a time, front to back (see matmul_dense.cc: one sequential stream per thread
    // is what the prefetcher serves; q8_0 2048 x 768 on one thread ran 5.7 GB/s tiled, 27 GB/s row by row).
    parallel_for(ctx, m, [&](int64_t i) {
      for (int64_t r = 0; r < n; ++r) {
        const float v = row_dot(w + i * nb, nb, xq.q.data() + r * k, xq.d.data() + r * nb, xq.s.data() + r * nb);
        out[r * m + i] = bias ? v + bias[i] : v;
      }
    });
    return;
  }
  const int64_t tiles = (m + kTile - 1) / kTile;
  for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
    const int64_t r1 = std::min(n, r0 + kRowBlock);
    parallel_for(ctx, tiles, [&](int64_t t) {
      const int64_t i0 = t * kTile, rows = std::min(kTile, m - i0);
      float tmp[kTile];
      for (int64_t r = r0; r < r1; ++r) {
        tile(w + i0 * nb, nb, rows, xq.q.data() + r * k, xq.d.data() + r * nb, xq.s.data() + r * nb, tmp);
        for (int64_t i = 0; i < rows; ++i) out[r * m + i0 + i] = bias ? tmp[i] + bias[i0 + i] : tmp[i];
      }
    });
  }
}

}  // namespace

Status matmul_quant(const MatMulOp& op, const Ctx& ctx) {
  thread_local QuantRows xq;
  quantize_rows(data<const float>(op.x), op.x.dim(0), op.x.dim(1), xq, ctx);
  if (op.w.dtype == DType::kQ8_0) {
    matmul_blocks<BlockQ8_0>(op, xq, ctx);
  } else if (op.w.dtype == DType::kQ4_0) {
    matmul_blocks<BlockQ4_0>(op, xq, ctx);
  } else if (op.w.dtype == DType::kQ4_1) {
    matmul_blocks<BlockQ4_1>(op, xq, ctx);
  } else if (op.w.dtype == DType::kQ5_0) {
    matmul_blocks<BlockQ5_0>(op, xq, ctx);
  } else if (op.w.dtype == DType::kQ5_1) {
    matmul_blocks<BlockQ5_1>(op, xq, ctx);
  } else {
    return unimplemented("cpu quantised matmul takes q8_0 or q4_0 weights");
  }
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
