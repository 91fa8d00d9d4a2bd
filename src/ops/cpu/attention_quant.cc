// Paged attention over a KV cache of bf16 or block-quantised rows (q8_0, q4_0: llama.cpp's -ctk / -ctv types).
//
// A cache row of one kv head is head_dim elements: head_dim / 32 blocks of 32 values with one f16 scale each
// (validate() refuses a head_dim that does not divide). The kernel never widens the cache: a work item widens one
// row at a time into a head_dim-float buffer that stays in L1, uses it for every query of the item that sees that
// position, and moves on, so the bytes read from memory per position are the quantised row's (34 bytes per 32
// values for q8_0, 18 for q4_0, against 64 for f16).
//
// A work item is the queries that read the same kv head through the same block table: for decode one sequence's
// query heads of a kv head (the grouped-query heads share each widened row), for prefill a chunk of a sequence's
// tokens times those heads. Per query: scores q.k / sqrt(head_dim) (or * scale), soft-capping, the visible
// positions of a window, a sink logit, a max-subtracted softmax with std::exp normalised by 1/sum, then the
// weighted sum of widened value rows position by position: ref's order of operations but for the summation order
// inside the dot products, within the conformance bound. Widening is exact (d * q in f32), so the kernel's result
// differs from an f32 cache holding the widened values only by that summation order.
#include <algorithm>
#include <cmath>
#include <cstring>
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

  // The index of kv head kvh's row at position t of a sequence with `table`, in rows of one kv head.
  int64_t row(const int32_t* table, int32_t t, int64_t kvh) const {
    return (static_cast<int64_t>(table[t / block_tokens]) * block_tokens + t % block_tokens) * kv_heads + kvh;
  }
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

// n values of one row (n a multiple of 32 for the block types) into dst, exactly as base/quant.h's dequantize().
void widen_row(const uint8_t* src, DType t, int64_t n, float* dst) {
  if (t == DType::kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
    for (int64_t i = 0; i < n / kQuantBlock; ++i, dst += kQuantBlock) {
      const float d = f16_to_f32(b[i].d);
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
      const float d = f16_to_f32(b[i].d);
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
  TS_CHECK(dequantize(src, t, {dst, static_cast<size_t>(n)}).ok());  // f32, f16, bf16
}

struct QQuery {
  const float* q;
  float* out;
  int32_t first, last;     // the positions it sees
  float sink = -INFINITY;  // its head's attention sink (gpt-oss); -inf: none
};

// Queries qs[0..nq) of kv head kvh, all reading `table`.
void attend_group(const QCache& c, const int32_t* table, int64_t kvh, const QQuery* qs, int64_t nq,
                  const AttentionScores& opt) {
  thread_local std::vector<float> s, row;
  const int64_t hd = c.head_dim;
  int32_t lo = qs[0].first, hi = qs[0].last;
  for (int64_t g = 1; g < nq; ++g) {
    lo = std::min(lo, qs[g].first);
    hi = std::max(hi, qs[g].last);
  }
  const int64_t span = hi - lo + 1;
  s.resize(static_cast<size_t>(nq * span));
  row.resize(static_cast<size_t>(hd));
  const float denom = std::sqrt(static_cast<float>(hd));
  const bool scaled = opt.scale > 0.0f;
  for (int32_t t = lo; t <= hi; ++t) {
    widen_row(c.k_row(c.row(table, t, kvh)), c.k_type, hd, row.data());
    for (int64_t g = 0; g < nq; ++g) {
      if (t < qs[g].first || t > qs[g].last) continue;
      const float d = dot(row.data(), qs[g].q, hd);
      s[static_cast<size_t>(g * span + t - lo)] = scaled ? d * opt.scale : d / denom;
    }
  }
  for (int64_t g = 0; g < nq; ++g) {
    float* sg = s.data() + g * span - lo;  // sg[t] for t in [first, last]
    const int32_t a = qs[g].first, b = qs[g].last;
    if (opt.softcap > 0.0f) {
      for (int32_t t = a; t <= b; ++t) sg[t] = opt.softcap * std::tanh(sg[t] / opt.softcap);
    }
    float mx = qs[g].sink;  // a sink is one more logit; -inf without one changes nothing
    for (int32_t t = a; t <= b; ++t) mx = std::max(mx, sg[t]);
    float sum = 0.0f;
    for (int32_t t = a; t <= b; ++t) {
      sg[t] = std::exp(sg[t] - mx);
      sum += sg[t];
    }
    sum += std::exp(qs[g].sink - mx);
    const float inv = 1.0f / sum;
    for (int32_t t = a; t <= b; ++t) sg[t] *= inv;
    std::memset(qs[g].out, 0, static_cast<size_t>(hd) * sizeof(float));
  }
  for (int32_t t = lo; t <= hi; ++t) {
    widen_row(c.v_row(c.row(table, t, kvh)), c.v_type, hd, row.data());
    for (int64_t g = 0; g < nq; ++g) {
      if (t < qs[g].first || t > qs[g].last) continue;
      axpy(s[static_cast<size_t>(g * span + t - lo)], row.data(), qs[g].out, hd);
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
