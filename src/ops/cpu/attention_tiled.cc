// The tiled attention path of the avx512 and avx2 builds (attention.cc has the rest of the f32/f16/bf16 cache's
// kernels and the operators' entry points): the queries that share a kv head (the tokens of a prefill chunk, the
// query heads of a grouped-query decode) multiplied against one widened, transposed key panel, several at a time,
// for head_dim a multiple of 16 (tiled_heads_here). Past kKeyBlock positions the keys come in blocks of kKeyBlock with
// an online softmax (running max and sum per query, partial outputs rescaled when the max rises, one division at the
// end), so the key panel and the score rows stay in L2 at any length.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/attention_cache.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

#if defined(__AVX2__)
namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail {
namespace {

#if defined(__AVX512F__)
// e^x: x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7 (relative error < 2e-8 there), and
// 2^n applied by scalef. -inf (masked keys) and anything below -110 give 0; NaN stays NaN.
inline __m512 exp16(__m512 x) {
  x = _mm512_maskz_max_ps(0xffff, _mm512_set1_ps(-110.0f), x);  // masked forms: see widen16
  const __m512 n = _mm512_maskz_roundscale_ps(0xffff, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(0xffff, p, n);
}

inline float sum16(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  return hsum(_mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, d, 0)),
                            _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, d, 1))));
}

#endif

// The tiled path's vector: 16 lanes in the avx512 build, 8 in the avx2 build (kVPerPass vectors of outputs
// per query held in registers by tile_values: 64 or 16 columns).
#if defined(__AVX512F__)
using VF = __m512;
constexpr int kLanes = 16, kVPerPass = 4;
inline VF vzero() { return _mm512_setzero_ps(); }
inline VF vset(float v) { return _mm512_set1_ps(v); }
inline VF vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, VF v) { _mm512_storeu_ps(p, v); }
inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline VF vadd(VF a, VF b) { return _mm512_add_ps(a, b); }
inline VF vsub(VF a, VF b) { return _mm512_sub_ps(a, b); }
inline VF vmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
// Elements [d0, d0 + kLanes) of a cache row (row_at): f32, f16, or q8_0 / q4_0 blocks read in place.
template <typename T>
inline VF vrow(const T* row, int64_t d0) {
  return row16(row, static_cast<int>(d0 / kLanes));
}
inline VF vexp(VF x) { return exp16(x); }
inline float vsum(VF v) { return sum16(v); }
inline VF vdiv(VF a, VF b) { return _mm512_maskz_div_ps(0xffff, a, b); }  // masked forms: see widen16
inline VF vmax(VF a, VF b) { return _mm512_maskz_max_ps(0xffff, a, b); }
// The kLanes x kLanes block r[j][d] (key j, dimension d) transposed in registers: out[d] holds r[0..kLanes)[d].
// (Masked forms throughout: see widen16.)
inline void vtranspose(VF* r) {
  VF t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(0xffff, r[i],
                                    r[i + 1]);  // per 128-bit lane L: r_i[4L], r_i+1[4L], r_i[4L+1], r_i+1[4L+1]
    t[i + 1] = _mm512_maskz_unpackhi_ps(0xffff, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // u[i + k], lane L: dimension 4L + k of keys i .. i + 3
    u[i] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, _mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    u[i + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, _mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    u[i + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, _mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    u[i + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, _mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  for (int k = 0; k < 4; ++k) {
    const VF a0 = _mm512_maskz_shuffle_f32x4(0xffff, u[k], u[4 + k], 0x88),
             a1 = _mm512_maskz_shuffle_f32x4(0xffff, u[k], u[4 + k], 0xdd);
    const VF b0 = _mm512_maskz_shuffle_f32x4(0xffff, u[8 + k], u[12 + k], 0x88),
             b1 = _mm512_maskz_shuffle_f32x4(0xffff, u[8 + k], u[12 + k], 0xdd);
    r[k] = _mm512_maskz_shuffle_f32x4(0xffff, a0, b0, 0x88);       // dimension k
    r[8 + k] = _mm512_maskz_shuffle_f32x4(0xffff, a0, b0, 0xdd);   // 8 + k
    r[4 + k] = _mm512_maskz_shuffle_f32x4(0xffff, a1, b1, 0x88);   // 4 + k
    r[12 + k] = _mm512_maskz_shuffle_f32x4(0xffff, a1, b1, 0xdd);  // 12 + k
  }
}
inline float vhmax(VF v) {
  const __m512d d = _mm512_castps_pd(v);
  const __m256 m = _mm256_max_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, d, 0)),
                                 _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, d, 1)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}
#else
using VF = __m256;
constexpr int kLanes = 8, kVPerPass = 2;
inline VF vzero() { return _mm256_setzero_ps(); }
inline VF vset(float v) { return _mm256_set1_ps(v); }
inline VF vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, VF v) { _mm256_storeu_ps(p, v); }
inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline VF vadd(VF a, VF b) { return _mm256_add_ps(a, b); }
inline VF vsub(VF a, VF b) { return _mm256_sub_ps(a, b); }
inline VF vmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
template <typename T>
inline VF vrow(const T* row, int64_t d0) {
  return row8(row, static_cast<int>(d0 / kLanes));
}
inline VF vexp(VF x) { return exp8(x); }
inline float vsum(VF v) { return hsum(v); }
inline VF vdiv(VF a, VF b) { return _mm256_div_ps(a, b); }
inline VF vmax(VF a, VF b) { return _mm256_max_ps(a, b); }
inline void vtranspose(VF* r) {  // as the avx512 form, 8 x 8
  VF t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}
inline float vhmax(VF v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}
#endif

// Attention for several queries that read the same kv head (the tokens of a prefill chunk; the query heads
// of a grouped-query decode) as small matrix products. The keys the queries see are
// widened once into a transposed f32 panel kt[d][t], so the scores of up to kQTile queries against kLanes keys
// are kQTile vector accumulators fed by one panel load and broadcasts of the queries; the weighted sum over
// values keeps kQTile x kVPerPass vectors of outputs in registers while each value row is widened once for all queries.
// Softmax is the reference's (max-subtracted, then normalised) with a vectorised exp; a query's keys outside
// its own range (causality, a window) get probability exactly 0.
constexpr int kQTile = 6;

// The panel in chunks of kChunk keys: chunk after chunk, each hd rows of kChunk floats (column col of row d at
// kt + panel_at(hd, d, col)), so the score loop's walk over d for one pair of key vectors reads one contiguous run
// (8 KiB at head_dim 64) instead of two lines a row apart.
constexpr int64_t kChunk = 2 * kLanes;
inline int64_t panel_at(int64_t hd, int64_t d, int64_t col) {
  return col / kChunk * hd * kChunk + d * kChunk + col % kChunk;
}
// Floats of a panel at least `cols` wide.
inline int64_t panel_floats(int64_t hd, int64_t cols) { return (cols + kChunk - 1) / kChunk * kChunk * hd; }

// Widens keys [t0, t1) of kv head kvh into the transposed panel: column t - t0 of row d at panel_at. Whole groups
// of kLanes keys are transposed in registers (element by element, the scatter was half of the attention's own time
// in a 512-token prefill); the rest one element at a time. Copies only: the panel's values are the same either way.
template <typename T>
void widen_keys(const Cache& c, const int32_t* table, int64_t kvh, int32_t t0, int32_t t1, float* kt) {
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const int64_t hd = c.head_dim;
  int32_t t = t0;
  for (; t + kLanes <= t1; t += kLanes) {
    const T* rows[kLanes];
    for (int j = 0; j < kLanes; ++j)
      rows[j] = row_at(kbase, c.elem(table[(t + j) / c.block_tokens], (t + j) % c.block_tokens, kvh));
    for (int64_t d0 = 0; d0 < hd; d0 += kLanes) {
      VF r[kLanes];
#pragma GCC unroll 16
      for (int j = 0; j < kLanes; ++j) r[j] = vrow(rows[j], d0);
      vtranspose(r);
#pragma GCC unroll 16
      for (int d = 0; d < kLanes; ++d) vstore(kt + panel_at(hd, d0 + d, t - t0), r[d]);
    }
  }
  float row[kLanes];
  for (; t < t1; ++t) {
    const T* k = row_at(kbase, c.elem(table[t / c.block_tokens], t % c.block_tokens, kvh));
    for (int64_t d0 = 0; d0 < hd; d0 += kLanes) {
      vstore(row, vrow(k, d0));
      for (int64_t d = 0; d < kLanes; ++d) kt[panel_at(hd, d0 + d, t - t0)] = row[d];
    }
  }
}

// How a dot product becomes a score: times opt.scale when one is given, else divided by sqrt(head_dim), as the
// reference does; a divisor that is a power of two (head_dim 64, 256) is a multiplication by its reciprocal, which
// gives the same bits (both round the same exact quotient) without a division's latency.
struct ScoreScale {
  VF v;
  bool divide;
  ScoreScale(const AttentionScores& opt, int64_t hd) {
    const float denom = std::sqrt(static_cast<float>(hd));
    int e = 0;
    divide = opt.scale <= 0.0f && std::frexp(denom, &e) != 0.5f;
    v = vset(opt.scale > 0.0f ? opt.scale : divide ? denom : 1.0f / denom);
  }
  VF operator()(VF x) const { return divide ? vdiv(x, v) : vmul(x, v); }
};

// The value rows of positions [t0, t1) of kv head kvh: rows[t - t0]. Looked up once for all the query tiles that
// read them, instead of once per key and tile.
template <typename T>
void value_rows(const Cache& c, const int32_t* table, int64_t kvh, int32_t t0, int32_t t1, const T** rows) {
  const T* vbase = reinterpret_cast<const T*>(c.v);
  for (int32_t t = t0; t < t1; ++t)
    rows[t - t0] = row_at(vbase, c.elem(table[t / c.block_tokens], t % c.block_tokens, kvh));
}

// Scaled scores (ScoreScale) of queries qs[0..g) against the panel's columns [c0, c1) (multiples of 16) into
// s[g * ld + column]. A whole chunk's two vectors of keys per pass where there are two (2G accumulators: G alone left
// FMA latency exposed, and each query broadcast serves both); every score is the same chain of FMAs over d either way.
template <int G>
void tile_scores(const Query* qs, const float* kt, int64_t ld, int64_t hd, int64_t c0, int64_t c1, float* s,
                 const ScoreScale& scale) {
  for (int64_t c = c0; c < c1;) {
    const float* chunk = kt + panel_at(hd, 0, c);
    if (c % kChunk != 0 || c + kChunk > c1) {  // one vector of keys
      VF acc[G];
#pragma GCC unroll 6
      for (int g = 0; g < G; ++g) acc[g] = vzero();
      for (int64_t d = 0; d < hd; ++d) {
        const VF kv = vload(chunk + d * kChunk);
#pragma GCC unroll 6
        for (int g = 0; g < G; ++g) acc[g] = vfma(vset(qs[g].q[d]), kv, acc[g]);
      }
#pragma GCC unroll 6
      for (int g = 0; g < G; ++g) vstore(s + g * ld + c, scale(acc[g]));
      c += kLanes;
      continue;
    }
    VF acc0[G], acc1[G];
#pragma GCC unroll 6
    for (int g = 0; g < G; ++g) acc0[g] = acc1[g] = vzero();
    for (int64_t d = 0; d < hd; ++d) {
      const VF k0 = vload(chunk + d * kChunk), k1 = vload(chunk + d * kChunk + kLanes);
#pragma GCC unroll 6
      for (int g = 0; g < G; ++g) {
        const VF qv = vset(qs[g].q[d]);
        acc0[g] = vfma(qv, k0, acc0[g]);
        acc1[g] = vfma(qv, k1, acc1[g]);
      }
    }
#pragma GCC unroll 6
    for (int g = 0; g < G; ++g) {
      vstore(s + g * ld + c, scale(acc0[g]));
      vstore(s + g * ld + c + kLanes, scale(acc1[g]));
    }
    c += kChunk;
  }
}

// out_g[col .. col + VP * kLanes) = alpha_g * out_g[col ..) + sum over keys t in [c0, c1) of p_g[t] * v_t, v_t the
// cache row vrows[t] (alpha null: out_g = the sum alone, the short-context path; the long-context one rescales by
// its running max).
template <typename T, int G, int VP = kVPerPass>
void tile_values(const Query* qs, const T* const* vrows, const float* p, int64_t ld, int64_t c0, int64_t c1,
                 int64_t col, const float* alpha) {
  VF o[G][VP];
#pragma GCC unroll 6
  for (int g = 0; g < G; ++g) {
    const VF a = vset(alpha ? alpha[g] : 0.0f);
#pragma GCC unroll 4
    for (int u = 0; u < VP; ++u) o[g][u] = alpha ? vmul(a, vload(qs[g].out + col + kLanes * u)) : vzero();
  }
  for (int64_t c = c0; c < c1; ++c) {
    const T* v = vrows[c];
    VF vv[VP];
#pragma GCC unroll 4
    for (int u = 0; u < VP; ++u) vv[u] = vrow(v, col + kLanes * u);
#pragma GCC unroll 6
    for (int g = 0; g < G; ++g) {
      const VF pv = vset(p[g * ld + c]);
#pragma GCC unroll 4
      for (int u = 0; u < VP; ++u) o[g][u] = vfma(pv, vv[u], o[g][u]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int u = 0; u < VP; ++u) vstore(qs[g].out + col + kLanes * u, o[g][u]);
}

// tile_values over every column of the head: whole passes of kVPerPass vectors, then the 1 to kVPerPass - 1 left
// (heads of 48, 80, 96 or 112 in the avx512 build).
template <typename T, int G>
void tile_values_all(const Query* qs, const T* const* vrows, const float* p, int64_t ld, int64_t c0, int64_t c1,
                     int64_t hd, const float* alpha) {
  int64_t col = 0;
  for (; col + kVPerPass * kLanes <= hd; col += kVPerPass * kLanes)
    tile_values<T, G>(qs, vrows, p, ld, c0, c1, col, alpha);
  switch ((hd - col) / kLanes) {
    case 1:
      return tile_values<T, G, 1>(qs, vrows, p, ld, c0, c1, col, alpha);
#if defined(__AVX512F__)
    case 2:
      return tile_values<T, G, 2>(qs, vrows, p, ld, c0, c1, col, alpha);
    case 3:
      return tile_values<T, G, 3>(qs, vrows, p, ld, c0, c1, col, alpha);
#endif
    default:
      return;
  }
}

// One query's scaled scores sg[a, b) (of the tile's columns [c0, c1), whole vectors) soft-capped in place when
// opt has a cap, the other columns set to -inf, then each replaced by e^(score - mx), mx the largest of m0 and the
// scores (in *mx). Returns the sum of those exponentials. The max is exact in any order.
inline float exp_scores(float* sg, int64_t a, int64_t b, int64_t c0, int64_t c1, float m0, const AttentionScores& opt,
                        float* mx) {
  if (opt.softcap > 0.0f) {
    for (int64_t t = a; t < b; ++t) sg[t] = opt.softcap * std::tanh(sg[t] / opt.softcap);
  }
  for (int64_t t = c0; t < a; ++t) sg[t] = -INFINITY;
  for (int64_t t = b; t < c1; ++t) sg[t] = -INFINITY;
  VF mxv = vset(m0);
  for (int64_t t = c0; t < c1; t += kLanes) mxv = vmax(mxv, vload(sg + t));
  *mx = vhmax(mxv);
  const VF mv = vset(*mx);
  VF sum = vzero();
  for (int64_t t = c0; t < c1; t += kLanes) {
    const VF e = vexp(vsub(vload(sg + t), mv));
    vstore(sg + t, e);
    sum = vadd(sum, e);
  }
  return vsum(sum);
}

template <typename T, int G>
void attend_tile(const Query* qs, const float* kt, int64_t ld, int32_t lo, const T* const* vrows, int64_t hd,
                 std::vector<float>& s, const AttentionScores& opt) {
  int32_t tlo = qs[0].first, thi = qs[0].last;
  for (int g = 1; g < G; ++g) {
    tlo = std::min(tlo, qs[g].first);
    thi = std::max(thi, qs[g].last);
  }
  const int64_t c0 = (tlo - lo) / 16 * 16, c1 = (thi - lo) / 16 * 16 + 16;
  s.resize(static_cast<size_t>(G * ld));
  tile_scores<G>(qs, kt, ld, hd, c0, c1, s.data(), ScoreScale(opt, hd));
  for (int g = 0; g < G; ++g) {
    float* sg = s.data() + g * ld;
    const int64_t a = qs[g].first - lo, b = qs[g].last - lo + 1;  // this query's keys: [a, b)
    float mx;
    const float sum = exp_scores(sg, a, b, c0, c1, qs[g].sink, opt, &mx);  // from the sink: -inf without one
    const VF inv = vset(1.0f / (sum + std::exp(qs[g].sink - mx)));
    for (int64_t t = c0; t < c1; t += kLanes) vstore(sg + t, vmul(vload(sg + t), inv));
  }
  // Value rows are read for the keys some query of the tile sees, [tlo, thi].
  tile_values_all<T, G>(qs, vrows, s.data(), ld, tlo - lo, thi - lo + 1, hd, nullptr);
}

// Long contexts: the queries' keys in blocks of kKeyBlock positions with an online softmax. One block's keys are
// widened into the panel (hd x kKeyBlock floats: 64 KiB at head_dim 64) and its score rows are kKeyBlock wide,
// so both stay in L2 however long the context; each query keeps its running max m and sum l, and its output
// row (the unnormalised weighted sum) is rescaled by e^(m_old - m_new) when a block raises the max, then divided
// by l once at the end. Contexts of one block take attend_tile above unchanged.
struct Running {
  float m, l;  // the max logit so far (the sink's to start with) and the sum of e^(logit - m)
};

// One key block [b0, b1) (panel column t - b0) for the queries qs[0..G): their scores, the online softmax
// update of st[0..G), and their rescaled outputs.
template <typename T, int G>
void attend_tile_block(const Query* qs, Running* st, const float* kt, int32_t b0, int32_t b1, const T* const* vrows,
                       int64_t hd, std::vector<float>& s, const AttentionScores& opt) {
  constexpr int64_t ld = kKeyBlock;
  int32_t tlo = qs[0].first, thi = qs[0].last;
  for (int g = 1; g < G; ++g) {
    tlo = std::min(tlo, qs[g].first);
    thi = std::max(thi, qs[g].last);
  }
  tlo = std::max(tlo, b0);
  thi = std::min(thi, b1 - 1);
  if (tlo > thi) return;  // no query of the tile sees a key of this block
  const int64_t c0 = (tlo - b0) / 16 * 16, c1 = (thi - b0) / 16 * 16 + 16;
  s.resize(static_cast<size_t>(G * ld));
  tile_scores<G>(qs, kt, ld, hd, c0, c1, s.data(), ScoreScale(opt, hd));
  float alpha[G];
  for (int g = 0; g < G; ++g) {
    float* sg = s.data() + g * ld;
    const int64_t a = std::max(qs[g].first, b0) - b0, b = std::min(qs[g].last, b1 - 1) - b0 + 1;  // its keys
    if (a >= b) {  // none here: probability 0 for every key of the block, output unchanged
      std::fill(sg + c0, sg + c1, 0.0f);
      alpha[g] = 1.0f;
      continue;
    }
    float mx;
    const float sum = exp_scores(sg, a, b, c0, c1, st[g].m, opt, &mx);
    alpha[g] = std::exp(st[g].m - mx);  // 0 on the first block without a sink (m = -inf)
    st[g].l = st[g].l * alpha[g] + sum;
    st[g].m = mx;
  }
  tile_values_all<T, G>(qs, vrows, s.data(), ld, tlo - b0, thi - b0 + 1, hd, alpha);
}

template <typename T, int G>
void attend_tiles_block(const Query* qs, Running* st, int64_t nq, const float* kt, int32_t b0, int32_t b1,
                        const T* const* vrows, int64_t hd, std::vector<float>& s, const AttentionScores& opt) {
  int64_t i = 0;
  for (; i + G <= nq; i += G) attend_tile_block<T, G>(qs + i, st + i, kt, b0, b1, vrows, hd, s, opt);
  if constexpr (G > 1) {
    if (i < nq) attend_tiles_block<T, G - 1>(qs + i, st + i, nq - i, kt, b0, b1, vrows, hd, s, opt);
  }
}

// Keys [lo, hi] in blocks of kKeyBlock for the queries qs[0..nq), from the states st[i] = {sink or -inf, 0} and
// zeroed outputs: the online softmax's running states and the unnormalised outputs.
template <typename T>
void attend_key_blocks(const Cache& c, const int32_t* table, int64_t kvh, const Query* qs, int64_t nq, int32_t lo,
                       int32_t hi, Running* st, const AttentionScores& opt) {
  thread_local std::vector<float> kt, s;
  const int64_t hd = c.head_dim;
  kt.resize(static_cast<size_t>(panel_floats(hd, kKeyBlock)));
  for (int64_t i = 0; i < nq; ++i) std::memset(qs[i].out, 0, static_cast<size_t>(hd) * sizeof(float));
  const T* vrows[kKeyBlock];
  for (int32_t b0 = lo; b0 <= hi; b0 += kKeyBlock) {
    const int32_t b1 = std::min(hi + 1, b0 + kKeyBlock);
    widen_keys<T>(c, table, kvh, b0, b1, kt.data());
    value_rows<T>(c, table, kvh, b0, b1, vrows);
    attend_tiles_block<T, kQTile>(qs, st, nq, kt.data(), b0, b1, vrows, hd, s, opt);
  }
}

// attend_queries for a context longer than one key block.
template <typename T>
void attend_queries_blocked(const Cache& c, const int32_t* table, int64_t kvh, const Query* qs, int64_t nq, int32_t lo,
                            int32_t hi, const AttentionScores& opt) {
  thread_local std::vector<Running> st;
  const int64_t hd = c.head_dim;
  st.resize(static_cast<size_t>(nq));
  for (int64_t i = 0; i < nq; ++i) st[static_cast<size_t>(i)] = {qs[i].sink, 0.0f};
  attend_key_blocks<T>(c, table, kvh, qs, nq, lo, hi, st.data(), opt);
  for (int64_t i = 0; i < nq; ++i) {
    const Running& r = st[static_cast<size_t>(i)];
    const VF inv = vset(1.0f / (r.l + std::exp(qs[i].sink - r.m)));
    for (int64_t d = 0; d < hd; d += kLanes) vstore(qs[i].out + d, vmul(vload(qs[i].out + d), inv));
  }
}

}  // namespace

// Queries qs[0..nq) of kv head kvh, all reading `table`: widens their keys into the panel, then runs them
// kQTile at a time. head_dim where tiled_heads_here.
template <typename T>
void attend_queries(const Cache& c, const int32_t* table, int64_t kvh, const Query* qs, int64_t nq,
                    const AttentionScores& opt) {
  thread_local std::vector<float> kt, s;
  const int64_t hd = c.head_dim;
  int32_t lo = qs[0].first, hi = qs[0].last;
  for (int64_t i = 1; i < nq; ++i) {
    lo = std::min(lo, qs[i].first);
    hi = std::max(hi, qs[i].last);
  }
  if (hi - lo + 1 > kKeyBlock) {
    attend_queries_blocked<T>(c, table, kvh, qs, nq, lo, hi, opt);
    return;
  }
  // Whole 16-key groups from any start, and whole chunks of the panel.
  const int64_t ld = ((hi - lo + 1 + 15) / 16 * 16 + 16 + kChunk - 1) / kChunk * kChunk;
  kt.resize(static_cast<size_t>(panel_floats(hd, ld)));
  widen_keys<T>(c, table, kvh, lo, hi + 1, kt.data());
  thread_local std::vector<const T*> vrows;
  vrows.resize(static_cast<size_t>(hi - lo + 1));
  value_rows<T>(c, table, kvh, lo, hi + 1, vrows.data());
  int64_t i = 0;
  for (; i + kQTile <= nq; i += kQTile) attend_tile<T, kQTile>(qs + i, kt.data(), ld, lo, vrows.data(), hd, s, opt);
  switch (nq - i) {
    case 5:
      attend_tile<T, 5>(qs + i, kt.data(), ld, lo, vrows.data(), hd, s, opt);
      break;
    case 4:
      attend_tile<T, 4>(qs + i, kt.data(), ld, lo, vrows.data(), hd, s, opt);
      break;
    case 3:
      attend_tile<T, 3>(qs + i, kt.data(), ld, lo, vrows.data(), hd, s, opt);
      break;
    case 2:
      attend_tile<T, 2>(qs + i, kt.data(), ld, lo, vrows.data(), hd, s, opt);
      break;
    case 1:
      attend_tile<T, 1>(qs + i, kt.data(), ld, lo, vrows.data(), hd, s, opt);
      break;
    default:
      break;
  }
}

template <typename T>
void attend_queries_part(const Cache& c, const int32_t* table, int64_t kvh, const Query* qs, int64_t nq, int32_t lo,
                         int32_t hi, const AttentionScores& opt, float* m, float* l) {
  thread_local std::vector<Running> st;
  st.assign(static_cast<size_t>(nq), Running{-INFINITY, 0.0f});
  attend_key_blocks<T>(c, table, kvh, qs, nq, lo, hi, st.data(), opt);
  for (int64_t i = 0; i < nq; ++i) {
    m[i] = st[static_cast<size_t>(i)].m;
    l[i] = st[static_cast<size_t>(i)].l;
  }
}

template void attend_queries<float>(const Cache&, const int32_t*, int64_t, const Query*, int64_t,
                                    const AttentionScores&);
template void attend_queries_part<float>(const Cache&, const int32_t*, int64_t, const Query*, int64_t, int32_t, int32_t,
                                         const AttentionScores&, float*, float*);
template void attend_queries_part<uint16_t>(const Cache&, const int32_t*, int64_t, const Query*, int64_t, int32_t,
                                            int32_t, const AttentionScores&, float*, float*);
template void attend_queries<uint16_t>(const Cache&, const int32_t*, int64_t, const Query*, int64_t,
                                       const AttentionScores&);
template void attend_queries_part<Bf16>(const Cache&, const int32_t*, int64_t, const Query*, int64_t, int32_t, int32_t,
                                        const AttentionScores&, float*, float*);
template void attend_queries<Bf16>(const Cache&, const int32_t*, int64_t, const Query*, int64_t,
                                   const AttentionScores&);
template void attend_queries<BlockQ8_0>(const Cache&, const int32_t*, int64_t, const Query*, int64_t,
                                        const AttentionScores&);
template void attend_queries<BlockQ4_0>(const Cache&, const int32_t*, int64_t, const Query*, int64_t,
                                        const AttentionScores&);

}  // namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail
#endif
