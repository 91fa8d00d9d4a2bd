// Paged KV writes and attention with an f32 or f16 cache. Work is split over (token or sequence, head)
// pairs; each pair computes its scores eight positions at a time (eight dot products reduced together), a
// max-subtracted softmax, and the weighted sum of value rows with 64 outputs held in registers across all
// positions. The reference's order of operations is kept except for summation order inside the dot products
// and the softmax normalisation (multiplied by 1/sum), within the conformance bound.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

struct Cache {
  const uint8_t* k;
  const uint8_t* v;
  bool f16;
  int64_t num_blocks, block_tokens, kv_heads, head_dim;

  Cache(const Tensor& kc, const Tensor& vc)
      : k(data<const uint8_t>(kc)),
        v(data<const uint8_t>(vc)),
        f16(kc.dtype == DType::kF16),
        num_blocks(kc.dim(0)),
        block_tokens(kc.dim(1)),
        kv_heads(kc.dim(2)),
        head_dim(kc.dim(3)) {}

  int64_t elem(int32_t block, int64_t row, int64_t kvh) const {
    return ((static_cast<int64_t>(block) * block_tokens + row) * kv_heads + kvh) * head_dim;
  }
};

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
  // hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, x6+x7, y4+y5, y6+y7]
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
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
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) o[u] = _mm256_fmadd_ps(pv, load8(v + 8 * u), o[u]);
  }
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u) _mm256_storeu_ps(out + col + 8 * u, o[u]);
}
#endif

template <typename T>
void attend_head(const Cache& c, const int32_t* table, int32_t pos, const float* q, int64_t kvh, float* out,
                 std::vector<float>& scores, const AttentionScores& opt) {
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
  float sum = 0.0f;
  for (t = 0; t < count; ++t) {
    scores[static_cast<size_t>(t)] = std::exp(scores[static_cast<size_t>(t)] - max_score);
    sum += scores[static_cast<size_t>(t)];
  }
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
                const AttentionScores& opt, const Ctx& ctx) {
  const int64_t group = n_heads / c.kv_heads, hd = c.head_dim, work = count * n_heads;
  // Items are claimed in chunks by whichever thread is free (worker_pool.h), so uneven contexts balance.
  parallel_for(ctx, work, [&](int64_t wi) {
    thread_local std::vector<float> scores;
    const int64_t i = wi / n_heads, h = wi % n_heads;
    const float* qh = q + (i * n_heads + h) * hd;
    float* oh = out + (i * n_heads + h) * hd;
    if (c.f16) {
      attend_head<uint16_t>(c, table(i), pos(i), qh, h / group, oh, scores, opt);
    } else {
      attend_head<float>(c, table(i), pos(i), qh, h / group, oh, scores, opt);
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
  Cache c(op.k_cache, op.v_cache);
  const int32_t* table = data<const int32_t>(op.block_table);
  const int32_t last = static_cast<int32_t>(op.start_pos + op.q.dim(0) - 1);
  TS_RETURN_IF_ERROR(check_table(c, table, op.block_table.dim(0), last));
  const int32_t start = op.start_pos;
  attend_all(
      c, op.q.dim(0), op.q.dim(1), data<const float>(op.q), data<float>(op.out),
      [start](int64_t i) { return static_cast<int32_t>(start + i); }, [table](int64_t) { return table; }, op.scores,
      ctx);
  return ok_status();
}

Status attention_decode(const AttentionDecodeOp& op, const Ctx& ctx) {
  Cache c(op.k_cache, op.v_cache);
  const int64_t b = op.q.dim(0), max_blocks = op.block_tables.dim(1);
  const auto* lens = data<const int32_t>(op.context_lens);
  const auto* tables = data<const int32_t>(op.block_tables);
  for (int64_t s = 0; s < b; ++s) {
    if (lens[s] < 1) return out_of_range(fmt::format("attention_decode: context length {} of sequence {}", lens[s], s));
    TS_RETURN_IF_ERROR(check_table(c, tables + s * max_blocks, max_blocks, lens[s] - 1));
  }
  attend_all(
      c, b, op.q.dim(1), data<const float>(op.q), data<float>(op.out), [lens](int64_t i) { return lens[i] - 1; },
      [tables, max_blocks](int64_t i) { return tables + i * max_blocks; }, op.scores, ctx);
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
