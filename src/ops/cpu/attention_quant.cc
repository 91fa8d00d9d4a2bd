// Paged attention over a KV cache of block-quantised rows (q8_0, q4_0: llama.cpp's -ctk / -ctv types), for what the
// kernels of attention_decode.cc and attention_tiled.cc do not read in place (attention.cc asks blocks_shared_here and
// blocks_tiled_here first: in the avx512 and avx2 builds they take most shapes; f32, f16 and bf16 caches never come
// here).
//
// A cache row of one kv head is head_dim elements: head_dim / 32 blocks of 32 values with one f16 scale each
// (validate() refuses a head_dim that does not divide). The kernel never widens the cache. Keys: with one or two
// queries per work item (decode), eight key rows' integers are multiplied against the query and each block's sum
// scaled by its d; with more (prefill chunks, grouped heads), eight key rows are widened into a small f32 panel in
// L1 that every query of the item reads. Values (head_dim 32, 64, 128) go from their blocks straight into
// registers, each block's d folded into the position's probability. So the bytes read from memory per position
// are the quantised row's (34 bytes per 32 values for q8_0, 18 for q4_0, against 64 for f16). A context longer
// than kQKeyBlock positions is taken in blocks of that many with an online softmax (attend_group_blocked).
//
// A work item is the queries that read the same kv head through the same block table: for decode one sequence's
// query heads of a kv head (the grouped-query heads share each widened row), for prefill a chunk of a sequence's
// tokens times those heads. Per query: scores q.k / sqrt(head_dim) (or * scale), soft-capping, the visible
// positions of a window, a sink logit, a max-subtracted softmax (exp8 eight at a time in the AVX2 builds) normalised by
// 1/sum, then the weighted sum of value rows position by position: ref's order of operations but for the
// summation order inside the dot products, within the conformance bound. Widening is exact (d * q in f32), so the
// kernel's result differs from an f32 cache holding the widened values only by that summation order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

struct QCache {
  const uint8_t* k;
  const uint8_t* v;
  DType k_type, v_type;
  int64_t num_blocks, block_tokens, kv_heads, head_dim;
  size_t k_head_bytes, v_head_bytes;  // one kv head's row

  QCache(const Tensor& kc, const Tensor& vc)
      : k(data<const uint8_t>(kc)),
        v(data<const uint8_t>(vc)),
        k_type(kc.dtype),
        v_type(vc.dtype),
        num_blocks(kc.dim(0)),
        block_tokens(kc.dim(1)),
        kv_heads(kc.dim(2)),
        head_dim(kc.dim(3)),
        k_head_bytes(dtype_bytes(kc.dtype, static_cast<size_t>(kc.dim(3)))),
        v_head_bytes(dtype_bytes(vc.dtype, static_cast<size_t>(vc.dim(3)))) {}

  const uint8_t* k_row(int64_t r) const { return k + static_cast<size_t>(r) * k_head_bytes; }
  const uint8_t* v_row(int64_t r) const { return v + static_cast<size_t>(r) * v_head_bytes; }
};

Status check_table(const QCache& c, const int32_t* table, int64_t table_len, int32_t pos) {
  const int64_t need = pos / c.block_tokens + 1;
  if (need > table_len) return out_of_range(fmt::format("attention: position {} is beyond the block table", pos));
  for (int64_t b = 0; b < need; ++b) {
    if (table[b] < 0 || table[b] >= c.num_blocks) {
      return out_of_range(fmt::format("attention: block {} is outside the cache [0, {})", table[b], c.num_blocks));
    }
  }
  return ok_status();
}

inline float scale_of(uint16_t d) {
#if defined(__AVX2__)
  return _cvtsh_ss(d);  // F16C: the same value as f16_to_f32, without its branches and call
#else
  return f16_to_f32(d);
#endif
}

// n values of one row (n a multiple of 32 for the block types) into dst, exactly as base/quant.h's dequantize().
void widen_row(const uint8_t* src, DType t, int64_t n, float* dst) {
  if (t == DType::kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
    for (int64_t i = 0; i < n / kQuantBlock; ++i, dst += kQuantBlock) {
      const float d = scale_of(b[i].d);
#if defined(__AVX2__)
      const __m256 dv = _mm256_set1_ps(d);
      for (int j = 0; j < kQuantBlock; j += 8) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + j));
        _mm256_storeu_ps(dst + j, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
      }
#else
      for (int j = 0; j < kQuantBlock; ++j) dst[j] = d * static_cast<float>(b[i].qs[j]);
#endif
    }
    return;
  }
  if (t == DType::kQ4_0) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(src);
    for (int64_t i = 0; i < n / kQuantBlock; ++i, dst += kQuantBlock) {
      const float d = scale_of(b[i].d);
#if defined(__AVX2__)
      // Byte j holds element j (low nibble) and element j + 16 (high nibble); both stored as q + 8.
      const __m256 dv = _mm256_set1_ps(d);
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
      const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, mask), eight);
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight);
      const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
      for (int j = 0; j < 4; ++j)
        _mm256_storeu_ps(dst + 8 * j, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[j]))));
#else
      for (int j = 0; j < kQuantBlock / 2; ++j) {
        dst[j] = d * static_cast<float>((b[i].qs[j] & 0x0f) - 8);
        dst[j + kQuantBlock / 2] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
      }
#endif
    }
    return;
  }
  TS_CHECK(dequantize(src, t, {dst, static_cast<size_t>(n)}).ok());  // no other type reaches this file (see above)
}

#if defined(__AVX2__)
// The 32 values of a block as four vectors of 8 int32, in element order (q4_0: q - 8).
inline void block_ints(const BlockQ8_0& b, __m256i out[4]) {
  for (int k = 0; k < 4; ++k)
    out[k] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * k)));
}
inline void block_ints(const BlockQ4_0& b, __m256i out[4]) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, mask), eight);
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight);
  out[0] = _mm256_cvtepi8_epi32(lo);
  out[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8));
  out[2] = _mm256_cvtepi8_epi32(hi);
  out[3] = _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8));
}

// out[0 .. 8 NV) = alpha * out + sum_i p[i] * v_i (alpha 0: out not read) over the value rows rows[0 .. count) of a
// q8_0 or q4_0 cache (block type B), read straight from their blocks into 8 NV accumulators held in registers (each
// block's scale folded into p[i]).
template <typename B, int NV>
void block_values(const QCache& c, const int64_t* rows, const float* p, int64_t count, float* out, float alpha) {
  __m256 o[NV];
  const __m256 av = _mm256_set1_ps(alpha);
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j)
    o[j] = alpha == 0.0f ? _mm256_setzero_ps() : _mm256_mul_ps(av, _mm256_loadu_ps(out + 8 * j));
  for (int64_t i = 0; i < count; ++i) {
    const B* b = reinterpret_cast<const B*>(c.v_row(rows[i]));
#pragma GCC unroll 4
    for (int blk = 0; blk < NV / 4; ++blk) {
      const __m256 pd = _mm256_set1_ps(p[i] * scale_of(b[blk].d));
      __m256i q[4];
      block_ints(b[blk], q);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) o[4 * blk + k] = _mm256_fmadd_ps(pd, _mm256_cvtepi32_ps(q[k]), o[4 * blk + k]);
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) _mm256_storeu_ps(out + 8 * j, o[j]);
}

// The dot products of q (8 NV values) with the key rows rows[0 .. n) (n <= 8) of a q8_0 or q4_0 cache, read straight
// from their blocks, as one vector (lanes past n are 0): per block eight-lane products against the integers, then
// scaled by the block's d.
template <typename B, int NV>
__m256 block_dots8(const QCache& c, const int64_t* rows, int64_t n, const float* q) {
  __m256 a[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    a[r] = _mm256_setzero_ps();
    if (r >= n) continue;
    const B* row = reinterpret_cast<const B*>(c.k_row(rows[r]));
#pragma GCC unroll 4
    for (int blk = 0; blk < NV / 4; ++blk) {
      __m256i ints[4];
      block_ints(row[blk], ints);
      __m256 acc = _mm256_mul_ps(_mm256_cvtepi32_ps(ints[0]), _mm256_loadu_ps(q + 32 * blk));
#pragma GCC unroll 3
      for (int k = 1; k < 4; ++k)
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ints[k]), _mm256_loadu_ps(q + 32 * blk + 8 * k), acc);
      a[r] = _mm256_fmadd_ps(_mm256_set1_ps(scale_of(row[blk].d)), acc, a[r]);
    }
  }
  return reduce8(a);
}

// The two above for the cache's types and a head of 32, 64 or 128 values (direct_blocks()).
bool direct_blocks(DType t, int64_t hd) {
  return (t == DType::kQ8_0 || t == DType::kQ4_0) && (hd == 32 || hd == 64 || hd == 128);
}
__m256 key_dots8(const QCache& c, const int64_t* rows, int64_t n, const float* q) {
  const int64_t hd = c.head_dim;
  if (c.k_type == DType::kQ8_0) {
    return hd == 32   ? block_dots8<BlockQ8_0, 4>(c, rows, n, q)
           : hd == 64 ? block_dots8<BlockQ8_0, 8>(c, rows, n, q)
                      : block_dots8<BlockQ8_0, 16>(c, rows, n, q);
  }
  return hd == 32   ? block_dots8<BlockQ4_0, 4>(c, rows, n, q)
         : hd == 64 ? block_dots8<BlockQ4_0, 8>(c, rows, n, q)
                    : block_dots8<BlockQ4_0, 16>(c, rows, n, q);
}
void value_sum(const QCache& c, const int64_t* rows, const float* p, int64_t count, float* out, float alpha) {
  const int64_t hd = c.head_dim;
  if (c.v_type == DType::kQ8_0) {
    (hd == 32   ? block_values<BlockQ8_0, 4>
     : hd == 64 ? block_values<BlockQ8_0, 8>
                : block_values<BlockQ8_0, 16>)(c, rows, p, count, out, alpha);
    return;
  }
  (hd == 32   ? block_values<BlockQ4_0, 4>
   : hd == 64 ? block_values<BlockQ4_0, 8>
              : block_values<BlockQ4_0, 16>)(c, rows, p, count, out, alpha);
}
#endif

struct QQuery {
  const float* q;
  float* out;
  int32_t first, last;     // the positions it sees
  float sink = -INFINITY;  // its head's attention sink (gpt-oss); -inf: none
};

// The row indices (cache rows of kv head kvh) of positions lo .. lo + n - 1: one division, then walking the blocks.
void position_rows(const QCache& c, const int32_t* table, int64_t kvh, int32_t lo, int64_t n, int64_t* rows) {
  int64_t b = lo / c.block_tokens, r = lo % c.block_tokens;
  for (int64_t i = 0; i < n; ++i) {
    rows[i] = (static_cast<int64_t>(table[b]) * c.block_tokens + r) * c.kv_heads + kvh;
    if (++r == c.block_tokens) {
      r = 0;
      ++b;
    }
  }
}

// s[g * ld + i] = the scaled score of query g against key row rows[i], i < span. Keys are widened eight at a
// time into an L1 panel and each query's eight dot products reduced together (reduce8); one or two queries read
// q8_0 and q4_0 keys straight from their blocks instead.
void group_scores(const QCache& c, const int64_t* rows, int64_t span, const QQuery* qs, int64_t nq, float* s,
                  int64_t ld, const AttentionScores& opt, std::vector<float>& panel) {
  const int64_t hd = c.head_dim;
  panel.resize(static_cast<size_t>(8 * hd));
  const float denom = std::sqrt(static_cast<float>(hd));
  const bool scaled = opt.scale > 0.0f;
#if defined(__AVX2__)
  // One or two queries per item (decode without grouped heads): their keys straight from the blocks, no panel.
  const bool direct = nq <= 2 && direct_blocks(c.k_type, hd);
  const __m256 dv = _mm256_set1_ps(scaled ? opt.scale : 1.0f / denom);
  for (int64_t i = 0; direct && i < span; i += 8) {
    const int64_t n = std::min<int64_t>(8, span - i);
    for (int64_t g = 0; g < nq; ++g) {
      const __m256 d = key_dots8(c, rows + i, n, qs[g].q);
      float out[8];
      _mm256_storeu_ps(out, _mm256_mul_ps(d, dv));
      std::memcpy(s + g * ld + i, out, static_cast<size_t>(n) * sizeof(float));
    }
  }
  for (int64_t i = 0; !direct && i < span; i += 8) {
#else
  for (int64_t i = 0; i < span; i += 8) {
#endif
    const int64_t n = std::min<int64_t>(8, span - i);
    for (int64_t r = 0; r < n; ++r) widen_row(c.k_row(rows[i + r]), c.k_type, hd, &panel[r * hd]);
    for (int64_t g = 0; g < nq; ++g) {
      float* sg = s + g * ld + i;
#if defined(__AVX2__)
      if (n == 8 && hd % 8 == 0) {
        __m256 a[8];
        for (auto& v : a) v = _mm256_setzero_ps();
        for (int64_t j = 0; j < hd; j += 8) {
          const __m256 qv = _mm256_loadu_ps(qs[g].q + j);
#pragma GCC unroll 8
          for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(&panel[r * hd + j]), qv, a[r]);
        }
        const __m256 d = reduce8(a);
        _mm256_storeu_ps(
            sg, scaled ? _mm256_mul_ps(d, _mm256_set1_ps(opt.scale)) : _mm256_div_ps(d, _mm256_set1_ps(denom)));
        continue;
      }
#endif
      for (int64_t r = 0; r < n; ++r) {
        const float d = dot(&panel[r * hd], qs[g].q, hd);
        sg[r] = scaled ? d * opt.scale : d / denom;
      }
    }
  }
}

// Over one query's scores sg[a..b]: the soft-cap if any, then sg[t] = exp(sg[t] - m), m the larger of `floor`
// and the scores' max; returns m and the exponentials' sum. exp8 (simd.h), as the f16 one-query kernel takes it:
// std::exp here was a fifth of q8_0 decode's time.
std::pair<float, float> cap_and_exp(float* sg, int32_t a, int32_t b, const AttentionScores& opt, float floor) {
  if (opt.softcap > 0.0f) {
    for (int32_t t = a; t <= b; ++t) sg[t] = opt.softcap * std::tanh(sg[t] / opt.softcap);
  }
  float mx = floor;
  for (int32_t t = a; t <= b; ++t) mx = std::max(mx, sg[t]);
  float sum = 0.0f;
  int32_t t = a;
#if defined(__AVX2__)
  __m256 sv = _mm256_setzero_ps();
  const __m256 mv = _mm256_set1_ps(mx);
  for (; t + 8 <= b + 1; t += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + t), mv));
    _mm256_storeu_ps(sg + t, e);
    sv = _mm256_add_ps(sv, e);
  }
  sum = hsum(sv);
#endif
  for (; t <= b; ++t) {
    sg[t] = std::exp(sg[t] - mx);
    sum += sg[t];
  }
  return {mx, sum};
}

// Long contexts: the positions in blocks of kQKeyBlock with an online softmax, so a work item's score rows
// (nq x kQKeyBlock floats) stay in L2 however long the context. Each query keeps its running max m and sum l;
// its output (the unnormalised weighted sum) is rescaled by e^(m_old - m_new) when a block raises the max and
// divided by l at the end.
constexpr int32_t kQKeyBlock = 256;

void attend_group_blocked(const QCache& c, const int32_t* table, int64_t kvh, const QQuery* qs, int64_t nq, int32_t lo,
                          int32_t hi, const AttentionScores& opt) {
  thread_local std::vector<float> s, panel, run_m, run_l;
  thread_local std::vector<int64_t> rows;
  constexpr int64_t ld = kQKeyBlock;
  const int64_t hd = c.head_dim;
  s.resize(static_cast<size_t>(nq * ld));
  rows.resize(static_cast<size_t>(ld));
  run_m.resize(static_cast<size_t>(nq));
  run_l.resize(static_cast<size_t>(nq));
  for (int64_t g = 0; g < nq; ++g) {
    run_m[static_cast<size_t>(g)] = qs[g].sink;
    run_l[static_cast<size_t>(g)] = 0.0f;
    std::memset(qs[g].out, 0, static_cast<size_t>(hd) * sizeof(float));
  }
#if defined(__AVX2__)
  const bool direct_values = direct_blocks(c.v_type, hd);
#else
  const bool direct_values = false;
#endif
  for (int32_t b0 = lo; b0 <= hi; b0 += kQKeyBlock) {
    const int32_t n = std::min(hi + 1 - b0, kQKeyBlock), b_last = b0 + n - 1;
    position_rows(c, table, kvh, b0, n, rows.data());
    group_scores(c, rows.data(), n, qs, nq, s.data(), ld, opt, panel);
    for (int64_t g = 0; g < nq; ++g) {
      const int32_t a = std::max(qs[g].first, b0), b = std::min(qs[g].last, b_last);
      if (a > b) continue;                 // no key of this block: output unchanged
      float* sg = s.data() + g * ld - b0;  // sg[t] for t in [a, b]
      const auto [mx, sum] = cap_and_exp(sg, a, b, opt, run_m[static_cast<size_t>(g)]);
      const float al = std::exp(run_m[static_cast<size_t>(g)] - mx);  // 0 on the first block without a sink
      run_l[static_cast<size_t>(g)] = run_l[static_cast<size_t>(g)] * al + sum;
      run_m[static_cast<size_t>(g)] = mx;
#if defined(__AVX2__)
      if (direct_values) {
        value_sum(c, rows.data() + (a - b0), sg + a, b - a + 1, qs[g].out, al);
        continue;
      }
#endif
      for (int64_t d = 0; d < hd; ++d) qs[g].out[d] *= al;
    }
    if (direct_values) continue;
    float* row = panel.data();
    for (int32_t t = b0; t <= b_last; ++t) {
      widen_row(c.v_row(rows[static_cast<size_t>(t - b0)]), c.v_type, hd, row);
      for (int64_t g = 0; g < nq; ++g) {
        if (t < qs[g].first || t > qs[g].last) continue;
        axpy(s[static_cast<size_t>(g * ld + t - b0)], row, qs[g].out, hd);
      }
    }
  }
  for (int64_t g = 0; g < nq; ++g) {
    const float inv = 1.0f / (run_l[static_cast<size_t>(g)] + std::exp(qs[g].sink - run_m[static_cast<size_t>(g)]));
    for (int64_t d = 0; d < hd; ++d) qs[g].out[d] *= inv;
  }
}

// Queries qs[0..nq) of kv head kvh, all reading `table`, over a context of at most kQKeyBlock positions; a
// query's scores outside its own positions are computed but never read.
void attend_group(const QCache& c, const int32_t* table, int64_t kvh, const QQuery* qs, int64_t nq,
                  const AttentionScores& opt) {
  thread_local std::vector<float> s, panel;
  thread_local std::vector<int64_t> rows;
  const int64_t hd = c.head_dim;
  int32_t lo = qs[0].first, hi = qs[0].last;
  for (int64_t g = 1; g < nq; ++g) {
    lo = std::min(lo, qs[g].first);
    hi = std::max(hi, qs[g].last);
  }
  if (hi - lo + 1 > kQKeyBlock) {
    attend_group_blocked(c, table, kvh, qs, nq, lo, hi, opt);
    return;
  }
  const int64_t span = hi - lo + 1;
  s.resize(static_cast<size_t>(nq * span));
  rows.resize(static_cast<size_t>(span));
  position_rows(c, table, kvh, lo, span, rows.data());
  group_scores(c, rows.data(), span, qs, nq, s.data(), span, opt, panel);
  for (int64_t g = 0; g < nq; ++g) {
    float* sg = s.data() + g * span - lo;  // sg[t] for t in [first, last]
    const int32_t a = qs[g].first, b = qs[g].last;
    // A sink is one more logit; -inf without one changes nothing.
    auto [mx, sum] = cap_and_exp(sg, a, b, opt, qs[g].sink);
    sum += std::exp(qs[g].sink - mx);
    const float inv = 1.0f / sum;
    for (int32_t t = a; t <= b; ++t) sg[t] *= inv;
    std::memset(qs[g].out, 0, static_cast<size_t>(hd) * sizeof(float));
  }
#if defined(__AVX2__)
  // q8_0 and q4_0 value rows of 32, 64 or 128 values go straight from their blocks into registers, per query.
  if (direct_blocks(c.v_type, hd)) {
    for (int64_t g = 0; g < nq; ++g) {
      const int64_t a = qs[g].first - lo, count = qs[g].last - qs[g].first + 1;
      const float* p = s.data() + g * span + a;
      value_sum(c, rows.data() + a, p, count, qs[g].out, 0.0f);
    }
    return;
  }
#endif
  float* row = panel.data();
  for (int32_t t = lo; t <= hi; ++t) {
    widen_row(c.v_row(rows[static_cast<size_t>(t - lo)]), c.v_type, hd, row);
    for (int64_t g = 0; g < nq; ++g) {
      if (t < qs[g].first || t > qs[g].last) continue;
      axpy(s[static_cast<size_t>(g * span + t - lo)], row, qs[g].out, hd);
    }
  }
}

// Queries per work item at most (a prefill chunk's tokens times the heads of one kv head).
constexpr int64_t kMaxItemQueries = 64;

}  // namespace

Status attention_prefill_quant(const AttentionPrefillOp& op, const Ctx& ctx) {
  QCache c(op.k_cache, op.v_cache);
  const int32_t* table = data<const int32_t>(op.block_table);
  const int64_t n = op.q.dim(0), heads = op.q.dim(1), hd = c.head_dim, group = heads / c.kv_heads;
  TS_RETURN_IF_ERROR(check_table(c, table, op.block_table.dim(0), static_cast<int32_t>(op.start_pos + n - 1)));
  // An item is `chunk` consecutive tokens times the query heads of one kv head: each widened row serves them all.
  const int64_t chunk = std::max<int64_t>(1, kMaxItemQueries / group), chunks = (n + chunk - 1) / chunk;
  const float* q = data<const float>(op.q);
  float* out = data<float>(op.out);
  const float* sinks = op.sinks.valid() ? data<const float>(op.sinks) : nullptr;
  const AttentionScores opt = op.scores;
  const int32_t start = op.start_pos;
  parallel_for(ctx, chunks * c.kv_heads, [&](int64_t wi) {
    thread_local std::vector<QQuery> qs;
    const int64_t kvh = wi % c.kv_heads, i0 = wi / c.kv_heads * chunk, i1 = std::min(n, i0 + chunk);
    qs.clear();
    for (int64_t i = i0; i < i1; ++i) {
      const int32_t pos = static_cast<int32_t>(start + i);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        qs.push_back({q + (i * heads + h) * hd, out + (i * heads + h) * hd,
                      opt.window > 0 ? std::max(0, pos - opt.window + 1) : 0, pos, sinks ? sinks[h] : -INFINITY});
      }
    }
    attend_group(c, table, kvh, qs.data(), static_cast<int64_t>(qs.size()), opt);
  });
  return ok_status();
}

Status attention_decode_quant(const AttentionDecodeOp& op, const Ctx& ctx) {
  QCache c(op.k_cache, op.v_cache);
  const int64_t b = op.q.dim(0), heads = op.q.dim(1), hd = c.head_dim, group = heads / c.kv_heads;
  const int64_t max_blocks = op.block_tables.dim(1);
  const auto* lens = data<const int32_t>(op.context_lens);
  const auto* tables = data<const int32_t>(op.block_tables);
  for (int64_t s = 0; s < b; ++s) {
    if (lens[s] < 1) return out_of_range(fmt::format("attention_decode: context length {} of sequence {}", lens[s], s));
    TS_RETURN_IF_ERROR(check_table(c, tables + s * max_blocks, max_blocks, lens[s] - 1));
  }
  const float* q = data<const float>(op.q);
  float* out = data<float>(op.out);
  const float* sinks = op.sinks.valid() ? data<const float>(op.sinks) : nullptr;
  const AttentionScores opt = op.scores;
  // One item per (sequence, kv head) shares each widened row among the group's query heads; with fewer such items
  // than threads (one long sequence), one item per query head keeps every thread busy instead.
  const int64_t per_item = b * c.kv_heads >= ctx.threads ? group : 1;
  const int64_t items_per_seq = heads / per_item;
  parallel_for(ctx, b * items_per_seq, [&](int64_t wi) {
    QQuery qs[kMaxItemQueries];
    const int64_t sq = wi / items_per_seq, h0 = wi % items_per_seq * per_item;
    const int32_t pos = lens[sq] - 1, first = opt.window > 0 ? std::max(0, pos - opt.window + 1) : 0;
    for (int64_t start = 0; start < per_item; start += kMaxItemQueries) {
      const int64_t count = std::min(kMaxItemQueries, per_item - start);
      for (int64_t g = 0; g < count; ++g) {
        const int64_t h = h0 + start + g;
        qs[g] = {q + (sq * heads + h) * hd, out + (sq * heads + h) * hd, first, pos, sinks ? sinks[h] : -INFINITY};
      }
      attend_group(c, tables + sq * max_blocks, h0 / group, qs, count, opt);
    }
  });
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
