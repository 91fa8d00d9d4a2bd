// The quantised matmuls with weight rows in the vector lanes: a packed-panel GEMM for batches of 3 rows or
// more (prefill, batched decode) and a decode kernel for 1-2 rows that gives the same bits, shared by
// matmul_quant.cc (q4_0, q5_0) and matmul_kquant.cc (the k-quants). Included only by those two files, inside their
// per-build namespace, and only in the SIMD builds. Matrices the device repacked at load (repack.h) take
// matmul_repacked.h instead, which reads the panels directly; the paths here serve the rest (row-major matrices,
// and the rows past a repacked matrix's last whole panel).
//
// Why a different layout: the row-by-row kernels keep one weight row's elements across the vector lanes, so
// every 32-element block of every (weight row, activation row) pair ends in its own int->float conversion and
// FMA, which cost as much as the integer dot product itself. Here the lanes are weight rows instead: a panel
// of P rows (16 in the avx512 build, 8 in the avx2 one) is decoded once per call and token block into
// unsigned bytes interleaved four at a time (vector j holds elements 4j..4j+3 of each of the P rows), so one
// vpdpbusd (avx2: maddubs + madd) against four broadcast activation bytes advances P dot products at once and
// the conversion and scale FMA are paid once per group of 16 or 32 elements for all P rows. Each decoded
// weight vector feeds T activation rows (8 / 4) from registers.
//
// Numbers: a weight element is s_g * (u - off) - mn_g, with u the unsigned byte, off a per-type integer
// offset (q4_0: 8, q5_0: 16, q6_k: 32, q4_k: 0), s_g and mn_g per-row f32 values of its group of G elements
// (q4_k: d * sc, dmin * m). Activations are quantised once per call into int8 blocks of 32 with an f32
// scale xd and integer sums. A group's integer sum starts at -off * sum(x_g), so it is exactly
// sum((u - off) * x_g); the output is then sum_g s_g * xd * isum_g - mn_g * xd * sum(x_g) in f32. Every lane
// follows the same instructions whatever the tile, so a row's result does not depend on what shares its batch
// (within this path; batches of 4 or fewer rows take the row-by-row kernels, which agree among themselves,
// and graph buckets never pad a batch of 4 or fewer past 4).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

// GCC 12's AVX-512 intrinsics start unmasked operations from _mm512_undefined_*(), which its own
// -Wmaybe-uninitialized then reports at every inlined call site (a known false positive of that release).
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(__AVX2__)
namespace tessera::ops::cpu::TS_CPU_ISA::packed {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr int kP = 16;  // weight rows per panel: one int32 / f32 lane each
constexpr int kT = 8;   // activation rows per tile: 16 accumulators
using VI = __m512i;
using VF = __m512;
inline VI load_vi(const void* p) { return _mm512_load_si512(p); }
inline VF load_vf(const float* p) { return _mm512_load_ps(p); }
inline VI bcast(int32_t v) { return _mm512_set1_epi32(v); }
inline VF bcastf(float v) { return _mm512_set1_ps(v); }
inline VF fzero() { return _mm512_setzero_ps(); }
inline VI dot4(VI acc, VI w, VI x) { return _mm512_dpbusd_epi32(acc, w, x); }
inline VF fma_i(VI i, VF s, VF acc) { return _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), s, acc); }
inline VF fnma(VF a, VF b, VF acc) { return _mm512_fnmadd_ps(a, b, acc); }
inline VF vmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
inline VF vadd(VF a, VF b) { return _mm512_add_ps(a, b); }
inline void store_rows(float* out, VF v, int rows) {
  _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << rows) - 1u), v);
}
inline VF load_rows(const float* p, int rows) {
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << rows) - 1u), p);
}
#else
constexpr int kP = 8;
constexpr int kT = 4;
using VI = __m256i;
using VF = __m256;
inline VI load_vi(const void* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
inline VF load_vf(const float* p) { return _mm256_load_ps(p); }
inline VI bcast(int32_t v) { return _mm256_set1_epi32(v); }
inline VF bcastf(float v) { return _mm256_set1_ps(v); }
inline VF fzero() { return _mm256_setzero_ps(); }
// maddubs adds two u8 x s8 products into int16: 2 * 63 * 127 fits (q4_0, q5_0, q6_k, q4_k).
inline VI dot4(VI acc, VI w, VI x) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}
inline VF fma_i(VI i, VF s, VF acc) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), s, acc); }
inline VF fnma(VF a, VF b, VF acc) { return _mm256_fnmadd_ps(a, b, acc); }
inline VF vmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
inline VF vadd(VF a, VF b) { return _mm256_add_ps(a, b); }
inline __m256i row_mask(int rows) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline void store_rows(float* out, VF v, int rows) {
  if (rows == kP) {
    _mm256_storeu_ps(out, v);
  } else {
    _mm256_maskstore_ps(out, row_mask(rows), v);
  }
}
inline VF load_rows(const float* p, int rows) {
  return rows == kP ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, row_mask(rows));
}
#endif

// The activation rows, quantised once per call: int8 q (n * k), per 32-element block the scale, and per
// group of the weight type (G elements) the accumulator start -off * sum(x_g), the block scale of the group,
// and xd * sum(x_g) for the types with a minimum.
struct Acts {
  AVec<int8_t> q;
  std::vector<float> d;        // n * k / 32
  std::vector<int32_t> s16;    // n * k / 16: sums of 16 consecutive q
  std::vector<int32_t> start;  // n * groups
  std::vector<float> xd;       // n * groups
  std::vector<float> xs;       // n * groups
};

inline void quantize_block32(const float* xb, int8_t* q, float* d_out, int32_t* s16) {
  // Same rounding as the scalar reference of the other kernels: cvtps rounds to nearest even.
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(xb + 8 * i);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h), d = amax / 127.0f;
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  *d_out = d;
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], id)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], id));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], id)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], id));
  const __m256i p8 =
      _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3)),
                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p8);
  s16[0] = hsum_epi32(_mm256_add_epi32(i0, i1));
  s16[1] = hsum_epi32(_mm256_add_epi32(i2, i3));
}

// 256 elements as llama.cpp's q8_K blocks (quantize_row_q8_K_ref), which it multiplies K-quant weights with: one f32
// scale d = max / -127 for the element of largest magnitude (the first one), q = min(127, round(x / d)), so that
// the two engines quantise a K-quant matmul's activations alike. Writes q, the scale into all eight 32-element
// block slots of `d_out`, and the 16-element sums.
inline void quantize_block256(const float* xb, int8_t* q, float* d_out, int32_t* s16) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 256; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  if (amax == 0.0f) {
    std::memset(q, 0, 256);
    for (int i = 0; i < 8; ++i) d_out[i] = 0.0f;
    for (int i = 0; i < 16; ++i) s16[i] = 0;
    return;
  }
  // The first element of largest magnitude, eight at a time (a scalar scan took 5% of a Q4_K_M prefill).
  float mx = amax;
  const __m256 target = _mm256_set1_ps(amax);
  for (int i = 0; i < 256; i += 8) {
    const int hit =
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)), target, _CMP_EQ_OQ));
    if (hit != 0) {
      mx = xb[i + __builtin_ctz(static_cast<unsigned>(hit))];
      break;
    }
  }
  const float iscale = -127.0f / mx;
  const __m256 is = _mm256_set1_ps(iscale);
  const __m256i top = _mm256_set1_epi32(127);
  for (int i = 0; i < 256; i += 32) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j)
      v[j] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8 * j), is)), top);
    const __m256i p8 =
        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3])),
                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), p8);
    s16[i / 16] = hsum_epi32(_mm256_add_epi32(v[0], v[1]));
    s16[i / 16 + 1] = hsum_epi32(_mm256_add_epi32(v[2], v[3]));
  }
  const float d = 1.0f / iscale;
  for (int i = 0; i < 8; ++i) d_out[i] = d;
}

// Quantises x [n, k] for a weight type with groups of `g_size` (16 or 32) elements and offset `off`.
// `f16_scale` (the 32-element types): the block scale used in the products is rounded to f16, as in GGUF's
// q8_0 activation blocks, which llama.cpp multiplies q4_0 / q5_0 weights with; with the f32 scale, near-tie
// greedy choices parted from llama.cpp's more often (measured while q8_0 weights still took this path:
// phi3_mini Q8_0 parity 6 of 8 continuations identical against 8 of 8).
// `k_blocks` (the K-quant types): blocks of 256 with one f32 scale (quantize_block256) instead of 32.
inline void quantize_acts(const float* x, int64_t n, int64_t k, int g_size, int off, bool with_min, bool f16_scale,
                          Acts& a, const Ctx& ctx, bool k_blocks = false) {
  const int64_t blocks = n * k / 32, groups = k / g_size;
  a.q.resize(static_cast<size_t>(n * k));
  a.d.resize(static_cast<size_t>(blocks));
  a.s16.resize(static_cast<size_t>(blocks * 2));
  a.start.resize(static_cast<size_t>(n * groups));
  a.xd.resize(static_cast<size_t>(n * groups));
  a.xs.resize(with_min ? static_cast<size_t>(n * groups) : 0);
  parallel_for(
      ctx, n,
      [&](int64_t r) {
        const int64_t b0 = r * k / 32;
        if (k_blocks) {
          for (int64_t b = b0; b < b0 + k / 32; b += 8)
            quantize_block256(x + b * 32, a.q.data() + b * 32, &a.d[static_cast<size_t>(b)], a.s16.data() + 2 * b);
        } else {
          for (int64_t b = b0; b < b0 + k / 32; ++b)
            quantize_block32(x + b * 32, a.q.data() + b * 32, &a.d[static_cast<size_t>(b)], a.s16.data() + 2 * b);
        }
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t e = g * g_size;  // first element of the group within the row
          const int32_t* s = a.s16.data() + (r * k + e) / 16;
          const int32_t sum = g_size == 16 ? s[0] : s[0] + s[1];
          float xd = a.d[static_cast<size_t>(b0 + e / 32)];
          if (f16_scale) xd = _cvtsh_ss(_cvtss_sh(xd, 0));
          const auto i = static_cast<size_t>(r * groups + g);
          a.start[i] = -off * sum;
          a.xd[i] = xd;
          if (with_min) a.xs[i] = xd * static_cast<float>(sum);
        }
      },
      static_cast<double>(k), 8192.0);
}

// One panel: kP weight rows decoded and interleaved. q: (k / 4) vectors of kP x 4 bytes (vector j holds
// elements 4j..4j+3 of every row, row r in lane r); s, mn: per group a vector of kP f32 values.
struct Panel {
  AVec<uint8_t> q;
  AVec<float> s, mn;
};

// out[t * ld + r] for the panel's rows r < rows and activation rows t0 .. t0 + TT - 1.
template <int TT, int kG, bool kMin>
void micro(const Panel& p, int64_t k, const Acts& a, int64_t t0, float* out, int64_t ld, int rows, const float* bias) {
  constexpr int kG4 = kG / 4;  // interleaved vectors per group
  const int64_t groups = k / kG;
  VF acc[TT];
#pragma GCC unroll 16
  for (auto& v : acc) v = fzero();
  const int32_t* xq[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) xq[t] = reinterpret_cast<const int32_t*>(a.q.data() + (t0 + t) * k);
  for (int64_t g = 0; g < groups; ++g) {
    VI isum[TT];
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) isum[t] = bcast(a.start[static_cast<size_t>((t0 + t) * groups + g)]);
    const uint8_t* pq = p.q.data() + g * kG4 * kP * 4;
#pragma GCC unroll 16
    for (int j = 0; j < kG4; ++j) {
      const VI w = load_vi(pq + j * kP * 4);
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        int32_t x4;
        std::memcpy(&x4, xq[t] + g * kG4 + j, 4);
        isum[t] = dot4(isum[t], w, bcast(x4));
      }
    }
    const VF s = load_vf(p.s.data() + g * kP);
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const auto i = static_cast<size_t>((t0 + t) * groups + g);
      acc[t] = fma_i(isum[t], vmul(s, bcastf(a.xd[i])), acc[t]);
    }
    if constexpr (kMin) {
      const VF mn = load_vf(p.mn.data() + g * kP);
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) acc[t] = fnma(mn, bcastf(a.xs[static_cast<size_t>((t0 + t) * groups + g)]), acc[t]);
    }
  }
  const VF b = bias ? load_rows(bias, rows) : fzero();
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) store_rows(out + t * ld, bias ? vadd(acc[t], b) : acc[t], rows);
}

template <int kG, bool kMin>
void tile(int tt, const Panel& p, int64_t k, const Acts& a, int64_t t0, float* out, int64_t ld, int rows,
          const float* bias) {
  switch (tt) {
#define TS_PACKED_CASE(n) \
  case n:                 \
    return micro<n, kG, kMin>(p, k, a, t0, out, ld, rows, bias);
    TS_PACKED_CASE(1)
    TS_PACKED_CASE(2)
    TS_PACKED_CASE(3)
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    TS_PACKED_CASE(4)
    TS_PACKED_CASE(5)
    TS_PACKED_CASE(6)
    TS_PACKED_CASE(7)
#endif
#undef TS_PACKED_CASE
    default:
      return micro<kT, kG, kMin>(p, k, a, t0, out, ld, rows, bias);
  }
}

// ---- Single rows (up to kGemvRows = 2; building a panel pays from 3 rows): no panel is built. Each weight row's bytes
// go from its blocks (Dec::unit) straight into one integer dot product per unit of one vector (64 / 32 elements) and
// activation row, which leaves partial sums spread over the lanes; a transpose-add then gathers them into one vector
// per group with the panel's rows in its lanes, and from there the f32 steps are those of micro() in the same order, so
// the outputs are bit for bit those of the panel path.
constexpr int64_t kGemvRows = 2;
constexpr int kPrefetchBytes = 1024;
constexpr int kUnitElems = static_cast<int>(sizeof(VI));

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// v[r]: 16 int32 lanes of row r. q[j] gets, in 128-bit lane L, the sums of lanes 4L..4L+3 of rows 4j..4j+3.
inline void reduce_rows(const VI* v, VI q[4]) {
  VI s[8];
  for (int i = 0; i < 8; ++i)
    s[i] =
        _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  for (int j = 0; j < 4; ++j)
    q[j] =
        _mm512_add_epi32(_mm512_unpacklo_epi64(s[2 * j], s[2 * j + 1]), _mm512_unpackhi_epi64(s[2 * j], s[2 * j + 1]));
}
// The unit's groups as vectors of 16 rows: groups of 32 elements span two 128-bit lanes, groups of 16 one.
template <int kG>
inline void unit_groups(const VI* v, VI* out) {
  VI q[4];
  reduce_rows(v, q);
  if constexpr (kG == 32) {
    const VI r01 = _mm512_add_epi32(_mm512_shuffle_i32x4(q[0], q[1], 0x88), _mm512_shuffle_i32x4(q[0], q[1], 0xdd));
    const VI r23 = _mm512_add_epi32(_mm512_shuffle_i32x4(q[2], q[3], 0x88), _mm512_shuffle_i32x4(q[2], q[3], 0xdd));
    out[0] = _mm512_shuffle_i32x4(r01, r23, 0x88);
    out[1] = _mm512_shuffle_i32x4(r01, r23, 0xdd);
  } else {
    const VI t0 = _mm512_shuffle_i32x4(q[0], q[1], 0x44), t1 = _mm512_shuffle_i32x4(q[0], q[1], 0xee);
    const VI t2 = _mm512_shuffle_i32x4(q[2], q[3], 0x44), t3 = _mm512_shuffle_i32x4(q[2], q[3], 0xee);
    out[0] = _mm512_shuffle_i32x4(t0, t2, 0x88);
    out[1] = _mm512_shuffle_i32x4(t0, t2, 0xdd);
    out[2] = _mm512_shuffle_i32x4(t1, t3, 0x88);
    out[3] = _mm512_shuffle_i32x4(t1, t3, 0xdd);
  }
}
inline VI load_x(const int8_t* p, int valid) {
  return valid == kUnitElems ? _mm512_loadu_si512(p)
                             : _mm512_maskz_loadu_epi8((valid >= 64 ? ~0ull : (1ull << valid) - 1ull), p);
}
inline VI vi_zero() { return _mm512_setzero_si512(); }
// The 32-bit word at byte `at` of block `b` of 16 rows (offs: the rows' byte offsets; rows outside `live` read 0).
template <typename B>
inline __m512i gather_word(const B* b, int at, __m512i offs, __mmask16 live) {
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, offs, reinterpret_cast<const char*>(b) + at, 1);
}
// f16 values in the low 16 bits of each lane, widened.
inline __m512 half_lo(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
inline VI vi_add(VI a, VI b) { return _mm512_add_epi32(a, b); }
#else
// v[r]: 8 int32 lanes of row r. q[j] gets, in 128-bit lane L, the sums of lanes 4L..4L+3 of rows 4j..4j+3.
inline void reduce_rows(const VI* v, VI q[2]) {
  VI s[4];
  for (int i = 0; i < 4; ++i)
    s[i] =
        _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  for (int j = 0; j < 2; ++j)
    q[j] =
        _mm256_add_epi32(_mm256_unpacklo_epi64(s[2 * j], s[2 * j + 1]), _mm256_unpackhi_epi64(s[2 * j], s[2 * j + 1]));
}
template <int kG>
inline void unit_groups(const VI* v, VI* out) {
  VI q[2];
  reduce_rows(v, q);
  const VI lo = _mm256_permute2x128_si256(q[0], q[1], 0x20), hi = _mm256_permute2x128_si256(q[0], q[1], 0x31);
  if constexpr (kG == 32) {
    out[0] = _mm256_add_epi32(lo, hi);
  } else {
    out[0] = lo;
    out[1] = hi;
  }
}
inline VI load_x(const int8_t* p, int valid) {
  if (valid == kUnitElems) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  alignas(32) int8_t tmp[32] = {};
  std::memcpy(tmp, p, static_cast<size_t>(valid));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
}
inline VI vi_zero() { return _mm256_setzero_si256(); }
inline VI vi_add(VI a, VI b) { return _mm256_add_epi32(a, b); }
#endif

// Every group's scale (and minimum) of rows 0 .. rows - 1 into s[g * kP + r] (mn likewise); rows beyond
// `rows` keep what they hold (zero). With Dec::scales16 (avx512 build, where the decoder has it) 16 rows at a time
// from gathered block headers, else row by row; both compute the same f32 products.
template <typename Dec>
void scales_rows(const typename Dec::Block* w, int64_t nb, int rows, float* s, float* mn) {
  for (int64_t b0 = 0; b0 < nb; b0 += Dec::kStepBlocks) {
    const int nbl = static_cast<int>(std::min<int64_t>(Dec::kStepBlocks, nb - b0));
    const int64_t g0 = b0 * Dec::kBlockElems / Dec::kGroup;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    if constexpr (requires { &Dec::scales16; }) {
      const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1u);
      const __m512i offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(static_cast<int>(nb * sizeof(typename Dec::Block))));
      for (int i = 0; i < nbl; ++i) {
        const int64_t gb = g0 + i * Dec::kBlockElems / Dec::kGroup;
        Dec::scales16(w + b0 + i, offs, live, s + gb * kP, Dec::kMin ? mn + gb * kP : nullptr);
      }
    } else {  // decoders without a 16-row form (the amx build's q2_k and q3_k): row by row
      for (int r = 0; r < rows; ++r)
        Dec::scales(w + r * nb, b0, nbl, s + g0 * kP + r, Dec::kMin ? mn + g0 * kP + r : nullptr);
    }
#else
    for (int r = 0; r < rows; ++r)
      Dec::scales(w + r * nb, b0, nbl, s + g0 * kP + r, Dec::kMin ? mn + g0 * kP + r : nullptr);
#endif
  }
}

// Rows i0 .. i0 + rows - 1 of w against TT activation rows. Dec::kStepBlocks blocks per step; Dec::scales
// writes their groups' scale and minimum (stride kP apart), Dec::unit returns the unsigned bytes of one unit.
// The weights are read one row at a time, front to back (one sequential stream is what the prefetcher
// serves; sixteen rows side by side ran at half the speed), into per-unit partial sums; the transpose-add
// and the f32 steps then run over the panel's units in order.
template <typename Dec, int TT>
void gemv_panel(const typename Dec::Block* w, int64_t nb, int64_t k, int rows, const Acts& a, float* out, int64_t ld,
                const float* bias) {
  constexpr int kGU = kUnitElems / Dec::kGroup;  // groups per unit
  constexpr int kStepElems = Dec::kStepBlocks * Dec::kBlockElems;
  constexpr int kUnits = (kStepElems + kUnitElems - 1) / kUnitElems;
  const int64_t groups = k / Dec::kGroup;
  const int64_t units = (k + kUnitElems - 1) / kUnitElems;
  // Scratch of this thread, reached through plain pointers below (each use of a thread_local name costs a
  // call to its initialisation guard).
  thread_local AVec<float> tls_s, tls_m;
  thread_local AVec<uint8_t> tls_part;  // raw bytes: a vector of VI would drop its alignment attribute
  tls_s.resize(static_cast<size_t>(groups * kP));
  if (Dec::kMin) tls_m.resize(static_cast<size_t>(groups * kP));
  tls_part.resize(static_cast<size_t>(TT * units * kP) * sizeof(VI));
  float* sbuf = tls_s.data();
  float* mbuf = Dec::kMin ? tls_m.data() : nullptr;
  VI* part = reinterpret_cast<VI*>(tls_part.data());  // [TT][units][kP]
  if (rows < kP) {
    for (int64_t g = 0; g < groups; ++g)
      for (int r = rows; r < kP; ++r) {
        sbuf[static_cast<size_t>(g * kP + r)] = 0.0f;
        if (Dec::kMin) mbuf[static_cast<size_t>(g * kP + r)] = 0.0f;
      }
    for (int64_t i = 0; i < TT * units; ++i)
      for (int r = rows; r < kP; ++r) part[static_cast<size_t>(i * kP + r)] = vi_zero();
  }
  const int8_t* xq = a.q.data();
  static_assert(kStepElems % kUnitElems == 0, "a step is whole units");
  const int64_t full = nb / Dec::kStepBlocks * Dec::kStepBlocks;  // blocks in whole steps
  for (int r = 0; r < rows; ++r) {
    const auto* wr = w + r * nb;
    // Whole steps: no bounds to check.
    for (int64_t b0 = 0; b0 < full; b0 += Dec::kStepBlocks) {
      // The rows of a panel are adjacent in memory: fetch ahead of this one (the hardware prefetcher alone left
      // each step waiting on its first load).
      _mm_prefetch(reinterpret_cast<const char*>(wr + b0) + kPrefetchBytes, _MM_HINT_T0);
      const int64_t e0 = b0 * Dec::kBlockElems;
#pragma GCC unroll 8
      for (int u = 0; u < kUnits; ++u) {
        const int64_t e = e0 + u * kUnitElems;
        const VI wv = Dec::unit(wr, b0, Dec::kStepBlocks, u);
        VI* pr = part + (e / kUnitElems) * kP + r;
#pragma GCC unroll 4
        for (int t = 0; t < TT; ++t) pr[t * units * kP] = dot4(vi_zero(), wv, load_x(xq + t * k + e, kUnitElems));
      }
    }
    // A last, partial step (the 32-element types with an odd number of blocks in the avx512 build).
    if (full < nb) {
      const int nbl = static_cast<int>(nb - full);
      const int64_t e = full * Dec::kBlockElems;
      const int valid = static_cast<int>(k - e);
      const VI wv = Dec::unit(wr, full, nbl, 0);
      for (int t = 0; t < TT; ++t)
        part[static_cast<size_t>((t * units + e / kUnitElems) * kP + r)] =
            dot4(vi_zero(), wv, load_x(xq + t * k + e, valid));
    }
  }
  // The scales of all rows at once, now that the panel's blocks are in cache.
  scales_rows<Dec>(w, nb, rows, sbuf, mbuf);
  VF acc[TT];
#pragma GCC unroll 4
  for (auto& v : acc) v = fzero();
  for (int64_t ui = 0; ui < units; ++ui) {
    const int64_t g0 = ui * kGU;
    const int ng = static_cast<int>(std::min<int64_t>(kGU, groups - g0));
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) {
      VI gv[kGU];
      unit_groups<Dec::kGroup>(part + (t * units + ui) * kP, gv);
      for (int gl = 0; gl < ng; ++gl) {
        const int64_t g = g0 + gl;
        const auto i = static_cast<size_t>(t * groups + g);
        const VI isum = vi_add(gv[gl], bcast(a.start[i]));
        acc[t] = fma_i(isum, vmul(load_vf(sbuf + g * kP), bcastf(a.xd[i])), acc[t]);
        if constexpr (Dec::kMin) acc[t] = fnma(load_vf(mbuf + g * kP), bcastf(a.xs[i]), acc[t]);
      }
    }
  }
  const VF b = bias ? load_rows(bias, rows) : fzero();
  for (int t = 0; t < TT; ++t) store_rows(out + t * ld, bias ? vadd(acc[t], b) : acc[t], rows);
}

template <typename Dec>
void gemv(const MatMulOp& op, const Acts& acts, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0), nb = k / Dec::kBlockElems;
  const auto* w = data<const typename Dec::Block>(op.w);
  float* out = data<float>(op.out);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  parallel_for(ctx, (m + kP - 1) / kP, [&](int64_t pi) {
    const int64_t i0 = pi * kP;
    const int rows = static_cast<int>(std::min<int64_t>(kP, m - i0));
    const auto* wp = w + i0 * nb;
    float* o = out + i0;
    const float* bp = bias ? bias + i0 : nullptr;
    switch (n) {
      case 1:
        return gemv_panel<Dec, 1>(wp, nb, k, rows, acts, o, m, bp);
      case 2:
        return gemv_panel<Dec, 2>(wp, nb, k, rows, acts, o, m, bp);
      case 3:
        return gemv_panel<Dec, 3>(wp, nb, k, rows, acts, o, m, bp);
      default:
        return gemv_panel<Dec, 4>(wp, nb, k, rows, acts, o, m, bp);
    }
  });
}

// The transpose of kP unit vectors, one per row (each kUnitElems / 4 dwords of four elements): output j gets
// dword j of every row. Dwords are first transposed four by four inside each 128-bit lane (unpack), then the
// 128-bit lanes across the row groups (shuffle).
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
inline void transpose_units(const VI* v, VI* out) {
  VI u[4][4];
  for (int g = 0; g < 4; ++g) {
    const VI* r = v + 4 * g;
    const VI t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
    const VI t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
    u[g][0] = _mm512_unpacklo_epi64(t0, t2);
    u[g][1] = _mm512_unpackhi_epi64(t0, t2);
    u[g][2] = _mm512_unpacklo_epi64(t1, t3);
    u[g][3] = _mm512_unpackhi_epi64(t1, t3);
  }
  // u[g][c], 128-bit lane L: dword 4L + c of rows 4g..4g+3.
  for (int c = 0; c < 4; ++c) {
    const VI t0 = _mm512_shuffle_i32x4(u[0][c], u[1][c], 0x44), t1 = _mm512_shuffle_i32x4(u[0][c], u[1][c], 0xee);
    const VI t2 = _mm512_shuffle_i32x4(u[2][c], u[3][c], 0x44), t3 = _mm512_shuffle_i32x4(u[2][c], u[3][c], 0xee);
    out[c] = _mm512_shuffle_i32x4(t0, t2, 0x88);
    out[4 + c] = _mm512_shuffle_i32x4(t0, t2, 0xdd);
    out[8 + c] = _mm512_shuffle_i32x4(t1, t3, 0x88);
    out[12 + c] = _mm512_shuffle_i32x4(t1, t3, 0xdd);
  }
}
inline void store_vi(void* p, VI v) { _mm512_store_si512(p, v); }
#else
inline void transpose_units(const VI* v, VI* out) {
  VI u[2][4];
  for (int g = 0; g < 2; ++g) {
    const VI* r = v + 4 * g;
    const VI t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const VI t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    u[g][0] = _mm256_unpacklo_epi64(t0, t2);
    u[g][1] = _mm256_unpackhi_epi64(t0, t2);
    u[g][2] = _mm256_unpacklo_epi64(t1, t3);
    u[g][3] = _mm256_unpackhi_epi64(t1, t3);
  }
  for (int c = 0; c < 4; ++c) {
    out[c] = _mm256_permute2x128_si256(u[0][c], u[1][c], 0x20);
    out[4 + c] = _mm256_permute2x128_si256(u[0][c], u[1][c], 0x31);
  }
}
inline void store_vi(void* p, VI v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
#endif

// Decodes weight rows i0 .. i0 + rows - 1 into the panel with the decode kernel's Dec::unit and Dec::scales
// (so both paths see the same bytes and scales); missing rows of the last panel are zero.
template <typename Dec>
void pack(const typename Dec::Block* w, int64_t nb, int64_t k, int rows, Panel& p) {
  constexpr int kStepElems = Dec::kStepBlocks * Dec::kBlockElems;
  constexpr int kUnits = kStepElems / kUnitElems;
  constexpr int kDwords = kUnitElems / 4;  // output vectors per unit
  const int64_t groups = k / Dec::kGroup;
  p.q.resize(static_cast<size_t>(kP * k));
  p.s.assign(static_cast<size_t>(kP * groups), 0.0f);
  p.mn.assign(Dec::kMin ? static_cast<size_t>(kP * groups) : 0, 0.0f);
  // Row by row first (one sequential stream, as in gemv_panel: walking the rows side by side left every block
  // waiting on memory), into per-row unit vectors; then the transposes, from cache.
  const int64_t units = (k + kUnitElems - 1) / kUnitElems;
  thread_local AVec<uint8_t> tls_rows;  // raw bytes, as in gemv_panel
  tls_rows.resize(static_cast<size_t>(kP * units) * sizeof(VI));
  VI* rowv = reinterpret_cast<VI*>(tls_rows.data());  // [kP][units]
  for (int r = 0; r < kP; ++r) {
    VI* dst = rowv + r * units;
    if (r >= rows) {
      for (int64_t ui = 0; ui < units; ++ui) dst[ui] = vi_zero();
      continue;
    }
    const auto* wr = w + r * nb;
    for (int64_t b0 = 0; b0 < nb; b0 += Dec::kStepBlocks) {
      const int nbl = static_cast<int>(std::min<int64_t>(Dec::kStepBlocks, nb - b0));
      _mm_prefetch(reinterpret_cast<const char*>(wr + b0) + kPrefetchBytes, _MM_HINT_T0);
      for (int u = 0; u < kUnits; ++u) {
        const int64_t e = b0 * Dec::kBlockElems + u * kUnitElems;
        if (e >= k) break;
        dst[e / kUnitElems] = Dec::unit(wr, b0, nbl, u);
      }
    }
  }
  scales_rows<Dec>(w, nb, rows, p.s.data(), Dec::kMin ? p.mn.data() : nullptr);
  VI v[kP], out[kP];
  for (int64_t ui = 0; ui < units; ++ui) {
    for (int r = 0; r < kP; ++r) v[r] = rowv[r * units + ui];
    transpose_units(v, out);
    const int64_t e = ui * kUnitElems;
    const int n_out = static_cast<int>(std::min<int64_t>(kDwords, (k - e) / 4));
    uint8_t* dst = p.q.data() + e * kP;
    for (int j = 0; j < n_out; ++j) store_vi(dst + j * kP * 4, out[j]);
  }
}

// Token rows per pass over the panels: their int8 activations (up to 256 x k bytes) stay in L2 while every
// panel is decoded once per pass.
constexpr int64_t kTokenBlock = 256;

// out [n, m] = x [n, k] . w [m, k]^T (+ bias) with w in Dec's block type.
template <typename Dec>
void matmul(const MatMulOp& op, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0), nb = k / Dec::kBlockElems;
  const auto* w = data<const typename Dec::Block>(op.w);
  float* out = data<float>(op.out);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  // The caller's thread owns the activations; the workers reach them through this reference (naming a
  // thread_local inside the lambda would give each worker its own, empty, copy).
  thread_local Acts tls_acts;
  Acts& acts = tls_acts;
  quantize_acts(data<const float>(op.x), n, k, Dec::kGroup, Dec::kOffset, Dec::kMin, Dec::kBlockElems == 32, acts, ctx,
                Dec::kBlockElems == 256);
  if (n <= kGemvRows) return gemv<Dec>(op, acts, ctx);
  const int64_t panels = (m + kP - 1) / kP;
  parallel_for_blocks(ctx, panels, (n + kTokenBlock - 1) / kTokenBlock, [&](int64_t blk, int64_t pi) {
    const int64_t r0 = blk * kTokenBlock, r1 = std::min(n, r0 + kTokenBlock);
    {
      thread_local Panel panel;
      const int64_t i0 = pi * kP;
      const int rows = static_cast<int>(std::min<int64_t>(kP, m - i0));
      pack<Dec>(w + i0 * nb, nb, k, rows, panel);
      for (int64_t t0 = r0; t0 < r1; t0 += kT) {
        const int tt = static_cast<int>(std::min<int64_t>(kT, r1 - t0));
        tile<Dec::kGroup, Dec::kMin>(tt, panel, k, acts, t0, out + t0 * m + i0, m, rows, bias ? bias + i0 : nullptr);
      }
    }
  });
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA::packed
#endif  // __AVX2__
