// Paged KV writes and attention (prefill: causal over one sequence; decode: one token per sequence).
// Scores are dot(q, k) / sqrt(head_dim), softmax subtracts the maximum and divides by the sum, and values
// are accumulated position by position: run.c's order exactly. An f16, bf16, q8_0 or q4_0 cache is stored with
// base/quant.h's rounding (quantize(): q8_0 and q4_0 as ggml's reference quantisers, one block of 32 elements of a
// kv head's row with an f16 scale) and each kv head's row is widened (dequantize()) just before the same
// arithmetic, so the caches differ from f32 only by that rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/core.h>

#include "base/quant.h"
#include "ops/ref/kernels.h"

namespace tessera::ops::ref {
namespace {

struct CacheView {
  const uint8_t* k;
  const uint8_t* v;
  DType dtype;
  int64_t num_blocks, block_tokens, kv_heads, head_dim;
  size_t block_elems, block_bytes;          // the cache type's storage block (1 element for f32, f16, bf16)
  mutable std::vector<float> k_row, v_row;  // widened rows of a cache that is not f32

  explicit CacheView(const Tensor& kc, const Tensor& vc)
      : k(data<const uint8_t>(kc)),
        v(data<const uint8_t>(vc)),
        dtype(kc.dtype),
        num_blocks(kc.dim(0)),
        block_tokens(kc.dim(1)),
        kv_heads(kc.dim(2)),
        head_dim(kc.dim(3)),
        block_elems(static_cast<size_t>(dtype_info(kc.dtype).block_elems)),
        block_bytes(static_cast<size_t>(dtype_info(kc.dtype).block_bytes)),
        k_row(static_cast<size_t>(head_dim)),
        v_row(static_cast<size_t>(head_dim)) {}

  int64_t row(int32_t block, int64_t pos_in_block, int64_t kv_head) const {
    return ((static_cast<int64_t>(block) * block_tokens + pos_in_block) * kv_heads + kv_head) * head_dim;
  }
  // The f32 values of one kv head's row; unless f32 the pointer is valid until the next call for the same tensor.
  const float* k_at(int64_t elem) const { return at(k, elem, k_row); }
  const float* v_at(int64_t elem) const { return at(v, elem, v_row); }

 private:
  const float* at(const uint8_t* base, int64_t elem, std::vector<float>& scratch) const {
    if (dtype == DType::kF32) return reinterpret_cast<const float*>(base) + elem;
    // validate() keeps head_dim a multiple of the block size, so a row starts on a block.
    TS_CHECK(dequantize(base + static_cast<size_t>(elem) / block_elems * block_bytes, dtype, scratch).ok());
    return scratch.data();
  }
};

Status check_cache_dtype(const Tensor& kc) {
  if (!kv_cache_supported(kc.dtype))
    return unimplemented(
        fmt::format("ref keeps the KV cache in f32, f16, bf16, q8_0 or q4_0, not {}", dtype_name(kc.dtype)));
  return ok_status();
}

// Attention of one query token at position `pos` (attending to 0..pos) of a sequence with `table`.
// `scores` is scratch of at least pos + 1 floats.
Status attend_one(const CacheView& c, const int32_t* table, int64_t table_len, int32_t pos, const float* q,
                  int64_t n_heads, float* out, std::vector<float>& scores, const AttentionScores& opt,
                  const float* sinks) {
  const int64_t hd = c.head_dim, group = n_heads / c.kv_heads;
  const int64_t n_blocks_needed = pos / c.block_tokens + 1;
  if (n_blocks_needed > table_len)
    return out_of_range(fmt::format("attention: position {} is beyond the block table", pos));
  for (int64_t b = 0; b < n_blocks_needed; ++b) {
    if (table[b] < 0 || table[b] >= c.num_blocks) {
      return out_of_range(fmt::format("attention: block {} is outside the cache [0, {})", table[b], c.num_blocks));
    }
  }
  const float denom = std::sqrt(static_cast<float>(hd));
  // A sliding window starts the visible positions later; positions before `first` are never read.
  const int32_t first = opt.window > 0 ? std::max(0, pos - opt.window + 1) : 0;
  scores.resize(static_cast<size_t>(pos) + 1);
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* qh = q + h * hd;
    const int64_t kvh = h / group;
    float max_score = -INFINITY;
    for (int32_t t = first; t <= pos; ++t) {
      const float* k = c.k_at(c.row(table[t / c.block_tokens], t % c.block_tokens, kvh));
      float s = 0.0f;
      for (int64_t i = 0; i < hd; ++i) s += qh[i] * k[i];
      if (opt.scale > 0.0f) {
        s *= opt.scale;
      } else {
        s /= denom;
      }
      if (opt.softcap > 0.0f) s = opt.softcap * std::tanh(s / opt.softcap);
      scores[static_cast<size_t>(t)] = s;
      if (s > max_score) max_score = s;
    }
    // A sink is one more logit in the softmax that reads no value (without one, -inf adds exactly 0).
    const float sink = sinks ? sinks[h] : -INFINITY;
    max_score = std::max(max_score, sink);
    float sum = 0.0f;
    for (int32_t t = first; t <= pos; ++t) {
      scores[static_cast<size_t>(t)] = std::exp(scores[static_cast<size_t>(t)] - max_score);
      sum += scores[static_cast<size_t>(t)];
    }
    sum += std::exp(sink - max_score);
    for (int32_t t = first; t <= pos; ++t) scores[static_cast<size_t>(t)] /= sum;
    float* oh = out + h * hd;
    std::memset(oh, 0, static_cast<size_t>(hd) * sizeof(float));
    for (int32_t t = first; t <= pos; ++t) {
      const float* v = c.v_at(c.row(table[t / c.block_tokens], t % c.block_tokens, kvh));
      const float a = scores[static_cast<size_t>(t)];
      for (int64_t i = 0; i < hd; ++i) oh[i] += a * v[i];
    }
  }
  return ok_status();
}

}  // namespace

bool kv_cache_supported(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 || t == DType::kQ4_0;
}

Status run_kv_write(const KvWriteOp& op) {
  TS_RETURN_IF_ERROR(check_cache_dtype(op.k_cache));
  const int64_t capacity = op.k_cache.dim(0) * op.k_cache.dim(1);
  const int64_t row = op.k.row_elems();
  const size_t row_bytes = dtype_bytes(op.k_cache.dtype, static_cast<size_t>(row));
  const auto* slots = data<const int32_t>(op.slots);
  for (int64_t t = 0; t < op.k.dim(0); ++t) {
    if (slots[t] < 0 || slots[t] >= capacity) {
      return out_of_range(fmt::format("kv_write: slot {} is outside the cache [0, {})", slots[t], capacity));
    }
    // One position's row (every kv head) converted as a whole: a quantised row is kv_heads * head_dim / 32 blocks.
    const size_t at = static_cast<size_t>(slots[t]) * row_bytes;
    const std::span<const float> k(data<const float>(op.k) + t * row, static_cast<size_t>(row));
    const std::span<const float> v(data<const float>(op.v) + t * row, static_cast<size_t>(row));
    TS_RETURN_IF_ERROR(quantize(k, op.k_cache.dtype, data<uint8_t>(op.k_cache) + at));
    TS_RETURN_IF_ERROR(quantize(v, op.v_cache.dtype, data<uint8_t>(op.v_cache) + at));
  }
  return ok_status();
}

Status run_attention_prefill(const AttentionPrefillOp& op) {
  TS_RETURN_IF_ERROR(check_cache_dtype(op.k_cache));
  CacheView c(op.k_cache, op.v_cache);
  std::vector<float> scores;
  const int64_t row = op.q.row_elems();
  for (int64_t t = 0; t < op.q.dim(0); ++t) {
    TS_RETURN_IF_ERROR(attend_one(c, data<const int32_t>(op.block_table), op.block_table.dim(0),
                                  static_cast<int32_t>(op.start_pos + t), data<const float>(op.q) + t * row,
                                  op.q.dim(1), data<float>(op.out) + t * row, scores, op.scores,
                                  op.sinks.valid() ? data<const float>(op.sinks) : nullptr));
  }
  return ok_status();
}

Status run_attention_decode(const AttentionDecodeOp& op) {
  TS_RETURN_IF_ERROR(check_cache_dtype(op.k_cache));
  CacheView c(op.k_cache, op.v_cache);
  std::vector<float> scores;
  const int64_t row = op.q.row_elems(), max_blocks = op.block_tables.dim(1);
  const auto* lens = data<const int32_t>(op.context_lens);
  for (int64_t s = 0; s < op.q.dim(0); ++s) {
    if (lens[s] < 1) return out_of_range(fmt::format("attention_decode: context length {} of sequence {}", lens[s], s));
    TS_RETURN_IF_ERROR(attend_one(c, data<const int32_t>(op.block_tables) + s * max_blocks, max_blocks, lens[s] - 1,
                                  data<const float>(op.q) + s * row, op.q.dim(1), data<float>(op.out) + s * row, scores,
                                  op.scores, op.sinks.valid() ? data<const float>(op.sinks) : nullptr));
  }
  return ok_status();
}

}  // namespace tessera::ops::ref
