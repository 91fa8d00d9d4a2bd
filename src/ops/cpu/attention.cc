// Paged KV writes and attention with an f32, f16 or bf16 cache (q8_0 / q4_0 ones outside blocks_shared_here and
// blocks_tiled_here: attention_quant.cc). Work is split over (token or sequence, head) pairs; each pair computes its
// scores eight positions at a time (eight dot products reduced together), a max-subtracted softmax, and the weighted
// sum of value rows with 64 outputs held in registers across all positions. The reference's order of operations is kept
// except for summation order inside the dot products and the softmax normalisation (multiplied by 1/sum), within the
// conformance bound. In the avx512 and avx2 builds, prefill (and decode with grouped-query heads) takes the tiled path
// of attention_tiled.cc instead, for head_dim a multiple of 64: the queries that share a kv head are multiplied against
// one widened, transposed key panel, several at a time.
//
// Long contexts (issue 31): past kKeyBlock positions both take the keys in blocks of kKeyBlock with an online
// softmax (running max and sum per query, partial outputs rescaled when the max rises, one division at the end),
// so the key panel and the score rows stay in L2 at any length. Decode items are then (sequence, kv head, range),
// the kernels of attention_decode.cc: the query heads of a kv head read each key block once, a sequence's positions
// in ranges of kDecodeRange whose partial states are combined (fixed ranges: a row's bits do not depend on the rest
// of the batch or the threads). This file chooses between them and the short-context kernels above
// (attention_decode).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "ops/cpu/attention_cache.h"
#include "ops/cpu/attention_rows.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

// f32, f16 and bf16 caches take the kernels below; the block-quantised types those of attention_quant.cc where
// blocks_shared_here / blocks_tiled_here do not say otherwise.
bool widened_here(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

using attention_detail::Cache;
using attention_detail::kKeyBlock;
using attention_detail::Query;
using attention_detail::with_element;
#if defined(__AVX2__)
using attention_detail::attend_one;
using attention_detail::attend_queries;
using attention_detail::attend_queries_part;
using attention_detail::blocks_shared_here;
using attention_detail::blocks_tiled_here;
using attention_detail::decode_blocked;
using attention_detail::decode_grouped_split;
using attention_detail::narrow_heads_here;
using attention_detail::prefetch_row;
using attention_detail::shared_heads_here;
using attention_detail::tiled_heads_here;
using attention_detail::visible;
using attention_detail::wide_heads_here;
using attention_detail::wider_heads_here;
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

// Rows of one head are a cache row apart and blocks are scattered, which the hardware prefetcher follows poorly;
// so rows are prefetched this many positions ahead (prefetch_row, attention_rows.h).
constexpr int32_t kPrefetchRows = 16;

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
    if (hd == 64 || hd == 128 || narrow_heads_here(hd, group)) {
      with_element(c.type, [&](auto e) {
        using T = decltype(e);
        (hd == 64    ? attend_one<T, 8>
         : hd == 128 ? attend_one<T, 16>
                     : attend_one<T, 12>)(c, table(i), pos(i), qh, h / group, oh, scores, opt, sink);
      });
      return;
    }
#endif
    with_element(c.type,
                 [&](auto e) { attend_head<decltype(e)>(c, table(i), pos(i), qh, h / group, oh, scores, opt, sink); });
  });
}

#if defined(__AVX2__)
// attend_queries for the cache's element type: f32, f16, bf16, or (blocks_tiled_here) q8_0 / q4_0.
void attend_queries_of(DType t, const Cache& c, const int32_t* table, int64_t kvh, const Query* qs, int64_t nq,
                       const AttentionScores& opt) {
  if (t == DType::kQ8_0) return attend_queries<BlockQ8_0>(c, table, kvh, qs, nq, opt);
  if (t == DType::kQ4_0) return attend_queries<BlockQ4_0>(c, table, kvh, qs, nq, opt);
  with_element(t, [&](auto e) { attend_queries<decltype(e)>(c, table, kvh, qs, nq, opt); });
}
#endif

}  // namespace

Status kv_write(const KvWriteOp& op, const Ctx& ctx) {
  const int64_t capacity = op.k_cache.dim(0) * op.k_cache.dim(1), row = op.k.row_elems(), n = op.k.dim(0);
  const auto* slots = data<const int32_t>(op.slots);
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] < 0 || slots[t] >= capacity) {
      return out_of_range(fmt::format("kv_write: slot {} is outside the cache [0, {})", slots[t], capacity));
    }
  }
  if (op.k_cache.dtype != DType::kF32 && op.k_cache.dtype != DType::kF16) {
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
  const bool widened = widened_here(op.k_cache.dtype) && widened_here(op.v_cache.dtype);
#if defined(__AVX2__)
  const bool blocks = blocks_tiled_here(op.k_cache.dtype, op.v_cache.dtype, op.k_cache.dim(3));
#else
  const bool blocks = false;
#endif
  if (!widened && !blocks) return attention_prefill_quant(op, ctx);
  Cache c(op.k_cache, op.v_cache);
  const int32_t* table = data<const int32_t>(op.block_table);
  const int32_t last = static_cast<int32_t>(op.start_pos + op.q.dim(0) - 1);
  TS_RETURN_IF_ERROR(check_table(c, table, op.block_table.dim(0), last));
  const int32_t start = op.start_pos;
#if defined(__AVX2__)
  if (tiled_heads_here(c.head_dim)) {
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
        attend_queries_of(op.k_cache.dtype, c, table, kvh, qs.data(), static_cast<int64_t>(qs.size()), opt);
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
      attend_queries_of(op.k_cache.dtype, c, table, h / group, qs, i1 - i0, opt);
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
  const bool widened = widened_here(op.k_cache.dtype) && widened_here(op.v_cache.dtype);
#if defined(__AVX2__)
  // q8_0 / q4_0 caches with heads of 64, 128 (and 256, 512): decode_blocked, which reads the blocks in place, where
  // attention_quant.cc's decode converted each value row once per query head (llama3.1-8b's attention, q8_0,
  // 2 threads, Zen 5: 3x slower than an f16 cache); blocks_shared_here says which types in which build.
  const bool blocks =
      blocks_shared_here(op.k_cache.dtype, op.v_cache.dtype, op.k_cache.dim(3), op.q.dim(1) / op.k_cache.dim(2));
#else
  const bool blocks = false;
#endif
  if (!widened && !blocks) return attention_decode_quant(op, ctx);
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
  // decode step 17.3 ms against 19.1-20.5 (`tessera bench step --context 512`, avx512). Grouped heads of 256 take
  // decode_blocked at every length (wide_heads_here): the avx512 build's shared kernel, 1.2-2.4x the tiled path
  // with an f16 cache and 1.2-4.3x attention_quant.cc with q8_0 / q4_0 (Gemma's 8 on 1, 2 or 4 kv heads, 256 to
  // 16384 positions, Zen 5: docs/benchmarks.md, "Decode with heads of 256"); the avx2 build's attend_range_parts,
  // 1.3-2.2x the tiled path with f16 (docs/benchmarks.md, "Heads of 256 at AVX2").
  const bool one_query_kernel = hd == 64 || hd == 128 || narrow_heads_here(hd, group),
             wide = wide_heads_here(hd, group) || ((widened || blocks) && wider_heads_here(hd, group));
  if ((one_query_kernel || wide) && group <= 64) {
    int32_t longest = 0;
    for (int64_t s = 0; s < b; ++s) longest = std::max(longest, visible(lens[s] - 1, op.scores));
    // Past a key block each sequence's positions are ranges of kDecodeRange, one item each, and the ranges' partial
    // softmax states combined after (decode_blocked). A sequence at most a key block long gets the same bits from
    // decode_blocked as from attend_all below, so which of the two a step takes does not change a row.
    if (wide || blocks || longest > kKeyBlock || shared_heads_here(group, longest)) {
      decode_blocked(op, c, ctx);
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
      decode_grouped_split(op, c, splits, ctx);
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
      attend_queries_of(c.type, c, tables + sq * max_blocks, kvh, qs, group, opt);
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
