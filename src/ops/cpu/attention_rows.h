// The row walk the cpu decode kernels share, and the one-query kernel built on it (attend_one: attention.cc's
// short contexts, attention_decode.cc's short sequences); attention_decode.cc's long-context kernels (attend_range,
// attend_range_shared) walk the rows the same way. A kv head's rows are a cache row apart (all kv heads of a
// position are stored together) and blocks are scattered, so the kernels walk precomputed offsets, prefetch rows
// ahead of use, score eight keys per reduction and keep an online softmax state per query head. Included inside
// each kernel build (TS_CPU_ISA), by those two files only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/attention_cache.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail {

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

#if defined(__AVX2__)
// The cache lines of a row of `bytes`, into L1 (the first load of each row was most of decode attention's wait at
// depth 512 before rows were prefetched).
inline void prefetch_row(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T0);
}

inline float hmax8(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

// How many positions ahead key_scores and value_sum prefetch (blocks are scattered, so a hardware stream stops at
// each block's end).
constexpr int32_t kPrefetchKeys = 64;

// sc[t] = q . k_t / sqrt(head_dim) (or times opt.scale) for the n keys at offsets o[0, n) (rows of f32, f16 or, where
// blocks_shared_here, q8_0 / q4_0 blocks, read through row_at and row8), the query in qv;
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
      for (int r = 0; r < 8; ++r) prefetch_row(row_at(kbase, o[t + kPrefetchKeys + r]), row_bytes<T>(hd));
    }
    __m256 a[8];
#pragma GCC unroll 16
    for (int r = 0; r < 8; ++r) {
      if (r < m) {
        const T* k = row_at(kbase, o[t + r]);
        __m256 acc = _mm256_mul_ps(row8(k, 0), qv[0]);
#pragma GCC unroll 16
        for (int j = 1; j < NV; ++j) acc = _mm256_fmadd_ps(row8(k, j), qv[j], acc);
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
      prefetch_row(row_at(vbase, o[t + kPrefetchKeys]), row_bytes<T>(hd));
      prefetch_row(row_at(vbase, o[t + kPrefetchKeys + 1]), row_bytes<T>(hd));
    }
    const T* v0 = row_at(vbase, o[t]);
    const T* v1 = row_at(vbase, o[t + 1]);
    const __m256 p0 = _mm256_set1_ps(p[t]), p1 = _mm256_set1_ps(p[t + 1]);
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      o0[j] = _mm256_fmadd_ps(p0, row8(v0, j), o0[j]);
      o1[j] = _mm256_fmadd_ps(p1, row8(v1, j), o1[j]);
    }
  }
  if (t < n) {
    const T* v0 = row_at(vbase, o[t]);
    const __m256 p0 = _mm256_set1_ps(p[t]);
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) o0[j] = _mm256_fmadd_ps(p0, row8(v0, j), o0[j]);
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

// One query's decode attention, head_dim = 8 * NV (64 or 128), in 256-bit vectors in every build (a 512-bit
// form of it, sixteen keys per reduction, measured 7% slower on Zen 4 at depth 1024). Scores: eight keys at a
// time, each a chain of NV FMAs against the query held in registers, the eight reduced together (reduce8).
// Softmax: max-subtracted, exp8 eight at a time (a scalar std::exp was a fifth of the time; heads of other
// sizes, such as stories260K's 8, keep attend_head and its std::exp). Values: two positions per step into two
// sets of NV accumulators. Cache offsets come from row_offsets (no division per key); rows are prefetched
// kPrefetchKeys positions ahead (blocks are scattered, so a stream stops at each block's end). Going through
// the heads of a position together instead (one contiguous cache row) measured slower.
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

}  // namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail
