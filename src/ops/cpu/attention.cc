// Paged KV writes and attention with an f32 or f16 cache (bf16, q8_0 and q4_0 caches: attention_quant.cc). Work is
// split over (token or sequence, head) pairs; each pair computes its scores eight positions at a time (eight dot
// products reduced together), a max-subtracted softmax, and the weighted sum of value rows with 64 outputs held in
// registers across all positions. The reference's order of operations is kept except for summation order inside the dot
// products and the softmax normalisation (multiplied by 1/sum), within the conformance bound. In the avx512 and avx2
// builds, prefill (and decode with grouped-query heads) takes the tiled path of attention_tiled.cc instead, for
// head_dim a multiple of 64: the queries that share a kv head are multiplied against one widened, transposed key
// panel, several at a time.
//
// Long contexts (issue 31): past kKeyBlock positions both take the keys in blocks of kKeyBlock with an online
// softmax (running max and sum per query, partial outputs rescaled when the max rises, one division at the end),
// so the key panel and the score rows stay in L2 at any length. Decode items are then (sequence, kv head, range):
// the query heads of a kv head read each key block once, and with fewer than two items per thread a sequence's
// positions are split into ranges whose partial states are combined. Shorter contexts keep the kernels above.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "ops/cpu/attention_cache.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

// f32 and f16 caches take the kernels below; bf16 and the block-quantised types those of attention_quant.cc.
bool widened_here(DType t) { return t == DType::kF32 || t == DType::kF16; }

using attention_detail::Cache;
using attention_detail::kKeyBlock;
using attention_detail::Query;
#if defined(__AVX2__)
using attention_detail::attend_queries;
using attention_detail::attend_queries_part;
#endif

Status check_table(const Cache& c, const int32_t* table, int64_t table_len, int32_t pos) {
  const int64_t need = pos / c.block_tokens + 1;
  if (need > table_len) return out_of_range(fmt::format("attention: position {} is beyond the block table", pos));
  for (int64_t b = 0; b < need; ++b) {
    if (table[b] < 0 || table[b] >= c.num_blocks) {
      return out_of_range(fmt::format("attention: block {} is outside the cache [0, {})", table[b], c.num_blocks));
    }
  }
  return ok_status();
}

#if defined(__AVX2__)
// The 8 dot products rows[r] . q (length hd, a multiple of 8) as one vector: one accumulator per row, so the
// eight FMA chains overlap, then a transpose-and-add reduction instead of eight horizontal sums.
template <typename T>
inline __m256 dot8(const T* const* rows, const float* q, int64_t hd) {
  __m256 a[8];  // fully unrolled loops below keep these in registers
#pragma GCC unroll 8
  for (auto& v : a) v = _mm256_setzero_ps();
  for (int64_t j = 0; j < hd; j += 8) {
    const __m256 qv = _mm256_loadu_ps(q + j);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(load8(rows[r] + j), qv, a[r]);
  }
  return reduce8(a);
}

// Rows of one head are a cache row apart (all kv heads of a position are stored together) and blocks are
// scattered, which the hardware prefetcher follows poorly: decode at depth 512 spent most of its attention
// time waiting on the first load of each row. So rows are prefetched this many positions ahead.
constexpr int32_t kPrefetchRows = 16;
inline void prefetch_row(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T0);
}

// out[0..64) = sum_t p[t] * v_t[0..64): the 64 outputs stay in registers for the whole pass over positions.
template <typename T, typename RowAt>
inline void weighted_sum64(RowAt row_at, const float* p, int32_t n, int64_t col, float* out) {
  __m256 o[8];
#pragma GCC unroll 8
  for (auto& v : o) v = _mm256_setzero_ps();
  for (int32_t t = 0; t < n; ++t) {
    const __m256 pv = _mm256_set1_ps(p[t]);
    const T* v = row_at(t) + col;
    if (t + kPrefetchRows < n) prefetch_row(row_at(t + kPrefetchRows) + col, 64 * sizeof(T));
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) o[u] = _mm256_fmadd_ps(pv, load8(v + 8 * u), o[u]);
  }
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u) _mm256_storeu_ps(out + col + 8 * u, o[u]);
}
#endif

// The cache offsets of positions first .. first + count - 1 of kv head kvh: one division for the first, then
// walking the blocks (a division per key, as c.elem(table[t / block_tokens], ...) costs in a loop, was a
// third of decode attention's time at depth 512).
inline void row_offsets(const Cache& c, const int32_t* table, int32_t first, int32_t count, int64_t kvh,
                        std::vector<int64_t>& off) {
  off.resize(static_cast<size_t>(count));
  int64_t b = first / c.block_tokens, r = first % c.block_tokens;
  for (int32_t i = 0; i < count; ++i) {
    off[static_cast<size_t>(i)] = c.elem(table[b], r, kvh);
    if (++r == c.block_tokens) {
      r = 0;
      ++b;
    }
  }
}

template <typename T>
void attend_head(const Cache& c, const int32_t* table, int32_t pos, const float* q, int64_t kvh, float* out,
                 std::vector<float>& scores, const AttentionScores& opt, float sink) {
  const int64_t hd = c.head_dim;
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const T* vbase = reinterpret_cast<const T*>(c.v);
  // Positions first .. pos are visible (a sliding window starts later); scores[i] is position first + i.
  const int32_t first = opt.window > 0 ? std::max(0, pos - opt.window + 1) : 0;
  const int32_t count = pos - first + 1;
  auto k_at = [&](int32_t i) {
    const int32_t t = first + i;
    return kbase + c.elem(table[t / c.block_tokens], t % c.block_tokens, kvh);
  };
  auto v_at = [&](int32_t i) {
    const int32_t t = first + i;
    return vbase + c.elem(table[t / c.block_tokens], t % c.block_tokens, kvh);
  };
  const float denom = std::sqrt(static_cast<float>(hd));
  const bool scaled = opt.scale > 0.0f;
  scores.resize(static_cast<size_t>(count));
  float max_score = -INFINITY;
  int32_t t = 0;
#if defined(__AVX2__)
  if (hd % 8 == 0) {
    const __m256 dv = _mm256_set1_ps(denom), sv = _mm256_set1_ps(opt.scale);
    for (; t + 8 <= count; t += 8) {
      const T* rows[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) rows[r] = k_at(t + r);
      if (t + kPrefetchRows + 8 <= count) {
        for (int r = 0; r < 8; ++r) prefetch_row(k_at(t + kPrefetchRows + r), hd * sizeof(T));
      }
      const __m256 d = dot8(rows, q, hd);
      _mm256_storeu_ps(scores.data() + t, scaled ? _mm256_mul_ps(d, sv) : _mm256_div_ps(d, dv));
    }
  }
#endif
  for (; t < count; ++t) {
    const float d = dot(k_at(t), q, hd);
    scores[static_cast<size_t>(t)] = scaled ? d * opt.scale : d / denom;
  }
  if (opt.softcap > 0.0f) {
    for (float& s : scores) s = opt.softcap * std::tanh(s / opt.softcap);
  }
  for (float s : scores) max_score = s > max_score ? s : max_score;
  max_score = std::max(max_score, sink);  // a sink (gpt-oss) is one more logit; -inf without one changes nothing
  // std::exp, as ref does: the decode path of a one-query-per-head model stays exact to the reference's
  // exponentials (a vectorised exp here flipped a near-tie of stories260K at q8_0 in the PD test, and
  // saved under 1% of decode time).
  float sum = 0.0f;
  for (t = 0; t < count; ++t) {
    scores[static_cast<size_t>(t)] = std::exp(scores[static_cast<size_t>(t)] - max_score);
    sum += scores[static_cast<size_t>(t)];
  }
  sum += std::exp(sink - max_score);
  const float inv = 1.0f / sum;
  for (t = 0; t < count; ++t) scores[static_cast<size_t>(t)] *= inv;
  int64_t col = 0;
#if defined(__AVX2__)
  for (; col + 64 <= hd; col += 64) weighted_sum64<T>(v_at, scores.data(), count, col, out);
#endif
  if (col < hd) {
    std::memset(out + col, 0, static_cast<size_t>(hd - col) * sizeof(float));
    for (t = 0; t < count; ++t) axpy(scores[static_cast<size_t>(t)], v_at(t) + col, out + col, hd - col);
  }
}

#if defined(__AVX2__)
inline float hmax8(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

// One query's decode attention, head_dim = 8 * NV (64 or 128), in 256-bit vectors in every build (a 512-bit
// form of it, sixteen keys per reduction, measured 7% slower on Zen 4 at depth 1024). Scores: eight keys at a
// time, each a chain of NV FMAs against the query held in registers, the eight reduced together (reduce8).
// Softmax: max-subtracted, exp8 eight at a time (a scalar std::exp was a fifth of the time; heads of other
// sizes, such as stories260K's 8, keep attend_head and its std::exp). Values: two positions per step into two
// sets of NV accumulators. Cache offsets come from row_offsets (no division per key); rows are prefetched
// kPrefetchKeys positions ahead (blocks are scattered, so a stream stops at each block's end). Going through
// the heads of a position together instead (one contiguous cache row) measured slower.
constexpr int32_t kPrefetchKeys = 64;

// sc[t] = q . k_t / sqrt(head_dim) (or times opt.scale) for the n keys at offsets o[0, n), the query in qv;
// with `prefetch`, keys kPrefetchKeys ahead are prefetched while o holds them (up to `limit`).
template <typename T, int NV>
inline void key_scores(const T* kbase, const int64_t* o, int32_t n, int32_t limit, const __m256* qv,
                       const AttentionScores& opt, bool prefetch, float* sc) {
  constexpr int64_t hd = 8 * NV;
  const bool scaled = opt.scale > 0.0f;
  const __m256 dv = _mm256_set1_ps(std::sqrt(static_cast<float>(hd))), sv = _mm256_set1_ps(opt.scale);
  for (int32_t t = 0; t < n; t += 8) {
    const int m = std::min<int32_t>(8, n - t);
    if (prefetch && t + 8 + kPrefetchKeys <= limit) {
      for (int r = 0; r < 8; ++r) prefetch_row(kbase + o[t + kPrefetchKeys + r], hd * sizeof(T));
    }
    __m256 a[8];
#pragma GCC unroll 16
    for (int r = 0; r < 8; ++r) {
      if (r < m) {
        const T* k = kbase + o[t + r];
        __m256 acc = _mm256_mul_ps(load8(k), qv[0]);
#pragma GCC unroll 16
        for (int j = 1; j < NV; ++j) acc = _mm256_fmadd_ps(load8(k + 8 * j), qv[j], acc);
        a[r] = acc;
      } else {
        a[r] = _mm256_setzero_ps();
      }
    }
    const __m256 d = reduce8(a);
    _mm256_storeu_ps(sc + t, scaled ? _mm256_mul_ps(d, sv) : _mm256_div_ps(d, dv));
  }
}

// out = o0 + sum_t p[t] v_t over the n values at offsets o[0, n): two positions per step into two sets of
// accumulators (o0 and a zeroed o1), prefetching as key_scores does.
template <typename T, int NV>
inline void value_sum(const T* vbase, const int64_t* o, int32_t n, int32_t limit, const float* p, __m256* o0,
                      bool prefetch, float* out) {
  constexpr int64_t hd = 8 * NV;
  __m256 o1[NV];
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) o1[j] = _mm256_setzero_ps();
  int32_t t = 0;
  for (; t + 2 <= n; t += 2) {
    if (prefetch && t + 2 + kPrefetchKeys <= limit) {
      prefetch_row(vbase + o[t + kPrefetchKeys], hd * sizeof(T));
      prefetch_row(vbase + o[t + kPrefetchKeys + 1], hd * sizeof(T));
    }
    const T* v0 = vbase + o[t];
    const T* v1 = vbase + o[t + 1];
    const __m256 p0 = _mm256_set1_ps(p[t]), p1 = _mm256_set1_ps(p[t + 1]);
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      o0[j] = _mm256_fmadd_ps(p0, load8(v0 + 8 * j), o0[j]);
      o1[j] = _mm256_fmadd_ps(p1, load8(v1 + 8 * j), o1[j]);
    }
  }
  if (t < n) {
    const T* v0 = vbase + o[t];
    const __m256 p0 = _mm256_set1_ps(p[t]);
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) o0[j] = _mm256_fmadd_ps(p0, load8(v0 + 8 * j), o0[j]);
  }
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) _mm256_storeu_ps(out + 8 * j, _mm256_add_ps(o0[j], o1[j]));
}

// The softmax state of one query head over some of its positions: acc = sum e^(logit - m) v (unnormalised), l = the
// sum of those weights, m = their max (-inf when none).
struct Partial {
  float* acc;  // head_dim floats
  float m, l;

  void reset(int64_t hd) {
    m = -INFINITY;
    l = 0.0f;
    std::memset(acc, 0, static_cast<size_t>(hd) * sizeof(float));
  }
  // One key block's step of the online softmax over its scores s[0, n) (s padded with -inf to `padded`, a multiple
  // of 8): soft-capped where the model caps, replaced by e^(s - m) with m the new running max, their sum added to
  // l. Returns the factor the running output acc is to be scaled by first (0 for the first block).
  float softmax_step(float* s, int32_t n, int32_t padded, const AttentionScores& opt) {
    if (opt.softcap > 0.0f) {
      for (int32_t t = 0; t < n; ++t) s[t] = opt.softcap * std::tanh(s[t] / opt.softcap);
    }
    for (int32_t t = n; t < padded; ++t) s[t] = -INFINITY;
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (int32_t t = 0; t < padded; t += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
    const float m_new = std::max(hmax8(mx), m);
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int32_t t = 0; t < padded; t += 8) {
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), mv));
      _mm256_storeu_ps(s + t, e);
      sum = _mm256_add_ps(sum, e);
    }
    const float alpha = std::exp(m - m_new);
    l = l * alpha + hsum(sum);
    m = m_new;
    return alpha;
  }
};

template <typename T, int NV>
void attend_one(const Cache& c, const int32_t* table, int32_t pos, const float* q, int64_t kvh, float* out,
                std::vector<float>& scores, const AttentionScores& opt, float sink) {
  thread_local std::vector<int64_t> off;
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const T* vbase = reinterpret_cast<const T*>(c.v);
  const int32_t first = opt.window > 0 ? std::max(0, pos - opt.window + 1) : 0;
  const int32_t count = pos - first + 1, padded = (count + 8 - 1) / 8 * 8;
  row_offsets(c, table, first, count, kvh, off);
  const int64_t* o = off.data();
  __m256 qv[NV];
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) qv[j] = _mm256_loadu_ps(q + 8 * j);
  scores.resize(static_cast<size_t>(padded));
  float* sc = scores.data();
  key_scores<T, NV>(kbase, o, count, count, qv, opt, true, sc);
  // One step over every position from a state holding only the sink (a logit without a value; -inf: none): the
  // weights e^(s - m) with m the max of the scores and the sink, the sink's own weight returned.
  Partial head{nullptr, sink, 0.0f};
  const float sink_weight = head.softmax_step(sc, count, padded, opt);
  const __m256 inv = _mm256_set1_ps(1.0f / (head.l + sink_weight));
  for (int32_t t = 0; t < padded; t += 8) _mm256_storeu_ps(sc + t, _mm256_mul_ps(_mm256_loadu_ps(sc + t), inv));
  __m256 o0[NV];
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) o0[j] = _mm256_setzero_ps();
  value_sum<T, NV>(vbase, o, count, count, sc, o0, true, out);
}

#endif

#if defined(__AVX2__)
// Decode over long contexts, head_dim = 8 * NV: the query heads of one kv head (qs[0..G) of a grouped-query
// model, one head otherwise) over the positions [r0, r1) of one sequence, in blocks of kKeyBlock positions
// with an online softmax. Each block's key and value rows (64 KiB of f16 at head_dim 64) come from memory once,
// for the first head, and from L2 for the others, where attend_one read a long context once per query head.
// The result is each head's Partial over the range (m = -inf, l = 0 for an empty range); decode_combine() merges
// the ranges of one sequence that were split over threads.
template <typename T, int NV>
void attend_range(const Cache& c, const int32_t* table, int32_t r0, int32_t r1, const float* const* qs, int G,
                  int64_t kvh, Partial* parts, const AttentionScores& opt) {
  thread_local std::vector<int64_t> off;
  constexpr int64_t hd = 8 * NV;
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const T* vbase = reinterpret_cast<const T*>(c.v);
  alignas(32) float sc[kKeyBlock];
  for (int g = 0; g < G; ++g) parts[g].reset(hd);
  for (int32_t b0 = r0; b0 < r1; b0 += kKeyBlock) {
    const int32_t n = std::min(r1 - b0, kKeyBlock), padded = (n + 7) / 8 * 8;
    // Offsets of this block and, for prefetching, of the next one's first kPrefetchKeys rows.
    const int32_t ahead = std::min(r1 - b0, n + kPrefetchKeys);
    row_offsets(c, table, b0, ahead, kvh, off);
    const int64_t* o = off.data();
    for (int g = 0; g < G; ++g) {
      const float* q = qs[g];
      __m256 qv[NV];
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) qv[j] = _mm256_loadu_ps(q + 8 * j);
      key_scores<T, NV>(kbase, o, n, ahead, qv, opt, g == 0, sc);
      const float alpha = parts[g].softmax_step(sc, n, padded, opt);
      float* acc = parts[g].acc;
      __m256 o0[NV];
      const __m256 av = _mm256_set1_ps(alpha);
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) o0[j] = _mm256_mul_ps(av, _mm256_loadu_ps(acc + 8 * j));
      value_sum<T, NV>(vbase, o, n, ahead, sc, o0, g == 0, acc);
    }
  }
}

#if defined(__AVX512F__)
// The avx512 build's grouped-query form of attend_range, head_dim = 16 * NZ (64 or 128): the query heads of a kv
// head take each key and value row together, up to kSharedHeads at a time, so a row is loaded and widened from f16
// once per such chunk of heads instead of once per head, and multiplied in 512-bit vectors where attend_range uses
// 256-bit ones. On Zen 5, 2 threads, llama3.1-8b's attention (32 heads on 8 kv heads of 128, f16 cache) went from
// 1.25 to 0.92 ms an operator at context 4096 (`tessera bench attention`) and a step of a 4-layer cut from 24.7 to
// 17.8 ms at 16384 (docs/benchmarks.md, "Decode attention: a row widened once for its query heads"). The same sharing
// in 256-bit vectors (the avx2 build) measured no faster there (22.7 against 22.8 ms at 16384), so the sharing alone is
// not the gain, the 512-bit arithmetic with it is (a 512-bit form of attend_range, one head at a time, was not measured
// on that core); the avx2 build keeps attend_range. The cache is still read at about 18 GB/s, well under what the
// weights stream at: a kv head's rows are 256 bytes of every 2 KiB cache row. (Taking a range of positions for every kv
// head at once, front to back along the rows, measured no faster in a micro-benchmark of the operator: its scratch for
// 32 heads, partial sums, queries and outputs, is about 64 KiB, more than L1.)
constexpr int kSharedHeads = 4;

inline __m512 widen16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 widen16(const uint16_t* p) {  // masked form: GCC 12 warns on the unmasked one
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The 16 sums of a[0..16) as one vector (lane r: the sum of a[r]'s lanes): pairwise adds of interleaved halves,
// 15 adds and 30 shuffles instead of 16 horizontal sums.
inline __m512 reduce16(const __m512* a) {
  // Masked forms throughout: GCC 12 warns on the unmasked unpack and shuffle intrinsics (see widen16).
  constexpr __mmask16 kAll = 0xffff;
  constexpr __mmask8 kAllD = 0xff;
  __m512 s[8], u[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: a[2i] at 0 and 2, a[2i + 1] at 1 and 3
    s[i] = _mm512_add_ps(_mm512_maskz_unpacklo_ps(kAll, a[2 * i], a[2 * i + 1]),
                         _mm512_maskz_unpackhi_ps(kAll, a[2 * i], a[2 * i + 1]));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: the lane's sums of a[4i .. 4i + 3]
    const __m512d x = _mm512_castps_pd(s[2 * i]), y = _mm512_castps_pd(s[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAllD, x, y)),
                         _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(kAllD, x, y)));
  }
  // Across the four 128-bit lanes: w0 = (u0 lanes 0+1, 2+3, u1 lanes 0+1, 2+3), w1 the same of u2, u3.
  auto fold = [&](__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll, x, y, 0x88), _mm512_maskz_shuffle_f32x4(kAll, x, y, 0xdd));
  };
  return fold(fold(u[0], u[1]), fold(u[2], u[3]));
}

// The scores of gc (<= kSharedHeads) query heads qs[0..gc) against the n keys at offsets o[0, n), into
// sc[g * kKeyBlock + t]: sixteen keys at a time, each key row widened once into registers and multiplied against
// every head's query (read from L1), each (head, key) product vector reduced with its fifteen neighbours.
template <typename T, int NZ>
inline void shared_key_scores(const T* kbase, const int64_t* o, int32_t n, int32_t limit, const float* const* qs,
                              int gc, const AttentionScores& opt, bool prefetch, float* sc) {
  // As key_scores: times opt.scale where the model gives one, else divided by sqrt(head_dim).
  const bool scaled = opt.scale > 0.0f;
  const __m512 sv = _mm512_set1_ps(scaled ? opt.scale : std::sqrt(static_cast<float>(16 * NZ)));
  for (int32_t t = 0; t < n; t += 16) {
    const int m = std::min<int32_t>(16, n - t);
    if (prefetch && t + 16 + kPrefetchKeys <= limit) {
      for (int r = 0; r < 16; ++r) prefetch_row(kbase + o[t + kPrefetchKeys + r], 16 * NZ * sizeof(T));
    }
    __m512 part[kSharedHeads][16];
    for (int r = 0; r < 16; ++r) {
      if (r >= m) {
#pragma GCC unroll 4
        for (int g = 0; g < kSharedHeads; ++g) part[g][r] = _mm512_setzero_ps();
        continue;
      }
      const T* k = kbase + o[t + r];
      __m512 kz[NZ];
#pragma GCC unroll 8
      for (int j = 0; j < NZ; ++j) kz[j] = widen16(k + 16 * j);
#pragma GCC unroll 4
      for (int g = 0; g < kSharedHeads; ++g) {
        if (g >= gc) break;
        __m512 acc = _mm512_mul_ps(kz[0], _mm512_loadu_ps(qs[g]));
#pragma GCC unroll 8
        for (int j = 1; j < NZ; ++j) acc = _mm512_fmadd_ps(kz[j], _mm512_loadu_ps(qs[g] + 16 * j), acc);
        part[g][r] = acc;
      }
    }
    for (int g = 0; g < gc; ++g) {
      const __m512 d = reduce16(part[g]);
      _mm512_storeu_ps(sc + g * kKeyBlock + t, scaled ? _mm512_mul_ps(d, sv) : _mm512_maskz_div_ps(0xffff, d, sv));
    }
  }
}

// acc[g] (head_dim floats each, g < gc) += sum_t p[g * kKeyBlock + t] v_t over the n values at offsets o[0, n):
// 64 columns at a time, each value row's slice widened once for every head, the gc x 4 accumulators in registers.
template <typename T, int NZ>
inline void shared_value_sums(const T* vbase, const int64_t* o, int32_t n, int32_t limit, const float* p, int gc,
                              bool prefetch, float* const* acc) {
  for (int c0 = 0; c0 < NZ; c0 += 4) {
    __m512 a[kSharedHeads][4];
#pragma GCC unroll 4
    for (int g = 0; g < kSharedHeads; ++g) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) a[g][j] = g < gc ? _mm512_loadu_ps(acc[g] + 16 * (c0 + j)) : _mm512_setzero_ps();
    }
    for (int32_t t = 0; t < n; ++t) {
      if (prefetch && c0 == 0 && t + kPrefetchKeys < limit) {
        prefetch_row(vbase + o[t + kPrefetchKeys], 16 * NZ * sizeof(T));
      }
      const T* v = vbase + o[t] + 16 * c0;
      __m512 vz[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) vz[j] = widen16(v + 16 * j);
#pragma GCC unroll 4
      for (int g = 0; g < kSharedHeads; ++g) {
        if (g >= gc) break;
        const __m512 pv = _mm512_set1_ps(p[g * kKeyBlock + t]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) a[g][j] = _mm512_fmadd_ps(pv, vz[j], a[g][j]);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < kSharedHeads; ++g) {
      if (g >= gc) break;
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) _mm512_storeu_ps(acc[g] + 16 * (c0 + j), a[g][j]);
    }
  }
}

// attend_range's contract (the partial softmax state of positions [r0, r1) for the G query heads qs of kv head
// kvh), the heads taken kSharedHeads at a time through the two kernels above.
template <typename T, int NZ>
void attend_range_shared(const Cache& c, const int32_t* table, int32_t r0, int32_t r1, const float* const* qs, int G,
                         int64_t kvh, Partial* parts, const AttentionScores& opt) {
  thread_local std::vector<int64_t> off;
  constexpr int64_t hd = 16 * NZ;
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const T* vbase = reinterpret_cast<const T*>(c.v);
  alignas(64) float sc[kSharedHeads * kKeyBlock];
  for (int g = 0; g < G; ++g) parts[g].reset(hd);
  for (int32_t b0 = r0; b0 < r1; b0 += kKeyBlock) {
    const int32_t n = std::min(r1 - b0, kKeyBlock), padded = (n + 15) / 16 * 16;
    const int32_t ahead = std::min(r1 - b0, n + kPrefetchKeys);
    row_offsets(c, table, b0, ahead, kvh, off);
    const int64_t* o = off.data();
    for (int g0 = 0; g0 < G; g0 += kSharedHeads) {
      const int gc = std::min(kSharedHeads, G - g0);
      shared_key_scores<T, NZ>(kbase, o, n, ahead, qs + g0, gc, opt, g0 == 0, sc);
      float* acc[kSharedHeads];
      for (int g = 0; g < gc; ++g) {
        Partial& part = parts[g0 + g];
        const float alpha = part.softmax_step(sc + g * kKeyBlock, n, padded, opt);
        acc[g] = part.acc;
        const __m512 av = _mm512_set1_ps(alpha);
        for (int64_t j = 0; j < hd; j += 16)
          _mm512_storeu_ps(acc[g] + j, _mm512_mul_ps(av, _mm512_loadu_ps(acc[g] + j)));
      }
      shared_value_sums<T, NZ>(vbase, o, n, ahead, sc, gc, g0 == 0, acc);
    }
  }
}
#endif

// out = the softmax-weighted sum over the partial states parts[0..n) of one query head (ranges of its context)
// and its sink logit.
template <int NV>
void decode_combine(const Partial* parts, int n, float sink, float* out) {
  float m = sink;
  for (int j = 0; j < n; ++j) m = std::max(m, parts[j].m);
  float l = std::exp(sink - m);
  __m256 o[NV];
#pragma GCC unroll 16
  for (auto& v : o) v = _mm256_setzero_ps();
  for (int j = 0; j < n; ++j) {
    if (parts[j].l == 0.0f) continue;  // an empty range
    const float w = std::exp(parts[j].m - m);
    l += parts[j].l * w;
    const __m256 wv = _mm256_set1_ps(w);
#pragma GCC unroll 16
    for (int k = 0; k < NV; ++k) o[k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(parts[j].acc + 8 * k), o[k]);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / l);
#pragma GCC unroll 16
  for (int k = 0; k < NV; ++k) _mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(o[k], inv));
}
#endif

#if defined(__AVX2__)
// Positions a query at `pos` sees.
inline int32_t visible(int32_t pos, const AttentionScores& opt) {
  return opt.window > 0 ? std::min(pos + 1, opt.window) : pos + 1;
}

// Decode for head_dim = 8 * NV in items of (sequence, kv head, range): a range is one of `splits` parts of the
// sequence's visible positions, its query heads go through attend_range together. A sequence that is one item
// and at most one key block long takes attend_one per head, the short-context kernel, unchanged.
// Whether grouped-query decode of `count` positions goes through attend_range_shared below a key block too (the
// avx512 build): from 64 positions, where it overtakes attend_one per head (`tessera bench attention --threads 2`,
// 32 heads on 8 kv heads of 128, Zen 5: 0.057 against 0.083 ms at 256 positions, 0.023-0.024 against 0.025-0.030 at
// 64, but 0.019 against 0.017-0.018 at 48 and 0.011-0.013 against 0.009-0.010 at 16).
constexpr bool shared_heads_here(int64_t group, int32_t count) {
#if defined(__AVX512F__)
  return group > 1 && count >= 64;
#else
  return group < 0 && count < 0;
#endif
}

template <typename T, int NV>
void decode_blocked(const AttentionDecodeOp& op, const Cache& c, int64_t splits, const Ctx& ctx) {
  constexpr int64_t hd = 8 * NV;
  const int64_t b = op.q.dim(0), heads = op.q.dim(1), group = heads / c.kv_heads;
  const int64_t max_blocks = op.block_tables.dim(1);
  const auto* lens = data<const int32_t>(op.context_lens);
  const auto* tables = data<const int32_t>(op.block_tables);
  const float* q = data<const float>(op.q);
  float* out = data<float>(op.out);
  const float* sinks = op.sinks.valid() ? data<const float>(op.sinks) : nullptr;
  const AttentionScores opt = op.scores;
  // The calling thread's scratch, reached by the workers through `parts` (a thread_local named inside the
  // lambdas would be each worker's own).
  thread_local std::vector<float> acc_store;
  thread_local std::vector<Partial> part_store;  // [sequence][head][range]
  acc_store.resize(static_cast<size_t>(b * heads * splits * hd));
  part_store.resize(static_cast<size_t>(b * heads * splits));
  for (size_t i = 0; i < part_store.size(); ++i) part_store[i].acc = acc_store.data() + i * hd;
  Partial* parts = part_store.data();
  parallel_for(ctx, b * c.kv_heads * splits, [&](int64_t wi) {
    thread_local std::vector<float> scores;
    const int64_t j = wi % splits, sk = wi / splits, sq = sk / c.kv_heads, kvh = sk % c.kv_heads;
    const int32_t pos = lens[sq] - 1, count = visible(pos, opt), first = pos + 1 - count;
    const int32_t* table = tables + sq * max_blocks;
    if (splits == 1 && count <= kKeyBlock && !shared_heads_here(group, count)) {
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        attend_one<T, NV>(c, table, pos, q + (sq * heads + h) * hd, kvh, out + (sq * heads + h) * hd, scores, opt,
                          sinks ? sinks[h] : -INFINITY);
      }
      return;
    }
    const float* qs[64];
    Partial local[64];
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kvh * group + g;
      qs[g] = q + (sq * heads + h) * hd;
      local[g] = parts[(sq * heads + h) * splits + j];
    }
    const int32_t r0 = first + static_cast<int32_t>(count * j / splits);
    const int32_t r1 = first + static_cast<int32_t>(count * (j + 1) / splits);
#if defined(__AVX512F__)
    if (group > 1) {
      attend_range_shared<T, NV / 2>(c, table, r0, r1, qs, static_cast<int>(group), kvh, local, opt);
    } else {
      attend_range<T, NV>(c, table, r0, r1, qs, 1, kvh, local, opt);
    }
#else
    attend_range<T, NV>(c, table, r0, r1, qs, static_cast<int>(group), kvh, local, opt);
#endif
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kvh * group + g;
      if (splits == 1) {
        decode_combine<NV>(&local[g], 1, sinks ? sinks[h] : -INFINITY, out + (sq * heads + h) * hd);
      } else {
        parts[(sq * heads + h) * splits + j] = local[g];
      }
    }
  });
  if (splits == 1) return;
  parallel_for(ctx, b * heads, [&](int64_t i) {
    const int32_t count = visible(lens[i / heads] - 1, opt);
    if (count <= 0) return;
    decode_combine<NV>(&parts[i * splits], static_cast<int>(splits), sinks ? sinks[i % heads] : -INFINITY,
                       out + i * hd);
  });
}
#endif

#if defined(__AVX2__)
// Grouped-query decode (head_dim a multiple of 64, not 64 or 128) in items of (sequence, kv head, range): the
// range is one of `splits` parts of the sequence's visible positions, which its query heads take together
// through attend_queries_part; then each head's parts and sink are combined as decode_combine does.
template <typename T>
void decode_grouped_split(const AttentionDecodeOp& op, const Cache& c, int64_t splits, const Ctx& ctx) {
  const int64_t b = op.q.dim(0), heads = op.q.dim(1), group = heads / c.kv_heads, hd = c.head_dim;
  const int64_t max_blocks = op.block_tables.dim(1);
  const auto* lens = data<const int32_t>(op.context_lens);
  const auto* tables = data<const int32_t>(op.block_tables);
  const float* q = data<const float>(op.q);
  float* out = data<float>(op.out);
  const float* sinks = op.sinks.valid() ? data<const float>(op.sinks) : nullptr;
  const AttentionScores opt = op.scores;
  // The calling thread's scratch, reached by the workers through these pointers: [sequence][head][range].
  thread_local std::vector<float> acc_store, m_store, l_store;
  acc_store.resize(static_cast<size_t>(b * heads * splits * hd));
  m_store.resize(static_cast<size_t>(b * heads * splits));
  l_store.resize(static_cast<size_t>(b * heads * splits));
  float *acc = acc_store.data(), *ms = m_store.data(), *ls = l_store.data();
  parallel_for(ctx, b * c.kv_heads * splits, [&](int64_t wi) {
    const int64_t j = wi % splits, sk = wi / splits, sq = sk / c.kv_heads, kvh = sk % c.kv_heads;
    const int32_t pos = lens[sq] - 1, count = visible(pos, opt), first = pos + 1 - count;
    const int32_t r0 = first + static_cast<int32_t>(count * j / splits);
    const int32_t r1 = first + static_cast<int32_t>(count * (j + 1) / splits);
    Query qs[64];
    float m[64], l[64];
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kvh * group + g;
      qs[g] = {q + (sq * heads + h) * hd, acc + ((sq * heads + h) * splits + j) * hd, first, pos};
    }
    if (r0 < r1) {
      attend_queries_part<T>(c, tables + sq * max_blocks, kvh, qs, group, r0, r1 - 1, opt, m, l);
    } else {
      std::fill(m, m + group, -INFINITY);
      std::fill(l, l + group, 0.0f);
    }
    for (int64_t g = 0; g < group; ++g) {
      const int64_t i = (sq * heads + kvh * group + g) * splits + j;
      ms[i] = m[g];
      ls[i] = l[g];
    }
  });
  parallel_for(ctx, b * heads, [&](int64_t i) {
    const float sink = sinks ? sinks[i % heads] : -INFINITY;
    float mx = sink;
    for (int64_t j = 0; j < splits; ++j) mx = std::max(mx, ms[i * splits + j]);
    float total = std::exp(sink - mx);
    float w[64];
    for (int64_t j = 0; j < splits; ++j) {
      const int64_t p = i * splits + j;
      w[j] = ls[p] == 0.0f ? 0.0f : std::exp(ms[p] - mx);  // an empty range weighs nothing
      total += ls[p] * w[j];
    }
    const __m256 inv = _mm256_set1_ps(1.0f / total);
    for (int64_t d = 0; d < hd; d += 8) {
      __m256 o = _mm256_setzero_ps();
      for (int64_t j = 0; j < splits; ++j)
        o = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(acc + (i * splits + j) * hd + d), o);
      _mm256_storeu_ps(out + i * hd + d, _mm256_mul_ps(o, inv));
    }
  });
}
#endif

// Runs attention for `count` queries; query i is at position pos(i), reads table(i), writes out row i.
template <typename Pos, typename Table>
void attend_all(const Cache& c, int64_t count, int64_t n_heads, const float* q, float* out, Pos pos, Table table,
                const AttentionScores& opt, const float* sinks, const Ctx& ctx) {
  const int64_t group = n_heads / c.kv_heads, hd = c.head_dim, work = count * n_heads;
  // Items are claimed in chunks by whichever thread is free (worker_pool.h), so uneven contexts balance.
  parallel_for(ctx, work, [&](int64_t wi) {
    thread_local std::vector<float> scores;
    const int64_t i = wi / n_heads, h = wi % n_heads;
    const float* qh = q + (i * n_heads + h) * hd;
    float* oh = out + (i * n_heads + h) * hd;
    const float sink = sinks ? sinks[h] : -INFINITY;
#if defined(__AVX2__)
    if (hd == 64 || hd == 128) {
      if (c.f16) {
        (hd == 64 ? attend_one<uint16_t, 8> : attend_one<uint16_t, 16>)(c, table(i), pos(i), qh, h / group, oh, scores,
                                                                        opt, sink);
      } else {
        (hd == 64 ? attend_one<float, 8> : attend_one<float, 16>)(c, table(i), pos(i), qh, h / group, oh, scores, opt,
                                                                  sink);
      }
      return;
    }
#endif
    if (c.f16) {
      attend_head<uint16_t>(c, table(i), pos(i), qh, h / group, oh, scores, opt, sink);
    } else {
      attend_head<float>(c, table(i), pos(i), qh, h / group, oh, scores, opt, sink);
    }
  });
}

}  // namespace

Status kv_write(const KvWriteOp& op, const Ctx& ctx) {
  const int64_t capacity = op.k_cache.dim(0) * op.k_cache.dim(1), row = op.k.row_elems(), n = op.k.dim(0);
  const auto* slots = data<const int32_t>(op.slots);
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] < 0 || slots[t] >= capacity) {
      return out_of_range(fmt::format("kv_write: slot {} is outside the cache [0, {})", slots[t], capacity));
    }
  }
  if (!widened_here(op.k_cache.dtype)) {
    // bf16, q8_0, q4_0: base/quant.h's conversion of each position's row, byte for byte the reference's.
    const size_t row_bytes = dtype_bytes(op.k_cache.dtype, static_cast<size_t>(row));
    for (int64_t t = 0; t < n; ++t) {
      const size_t at = static_cast<size_t>(slots[t]) * row_bytes;
      TS_RETURN_IF_ERROR(quantize({data<const float>(op.k) + t * row, static_cast<size_t>(row)}, op.k_cache.dtype,
                                  data<uint8_t>(op.k_cache) + at));
      TS_RETURN_IF_ERROR(quantize({data<const float>(op.v) + t * row, static_cast<size_t>(row)}, op.v_cache.dtype,
                                  data<uint8_t>(op.v_cache) + at));
    }
    return ok_status();
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* k = data<const float>(op.k) + t * row;
    const float* v = data<const float>(op.v) + t * row;
    if (op.k_cache.dtype == DType::kF32) {
      std::memcpy(data<float>(op.k_cache) + slots[t] * row, k, static_cast<size_t>(row) * 4);
      std::memcpy(data<float>(op.v_cache) + slots[t] * row, v, static_cast<size_t>(row) * 4);
      continue;
    }
    uint16_t* kd = data<uint16_t>(op.k_cache) + slots[t] * row;
    uint16_t* vd = data<uint16_t>(op.v_cache) + slots[t] * row;
    int64_t i = 0;
#if defined(__AVX2__)
    for (; i + 8 <= row; i += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(kd + i), _mm256_cvtps_ph(_mm256_loadu_ps(k + i), 0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(vd + i), _mm256_cvtps_ph(_mm256_loadu_ps(v + i), 0));
    }
#endif
    for (; i < row; ++i) {
      kd[i] = f32_to_f16(k[i]);
      vd[i] = f32_to_f16(v[i]);
    }
  }
  return ok_status();
}

Status attention_prefill(const AttentionPrefillOp& op, const Ctx& ctx) {
  if (!widened_here(op.k_cache.dtype) || !widened_here(op.v_cache.dtype)) return attention_prefill_quant(op, ctx);
  Cache c(op.k_cache, op.v_cache);
  const int32_t* table = data<const int32_t>(op.block_table);
  const int32_t last = static_cast<int32_t>(op.start_pos + op.q.dim(0) - 1);
  TS_RETURN_IF_ERROR(check_table(c, table, op.block_table.dim(0), last));
  const int32_t start = op.start_pos;
#if defined(__AVX2__)
  if (c.head_dim % 64 == 0) {
    // Items of up to kQChunk consecutive tokens of one head: each widens the keys its tokens see once.
    constexpr int64_t kQChunk = 96;
    const int64_t n = op.q.dim(0), heads = op.q.dim(1), hd = c.head_dim, group = heads / c.kv_heads;
    const int64_t chunks = (n + kQChunk - 1) / kQChunk;
    const float* q = data<const float>(op.q);
    float* out = data<float>(op.out);
    const AttentionScores opt = op.scores;
    const float* sinks = op.sinks.valid() ? data<const float>(op.sinks) : nullptr;
    if (start + n > kKeyBlock) {
      // Long contexts: an item is kQChunk tokens times the query heads of one kv head, so each widened key
      // block serves group times as many queries (widening was a fifth of prefill at 8192 tokens).
      parallel_for(ctx, chunks * c.kv_heads, [&](int64_t wi) {
        thread_local std::vector<Query> qs;
        const int64_t kvh = wi % c.kv_heads, i0 = wi / c.kv_heads * kQChunk, i1 = std::min(n, i0 + kQChunk);
        qs.clear();
        for (int64_t i = i0; i < i1; ++i) {
          const int32_t pos = static_cast<int32_t>(start + i);
          for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
            qs.push_back({q + (i * heads + h) * hd, out + (i * heads + h) * hd,
                          opt.window > 0 ? std::max(0, pos - opt.window + 1) : 0, pos, sinks ? sinks[h] : -INFINITY});
          }
        }
        const auto nq = static_cast<int64_t>(qs.size());
        if (c.f16) {
          attend_queries<uint16_t>(c, table, kvh, qs.data(), nq, opt);
        } else {
          attend_queries<float>(c, table, kvh, qs.data(), nq, opt);
        }
      });
      return ok_status();
    }
    parallel_for(ctx, chunks * heads, [&](int64_t wi) {
      const int64_t h = wi % heads, i0 = wi / heads * kQChunk, i1 = std::min(n, i0 + kQChunk);
      Query qs[kQChunk];
      for (int64_t i = i0; i < i1; ++i) {
        const int32_t pos = static_cast<int32_t>(start + i);
        qs[i - i0] = {q + (i * heads + h) * hd, out + (i * heads + h) * hd,
                      opt.window > 0 ? std::max(0, pos - opt.window + 1) : 0, pos, sinks ? sinks[h] : -INFINITY};
      }
      if (c.f16) {
        attend_queries<uint16_t>(c, table, h / group, qs, i1 - i0, opt);
      } else {
        attend_queries<float>(c, table, h / group, qs, i1 - i0, opt);
      }
    });
    return ok_status();
  }
#endif
  attend_all(
      c, op.q.dim(0), op.q.dim(1), data<const float>(op.q), data<float>(op.out),
      [start](int64_t i) { return static_cast<int32_t>(start + i); }, [table](int64_t) { return table; }, op.scores,
      op.sinks.valid() ? data<const float>(op.sinks) : nullptr, ctx);
  return ok_status();
}

Status attention_decode(const AttentionDecodeOp& op, const Ctx& ctx) {
  if (!widened_here(op.k_cache.dtype) || !widened_here(op.v_cache.dtype)) return attention_decode_quant(op, ctx);
  Cache c(op.k_cache, op.v_cache);
  const int64_t b = op.q.dim(0), max_blocks = op.block_tables.dim(1);
  const auto* lens = data<const int32_t>(op.context_lens);
  const auto* tables = data<const int32_t>(op.block_tables);
  for (int64_t s = 0; s < b; ++s) {
    if (lens[s] < 1) return out_of_range(fmt::format("attention_decode: context length {} of sequence {}", lens[s], s));
    TS_RETURN_IF_ERROR(check_table(c, tables + s * max_blocks, max_blocks, lens[s] - 1));
  }
#if defined(__AVX2__)
  const int64_t heads = op.q.dim(1), group = heads / c.kv_heads, hd = c.head_dim;
  // The one-query kernel (attend_one, through attend_all below) takes heads of 64 and 128 even when grouped:
  // the tiled path widens its keys into a transposed panel element by element, which cost more than reading
  // each kv head once per query (from cache after the group's first): qwen2.5-0.5b Q4_K_M at depth 512, a
  // decode step 17.3 ms against 19.1-20.5 (`tessera bench step --context 512`, avx512).
  const bool one_query_kernel = hd == 64 || hd == 128;
  if (one_query_kernel && group <= 64) {
    int32_t longest = 0;
    for (int64_t s = 0; s < b; ++s) longest = std::max(longest, visible(lens[s] - 1, op.scores));
    // Fewer (sequence, kv head) items than two per thread: each sequence's positions are split into ranges
    // of at least one key block, one item each, and the ranges' partial softmax states combined after.
    const int64_t items = b * c.kv_heads, want = 2 * static_cast<int64_t>(ctx.threads);
    const int64_t splits =
        items >= want ? 1 : std::max<int64_t>(1, std::min((want + items - 1) / items, int64_t{longest / kKeyBlock}));
    if (longest > kKeyBlock || splits > 1 || shared_heads_here(group, longest)) {
      if (c.f16) {
        (hd == 64 ? decode_blocked<uint16_t, 8> : decode_blocked<uint16_t, 16>)(op, c, splits, ctx);
      } else {
        (hd == 64 ? decode_blocked<float, 8> : decode_blocked<float, 16>)(op, c, splits, ctx);
      }
      return ok_status();
    }
  }
  if (!one_query_kernel && group > 1 && hd % 64 == 0 && group <= 64) {
    // Fewer (sequence, kv head) items than two per thread over more than a key block (Gemma 4's one kv head):
    // each sequence's visible positions split into ranges of at least a key block, combined after (one thread
    // takes them whole).
    int32_t longest = 0;
    for (int64_t s = 0; s < b; ++s) longest = std::max(longest, visible(lens[s] - 1, op.scores));
    const int64_t items = b * c.kv_heads, want = 2 * static_cast<int64_t>(ctx.threads);
    const int64_t splits =
        items >= want || ctx.threads < 2
            ? 1
            : std::max<int64_t>(1, std::min({(want + items - 1) / items, int64_t{longest / kKeyBlock}, int64_t{64}}));
    if (splits > 1) {
      if (c.f16) {
        decode_grouped_split<uint16_t>(op, c, splits, ctx);
      } else {
        decode_grouped_split<float>(op, c, splits, ctx);
      }
      return ok_status();
    }
    // Grouped-query heads: the heads that share a kv head read its keys and values once, together.
    const float* q = data<const float>(op.q);
    float* out = data<float>(op.out);
    const AttentionScores opt = op.scores;
    const float* sinks = op.sinks.valid() ? data<const float>(op.sinks) : nullptr;
    parallel_for(ctx, b * c.kv_heads, [&](int64_t wi) {
      const int64_t sq = wi / c.kv_heads, kvh = wi % c.kv_heads;
      const int32_t pos = lens[sq] - 1, first = opt.window > 0 ? std::max(0, pos - opt.window + 1) : 0;
      Query qs[64];
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = kvh * group + g;
        qs[g] = {q + (sq * heads + h) * hd, out + (sq * heads + h) * hd, first, pos, sinks ? sinks[h] : -INFINITY};
      }
      if (c.f16) {
        attend_queries<uint16_t>(c, tables + sq * max_blocks, kvh, qs, group, opt);
      } else {
        attend_queries<float>(c, tables + sq * max_blocks, kvh, qs, group, opt);
      }
    });
    return ok_status();
  }
#endif
  attend_all(
      c, b, op.q.dim(1), data<const float>(op.q), data<float>(op.out), [lens](int64_t i) { return lens[i] - 1; },
      [tables, max_blocks](int64_t i) { return tables + i * max_blocks; }, op.scores,
      op.sinks.valid() ? data<const float>(op.sinks) : nullptr, ctx);
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
