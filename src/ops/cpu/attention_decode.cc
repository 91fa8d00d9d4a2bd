// Decode over long contexts with an f32, f16 or bf16 cache, and any decode with a q8_0 or q4_0 one where
// blocks_shared_here (issue 31): past kKeyBlock positions a decode item is (sequence, kv head, range of
// kDecodeRange positions). The query heads of a kv head read each key block
// once (in the avx512 build, heads of 64 and 128 go through each row together from 64 positions on, heads of 256
// always: attend_range_shared, heads of 512 in two parts of 256: attend_range_shared_parts; in the avx2 build heads of
// 256 and 512 in parts of 128: attend_range_parts), in
// blocks of kKeyBlock positions with an online softmax; a sequence of several ranges has their partial states
// combined after, in order. attention.cc chooses when these run; the short-context kernels and the operators'
// entry points stay there.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/attention_cache.h"
#include "ops/cpu/attention_rows.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail {
#if defined(__AVX2__)
namespace {

// The key blocks of kKeyBlock positions in [r0, r1) of kv head kvh, in order: fn(n, ahead, o) for each, n the
// block's positions and o the cache offsets of those and, for prefetching, of the next block's first kPrefetchKeys
// rows (ahead offsets in all).
template <typename Fn>
inline void for_each_key_block(const Cache& c, const int32_t* table, int32_t r0, int32_t r1, int64_t kvh, Fn&& fn) {
  thread_local std::vector<int64_t> off;
  for (int32_t b0 = r0; b0 < r1; b0 += kKeyBlock) {
    const int32_t n = std::min(r1 - b0, kKeyBlock);
    const int32_t ahead = std::min(r1 - b0, n + kPrefetchKeys);
    row_offsets(c, table, b0, ahead, kvh, off);
    fn(n, ahead, off.data());
  }
}

// Decode over long contexts, head_dim = 8 * NV: the query heads of one kv head (qs[0..G) of a grouped-query
// model, one head otherwise) over the positions [r0, r1) of one sequence, in blocks of kKeyBlock positions
// with an online softmax. Each block's key and value rows (64 KiB of f16 at head_dim 64) come from memory once,
// for the first head, and from L2 for the others, where attend_one read a long context once per query head.
// The result is each head's Partial over the range (m = -inf, l = 0 for an empty range); decode_combine() merges
// the ranges of one sequence that were split over threads.
template <typename T, int NV>
void attend_range(const Cache& c, const int32_t* table, int32_t r0, int32_t r1, const float* const* qs, int G,
                  int64_t kvh, Partial* parts, const AttentionScores& opt) {
  constexpr int64_t hd = 8 * NV;
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const T* vbase = reinterpret_cast<const T*>(c.v);
  alignas(32) float sc[kKeyBlock];
  for (int g = 0; g < G; ++g) parts[g].reset(hd);
  for_each_key_block(c, table, r0, r1, kvh, [&](int32_t n, int32_t ahead, const int64_t* o) {
    const int32_t padded = (n + 7) / 8 * 8;
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
  });
}

// Heads of 128 * P where no kernel holds a whole row in registers, in the avx2 build: heads of 256 (wide_heads_here;
// attend_range's row of 32 vectors of 8 would need twice the 16 registers for its query in key_scores and its two sets
// of accumulators in value_sum) and Gemma 4's global heads of 512 (wider_heads_here). Each key block is taken
// in P parts of 128 elements through the head-of-128 kernels: the parts' dot products summed, then scaled once, and
// each part of the accumulator summed by value_sum<T, 16> over its part of the value rows; every row is still read
// once per head group pass (the parts are disjoint). These took the tiled path (attend_queries_of: a key panel
// transposed element by element per item) or, a single kv head split over threads, decode_grouped_split.
template <typename T, int P>
void attend_range_parts(const Cache& c, const int32_t* table, int32_t r0, int32_t r1, const float* const* qs, int G,
                        int64_t kvh, Partial* parts, const AttentionScores& opt) {
  constexpr int64_t part = 128, hd = part * P;
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const T* vbase = reinterpret_cast<const T*>(c.v);
  AttentionScores unscaled = opt;
  unscaled.scale = 1.0f;  // key_scores then multiplies by 1: the parts' plain dot products
  const bool scaled = opt.scale > 0.0f;
  const __m256 sv = _mm256_set1_ps(scaled ? opt.scale : 1.0f / std::sqrt(static_cast<float>(hd)));
  alignas(32) float sc[kKeyBlock], more[kKeyBlock];
  for (int g = 0; g < G; ++g) parts[g].reset(hd);
  for_each_key_block(c, table, r0, r1, kvh, [&](int32_t n, int32_t ahead, const int64_t* o) {
    const int32_t padded = (n + 7) / 8 * 8;
    for (int g = 0; g < G; ++g) {
      __m256 qv[16];
      for (int h = 0; h < P; ++h) {
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) qv[j] = _mm256_loadu_ps(qs[g] + h * part + 8 * j);
        key_scores<T, 16>(row_at(kbase, h * part), o, n, ahead, qv, unscaled, g == 0, h == 0 ? sc : more);
        if (h > 0) {
          for (int32_t t = 0; t < padded; t += 8)
            _mm256_store_ps(sc + t, _mm256_add_ps(_mm256_load_ps(sc + t), _mm256_load_ps(more + t)));
        }
      }
      for (int32_t t = 0; t < padded; t += 8) _mm256_store_ps(sc + t, _mm256_mul_ps(_mm256_load_ps(sc + t), sv));
      const float alpha = parts[g].softmax_step(sc, n, padded, opt);
      const __m256 av = _mm256_set1_ps(alpha);
      for (int h = 0; h < P; ++h) {
        float* acc = parts[g].acc + h * part;
        __m256 o0[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) o0[j] = _mm256_mul_ps(av, _mm256_loadu_ps(acc + 8 * j));
        value_sum<T, 16>(row_at(vbase, h * part), o, n, ahead, sc, o0, g == 0, acc);
      }
    }
  });
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
// on that core); the avx2 build keeps attend_range. From memory the cache is read at about 20 GB/s, resident at 35-38
// (the arithmetic's bound): a kv head's rows are 256 bytes of every 2 KiB cache row, a walk that caps a plain read at
// about 31 GB/s. Taking chunks of whole rows for every kv head instead measured no faster in the operator (its
// per-chunk softmax steps cost what the order saves; docs/benchmarks.md, "Where decode attention's time goes").
constexpr int kSharedHeads = 4;

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
// every head's query (read from L1), each (head, key) product vector reduced with its fifteen neighbours. Two rows a
// step, at most 8 vectors of each in registers at once (heads of 256: two passes of 8), so each query load feeds two
// FMAs. One row a step, with heads of 256 a row's 16 vectors were spilled (the loop was unrolled by 8 only) and each
// FMA loaded both its operands; the operator with heads of 256 and 512 runs 1.1-1.6x faster for it, heads of 64 and
// 128 level (Zen 5; docs/benchmarks.md, "Two key rows a step").
template <typename T, int NZ>
inline void shared_key_scores(const T* kbase, const int64_t* o, int32_t n, int32_t limit, const float* const* qs,
                              int gc, const AttentionScores& opt, bool prefetch, float* sc) {
  // As key_scores: times opt.scale where the model gives one, else divided by sqrt(head_dim).
  const bool scaled = opt.scale > 0.0f;
  const __m512 sv = _mm512_set1_ps(scaled ? opt.scale : std::sqrt(static_cast<float>(16 * NZ)));
  constexpr int kRowPass = NZ < 8 ? NZ : 8;
  static_assert(NZ % kRowPass == 0, "a row's vectors in whole passes");
  for (int32_t t = 0; t < n; t += 16) {
    const int m = std::min<int32_t>(16, n - t);
    if (prefetch && t + 16 + kPrefetchKeys <= limit) {
      for (int r = 0; r < 16; ++r) prefetch_row(row_at(kbase, o[t + kPrefetchKeys + r]), row_bytes<T>(16 * NZ));
    }
    __m512 part[kSharedHeads][16];
    for (int r = 0; r < 16; r += 2) {
      if (r >= m) {
#pragma GCC unroll 4
        for (int g = 0; g < kSharedHeads; ++g) part[g][r] = part[g][r + 1] = _mm512_setzero_ps();
        continue;
      }
      const T* k0 = row_at(kbase, o[t + r]);
      const T* k1 = r + 1 < m ? row_at(kbase, o[t + r + 1]) : k0;
      __m512 acc[kSharedHeads][2];
#pragma GCC unroll 4
      for (int g = 0; g < kSharedHeads; ++g) acc[g][0] = acc[g][1] = _mm512_setzero_ps();
#pragma GCC unroll 2
      for (int j0 = 0; j0 < NZ; j0 += kRowPass) {
        __m512 kz0[kRowPass], kz1[kRowPass];
#pragma GCC unroll 8
        for (int j = 0; j < kRowPass; ++j) {
          kz0[j] = row16(k0, j0 + j);
          kz1[j] = row16(k1, j0 + j);
        }
#pragma GCC unroll 4
        for (int g = 0; g < kSharedHeads; ++g) {
          if (g >= gc) break;
#pragma GCC unroll 8
          for (int j = 0; j < kRowPass; ++j) {
            const __m512 q = _mm512_loadu_ps(qs[g] + 16 * (j0 + j));
            acc[g][0] = _mm512_fmadd_ps(kz0[j], q, acc[g][0]);
            acc[g][1] = _mm512_fmadd_ps(kz1[j], q, acc[g][1]);
          }
        }
      }
#pragma GCC unroll 4
      for (int g = 0; g < kSharedHeads; ++g) {
        part[g][r] = acc[g][0];
        part[g][r + 1] = r + 1 < m ? acc[g][1] : _mm512_setzero_ps();
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
        prefetch_row(row_at(vbase, o[t + kPrefetchKeys]), row_bytes<T>(16 * NZ));
      }
      const T* v = row_at(vbase, o[t]);
      __m512 vz[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) vz[j] = row16(v, c0 + j);
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
  constexpr int64_t hd = 16 * NZ;
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const T* vbase = reinterpret_cast<const T*>(c.v);
  alignas(64) float sc[kSharedHeads * kKeyBlock];
  for (int g = 0; g < G; ++g) parts[g].reset(hd);
  for_each_key_block(c, table, r0, r1, kvh, [&](int32_t n, int32_t ahead, const int64_t* o) {
    const int32_t padded = (n + 15) / 16 * 16;
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
  });
}

// Gemma 4's global heads of 512 (wider_heads_here) in the avx512 build, as attend_range_parts but through the two
// shared kernels above in P parts of 256: a part of a key or value row is widened once for up to kSharedHeads
// heads, where attend_range_parts (which these heads took before) widens it once per head. The parts' dot products
// are summed, then scaled once. 8 heads on 1 kv head of 512 at 8192 positions, 2 threads, Zen 5: f16 1.71-1.77 ->
// 1.53-1.61 ms, q8_0 (attention_quant.cc before) 4.27-4.62 -> 1.61-1.72 (docs/benchmarks.md, "Gemma 4's heads of 512
// with a q8_0 or q4_0 cache").
template <typename T, int P>
void attend_range_shared_parts(const Cache& c, const int32_t* table, int32_t r0, int32_t r1, const float* const* qs,
                               int G, int64_t kvh, Partial* parts, const AttentionScores& opt) {
  constexpr int64_t part = 256, hd = part * P;
  const T* kbase = reinterpret_cast<const T*>(c.k);
  const T* vbase = reinterpret_cast<const T*>(c.v);
  AttentionScores unscaled = opt;
  unscaled.scale = 1.0f;  // shared_key_scores then multiplies by 1: the parts' plain dot products
  const __m512 sv = _mm512_set1_ps(opt.scale > 0.0f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(hd)));
  alignas(64) float sc[kSharedHeads * kKeyBlock], more[kSharedHeads * kKeyBlock];
  for (int g = 0; g < G; ++g) parts[g].reset(hd);
  for_each_key_block(c, table, r0, r1, kvh, [&](int32_t n, int32_t ahead, const int64_t* o) {
    const int32_t padded = (n + 15) / 16 * 16;
    for (int g0 = 0; g0 < G; g0 += kSharedHeads) {
      const int gc = std::min(kSharedHeads, G - g0);
      const float* qp[kSharedHeads];
      for (int h = 0; h < P; ++h) {
        for (int g = 0; g < gc; ++g) qp[g] = qs[g0 + g] + h * part;
        shared_key_scores<T, 16>(row_at(kbase, h * part), o, n, ahead, qp, gc, unscaled, g0 == 0, h == 0 ? sc : more);
        if (h == 0) continue;
        for (int g = 0; g < gc; ++g) {
          for (int32_t t = 0; t < padded; t += 16) {
            float* d = sc + g * kKeyBlock + t;
            _mm512_store_ps(d, _mm512_add_ps(_mm512_load_ps(d), _mm512_load_ps(more + g * kKeyBlock + t)));
          }
        }
      }
      float* acc[kSharedHeads];
      for (int g = 0; g < gc; ++g) {
        float* s = sc + g * kKeyBlock;
        for (int32_t t = 0; t < padded; t += 16) _mm512_store_ps(s + t, _mm512_mul_ps(_mm512_load_ps(s + t), sv));
        Partial& pg = parts[g0 + g];
        const __m512 av = _mm512_set1_ps(pg.softmax_step(s, n, padded, opt));
        for (int64_t j = 0; j < hd; j += 16)
          _mm512_storeu_ps(pg.acc + j, _mm512_mul_ps(av, _mm512_loadu_ps(pg.acc + j)));
      }
      for (int h = 0; h < P; ++h) {
        for (int g = 0; g < gc; ++g) acc[g] = parts[g0 + g].acc + h * part;
        shared_value_sums<T, 16>(row_at(vbase, h * part), o, n, ahead, sc, gc, g0 == 0, acc);
      }
    }
  });
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

// An AttentionDecodeOp's tensors as the decode items read them.
struct DecodeView {
  int64_t b, heads, group, max_blocks;
  const int32_t* lens;    // [b] context lengths
  const int32_t* tables;  // [b][max_blocks]
  const float* q;         // [b][heads][head_dim]
  float* out;             // likewise
  const float* sinks;     // [heads], or null
  AttentionScores opt;

  DecodeView(const AttentionDecodeOp& op, const Cache& c)
      : b(op.q.dim(0)),
        heads(op.q.dim(1)),
        group(heads / c.kv_heads),
        max_blocks(op.block_tables.dim(1)),
        lens(data<const int32_t>(op.context_lens)),
        tables(data<const int32_t>(op.block_tables)),
        q(data<const float>(op.q)),
        out(data<float>(op.out)),
        sinks(op.sinks.valid() ? data<const float>(op.sinks) : nullptr),
        opt(op.scores) {}
};

// Decode for head_dim = 8 * NV in items of (sequence, kv head, range): a range is kDecodeRange positions of the
// sequence's visible ones, from the first (the last range shorter), so that what a sequence's attention computes, and
// in which order its ranges' partial states are combined, depends on that sequence alone: never on the other
// sequences of the step or on the threads (a reply does not change with the load beside it). Its query heads go
// through attend_range together. A sequence at most one key block long takes attend_one per head, the short-context
// kernel, unchanged (not heads of 256, which attend_one's registers cannot hold: those take the shared kernel at every
// length, nor heads that shared_heads_here).
template <typename T, int NV>
void run_blocked(const AttentionDecodeOp& op, const Cache& c, const Ctx& ctx) {
  constexpr int64_t hd = 8 * NV;
  constexpr bool kWide = NV > 16;  // head_dim 256 and 512: grouped heads (wide_heads_here, wider_heads_here)
  const DecodeView v(op, c);
  const int64_t b = v.b, heads = v.heads, group = v.group;
  // The calling thread's scratch, reached by the workers through these pointers (a thread_local named inside the
  // lambdas would be each worker's own). Sequence s has ranges [first_range[s], first_range[s + 1]) of the flat list,
  // and its partial states are [sequence][head][range] from first_range[s] * heads.
  thread_local std::vector<int64_t> first_range;
  thread_local std::vector<int32_t> item_seq;  // each item's sequence: items are sequence-major, then kv head, range
  thread_local std::vector<float> acc_store;
  thread_local std::vector<Partial> part_store;
  first_range.assign(static_cast<size_t>(b + 1), 0);
  item_seq.clear();
  for (int64_t s = 0; s < b; ++s) {
    const int32_t count = visible(v.lens[s] - 1, v.opt);
    const int64_t n = std::max<int64_t>(1, (count + kDecodeRange - 1) / kDecodeRange);
    first_range[static_cast<size_t>(s + 1)] = first_range[static_cast<size_t>(s)] + n;
    item_seq.insert(item_seq.end(), static_cast<size_t>(n * c.kv_heads), static_cast<int32_t>(s));
  }
  const int64_t ranges = first_range[static_cast<size_t>(b)];
  acc_store.resize(static_cast<size_t>(ranges * heads * hd));
  part_store.resize(static_cast<size_t>(ranges * heads));
  for (size_t i = 0; i < part_store.size(); ++i) part_store[i].acc = acc_store.data() + i * hd;
  Partial* parts = part_store.data();
  const int64_t* firsts = first_range.data();
  const int32_t* seq_of = item_seq.data();
  parallel_for(ctx, ranges * c.kv_heads, [&](int64_t wi) {
    thread_local std::vector<float> scores;
    const int64_t sq = seq_of[wi], splits = firsts[sq + 1] - firsts[sq], local_item = wi - firsts[sq] * c.kv_heads;
    const int64_t kvh = local_item / splits, j = local_item % splits;
    const int32_t pos = v.lens[sq] - 1, count = visible(pos, v.opt), first = pos + 1 - count;
    const int32_t* table = v.tables + sq * v.max_blocks;
    if (!kWide && count <= kKeyBlock && !shared_heads_here(group, count)) {
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        attend_one<T, NV>(c, table, pos, v.q + (sq * heads + h) * hd, kvh, v.out + (sq * heads + h) * hd, scores, v.opt,
                          v.sinks ? v.sinks[h] : -INFINITY);
      }
      return;
    }
    const float* qs[64];
    Partial local[64];
    Partial* mine = parts + firsts[sq] * heads;  // this sequence's [head][range]
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kvh * group + g;
      qs[g] = v.q + (sq * heads + h) * hd;
      local[g] = mine[h * splits + j];
    }
    const int32_t r0 = first + static_cast<int32_t>(std::min<int64_t>(count, j * kDecodeRange));
    const int32_t r1 = first + static_cast<int32_t>(std::min<int64_t>(count, (j + 1) * kDecodeRange));
#if defined(__AVX512F__)
    // One head per kv head: attend_range's 256-bit kernel for f32, f16 and bf16 (the shared one measured slower, 32
    // heads on 32 of 128 at 4096 positions, f16: 2.8-2.9 against 3.1-3.2 ms), the shared one for blocks, whose 512-bit
    // widening is the cheaper (q8_0 1.82-1.87 against 1.89-1.94 ms, q4_0 1.48 against 2.07).
    if constexpr (NV == 64) {  // Gemma 4's global heads of 512 (wider_heads_here)
      attend_range_shared_parts<T, 2>(c, table, r0, r1, qs, static_cast<int>(group), kvh, local, v.opt);
    } else if constexpr (kWide) {
      attend_range_shared<T, NV / 2>(c, table, r0, r1, qs, static_cast<int>(group), kvh, local, v.opt);
    } else if constexpr (NV == 12) {  // heads of 96, one per kv head (narrow_heads_here)
      attend_range<T, NV>(c, table, r0, r1, qs, 1, kvh, local, v.opt);
    } else if (group > 1 || kBlockRows<T>) {
      attend_range_shared<T, NV / 2>(c, table, r0, r1, qs, static_cast<int>(group), kvh, local, v.opt);
    } else {
      attend_range<T, NV>(c, table, r0, r1, qs, 1, kvh, local, v.opt);
    }
#else
    if constexpr (kWide) {
      attend_range_parts<T, NV / 16>(c, table, r0, r1, qs, static_cast<int>(group), kvh, local, v.opt);
    } else {
      attend_range<T, NV>(c, table, r0, r1, qs, static_cast<int>(group), kvh, local, v.opt);
    }
#endif
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kvh * group + g;
      if (splits == 1) {
        decode_combine<NV>(&local[g], 1, v.sinks ? v.sinks[h] : -INFINITY, v.out + (sq * heads + h) * hd);
      } else {
        mine[h * splits + j] = local[g];
      }
    }
  });
  if (ranges == b) return;  // one range each: combined above
  parallel_for(ctx, b * heads, [&](int64_t i) {
    const int64_t sq = i / heads, h = i % heads, splits = firsts[sq + 1] - firsts[sq];
    if (splits == 1 || visible(v.lens[sq] - 1, v.opt) <= 0) return;
    decode_combine<NV>(parts + firsts[sq] * heads + h * splits, static_cast<int>(splits),
                       v.sinks ? v.sinks[h] : -INFINITY, v.out + i * hd);
  });
}

// Grouped-query decode (head_dim a multiple of 64, not 64 or 128) in items of (sequence, kv head, range): the
// range is one of `splits` parts of the sequence's visible positions, which its query heads take together
// through attend_queries_part; then each head's parts and sink are combined as decode_combine does.
template <typename T>
void run_grouped_split(const AttentionDecodeOp& op, const Cache& c, int64_t splits, const Ctx& ctx) {
  const DecodeView v(op, c);
  const int64_t b = v.b, heads = v.heads, group = v.group, hd = c.head_dim;
  // The calling thread's scratch, reached by the workers through these pointers: [sequence][head][range].
  thread_local std::vector<float> acc_store, m_store, l_store;
  acc_store.resize(static_cast<size_t>(b * heads * splits * hd));
  m_store.resize(static_cast<size_t>(b * heads * splits));
  l_store.resize(static_cast<size_t>(b * heads * splits));
  float *acc = acc_store.data(), *ms = m_store.data(), *ls = l_store.data();
  parallel_for(ctx, b * c.kv_heads * splits, [&](int64_t wi) {
    const int64_t j = wi % splits, sk = wi / splits, sq = sk / c.kv_heads, kvh = sk % c.kv_heads;
    const int32_t pos = v.lens[sq] - 1, count = visible(pos, v.opt), first = pos + 1 - count;
    const int32_t r0 = first + static_cast<int32_t>(count * j / splits);
    const int32_t r1 = first + static_cast<int32_t>(count * (j + 1) / splits);
    Query qs[64];
    float m[64], l[64];
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kvh * group + g;
      qs[g] = {v.q + (sq * heads + h) * hd, acc + ((sq * heads + h) * splits + j) * hd, first, pos};
    }
    if (r0 < r1) {
      attend_queries_part<T>(c, v.tables + sq * v.max_blocks, kvh, qs, group, r0, r1 - 1, v.opt, m, l);
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
    const float sink = v.sinks ? v.sinks[i % heads] : -INFINITY;
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
      _mm256_storeu_ps(v.out + i * hd + d, _mm256_mul_ps(o, inv));
    }
  });
}

}  // namespace

void decode_blocked(const AttentionDecodeOp& op, const Cache& c, const Ctx& ctx) {
  // The kernel for head_dim 64, 128, 256 (wide_heads_here), 512 (wider_heads_here) and 96 (narrow_heads_here), on
  // the cache's element type (q8_0 and q4_0 where blocks_shared_here).
  auto run = [&](auto e) {
    using T = decltype(e);
    if (c.head_dim == 256) return run_blocked<T, 32>(op, c, ctx);
    if (c.head_dim == 512) return run_blocked<T, 64>(op, c, ctx);
    if (c.head_dim == 96) return run_blocked<T, 12>(op, c, ctx);
    (c.head_dim == 64 ? run_blocked<T, 8> : run_blocked<T, 16>)(op, c, ctx);
  };
  if (op.k_cache.dtype == DType::kQ8_0) return run(BlockQ8_0{});
  if (op.k_cache.dtype == DType::kQ4_0) return run(BlockQ4_0{});
  with_element(c.type, run);
}

void decode_grouped_split(const AttentionDecodeOp& op, const Cache& c, int64_t splits, const Ctx& ctx) {
  with_element(c.type, [&](auto e) { run_grouped_split<decltype(e)>(op, c, splits, ctx); });
}
#endif
}  // namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail
