// The paged KV cache as the cpu attention kernels read it (f32, f16 and bf16 elements; q8_0 and q4_0 blocks where
// blocks_shared_here / blocks_tiled_here), shared by attention.cc (kv_write, the one-query decode kernels, the
// operators' entry points), attention_decode.cc (long-context decode) and attention_tiled.cc (the tiled path for
// queries that share a kv head). Included inside each kernel build (TS_CPU_ISA), by those three only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "base/check.h"
#include "base/quant.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail {

struct Cache {
  const uint8_t* k;
  const uint8_t* v;
  DType type;  // of keys and values alike (ops.cc's check_kv_cache)
  int64_t num_blocks, block_tokens, kv_heads, head_dim;

  Cache(const Tensor& kc, const Tensor& vc)
      : k(data<const uint8_t>(kc)),
        v(data<const uint8_t>(vc)),
        type(kc.dtype),
        num_blocks(kc.dim(0)),
        block_tokens(kc.dim(1)),
        kv_heads(kc.dim(2)),
        head_dim(kc.dim(3)) {}

  int64_t elem(int32_t block, int64_t row, int64_t kvh) const {
    return ((static_cast<int64_t>(block) * block_tokens + row) * kv_heads + kvh) * head_dim;
  }
};

// fn(T{}) with T the C++ element of a cache of f32, f16 or bf16 values (float, uint16_t, Bf16): the kernels widen all
// three in registers (load8, widen16), each exact in f32. A block type here is a dispatch error, never read as f32.
template <typename Fn>
inline decltype(auto) with_element(DType t, Fn&& fn) {
  if (t == DType::kF16) return fn(uint16_t{});
  if (t == DType::kBF16) return fn(Bf16{});
  TS_CHECK_MSG(t == DType::kF32, "cpu attention: a cache of this type has no element kernel");
  return fn(float{});
}

// Whether a cache element type is a block of quantised values (q8_0, q4_0), which decode_blocked's kernels and the
// tiled path read in place (blocks_shared_here, blocks_tiled_here); f32, f16 and bf16 caches take every kernel.
template <typename T>
constexpr bool kBlockRows = std::is_same_v<T, BlockQ8_0> || std::is_same_v<T, BlockQ4_0>;

// The rows the kernels read, T the cache's element: float, uint16_t or Bf16 (f32, f16, bf16: a kv head's row is
// head_dim elements) or a block type (q8_0, q4_0: head_dim / 32 blocks, read in place, never widened into memory).
// row_at() is a row at an element offset (Cache::elem, row_offsets()), row16(row, j) its elements [16 j, 16 j + 16) as
// f32 lanes. A block's values are d * q in f32, exact (q has at most 8 significant bits, d 11), as attention_quant.cc
// widens them, so a quantised cache differs from an f32 cache of its values only in the order of the sums.
template <typename T>
inline const T* row_at(const T* base, int64_t off) {
  if constexpr (kBlockRows<T>) {
    return base + off / kQuantBlock;
  } else {
    return base + off;
  }
}
template <typename T>
constexpr int64_t row_bytes(int64_t hd) {
  if constexpr (kBlockRows<T>) {
    return hd / kQuantBlock * static_cast<int64_t>(sizeof(T));
  } else {
    return hd * static_cast<int64_t>(sizeof(T));
  }
}
#if defined(__AVX2__)
// Elements [8 j, 8 j + 8) of a row as f32 lanes (the avx2 build's tiled path), as row16 below.
template <typename T>
inline __m256 row8(const T* row, int j) {
  return load8(row + 8 * j);
}
inline __m256 row8(const BlockQ8_0* row, int j) {
  const BlockQ8_0& b = row[j / 4];
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * (j % 4)));
  return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}
inline __m256 row8(const BlockQ4_0* row, int j) {  // j % 4: low nibbles of bytes 0-7, 8-15, then high ones; q - 8
  const BlockQ4_0& b = row[j / 4];
  const int k = j % 4;
  const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * (k % 2)));
  const __m128i nib = _mm_and_si128(k < 2 ? raw : _mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f));
  const __m128i q = _mm_sub_epi8(nib, _mm_set1_epi8(8));
  return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}
#endif

#if defined(__AVX512F__)
// Sixteen cache elements as f32 lanes (the avx512 build's kernels of attention_tiled.cc and attention_decode.cc).
inline __m512 widen16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 widen16(const uint16_t* p) {  // masked form: GCC 12 warns on the unmasked one
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 widen16(const Bf16* p) {  // a bf16 is the top half of its f32
  const __m512i w = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
}
template <typename T>
inline __m512 row16(const T* row, int j) {
  return widen16(row + 16 * j);
}
// (Masked conversions: GCC 12 warns on the unmasked ones, see widen16.)
inline __m512 row16(const BlockQ8_0* row, int j) {
  const BlockQ8_0& b = row[j / 2];
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * (j % 2)));
  return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)),
                       _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, q)));
}
inline __m512 row16(const BlockQ4_0* row, int j) {  // elements 0-15: the low nibbles, 16-31: the high ones; q - 8
  const BlockQ4_0& b = row[j / 2];
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i nib = _mm_and_si128(j % 2 == 0 ? raw : _mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f));
  const __m128i q = _mm_sub_epi8(nib, _mm_set1_epi8(8));
  return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)),
                       _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, q)));
}
#endif

// Long contexts: past kKeyBlock positions prefill and decode take the keys in blocks of this many positions with
// an online softmax, so a block's key panel and score rows stay in L2 however long the context.
constexpr int32_t kKeyBlock = 256;
// decode_blocked's ranges: a sequence's visible positions in parts of this many (two key blocks), each one work item,
// their partial states combined in order; fixed, so that a sequence's result does not depend on its batch or threads.
constexpr int32_t kDecodeRange = 2 * kKeyBlock;

// One query of the tiled path.
struct Query {
  const float* q;
  float* out;
  int32_t first, last;     // the positions it sees
  float sink = -INFINITY;  // its head's attention sink (gpt-oss); -inf: none
};

// Whether prefill with heads of head_dim (an f32, f16 or bf16 cache) takes the tiled path (attend_queries): a
// multiple of 16 from 48, the value tile's passes of 4 (avx2: 2) vectors ending with a partial one where needed.
// Heads of 96 (Phi-3) and 48 (stories15M) took the one-query kernels (avx512: attend_one with 12 vectors a row) or
// attend_head before, at 4-12x the time (docs/benchmarks.md, "Heads of 48 and 96 on the tiled prefill"). Heads of
// 16 and 32 (test-sized models only) keep attend_head, the kernel decode runs for them, so that a prompt prefilled
// whole gives the bits it gives token by token (the hybrid and MoE engine tests check the carried state so).
constexpr bool tiled_heads_here(int64_t head_dim) { return head_dim >= 48 && head_dim % 16 == 0; }

#if defined(__AVX2__)
// Attention for queries qs[0..nq) of kv head kvh, all reading `table` (T: float, uint16_t or Bf16, the cache's f32, f16
// or bf16 elements, or BlockQ8_0 / BlockQ4_0 where blocks_tiled_here), each writing its head's output row; head_dim
// where tiled_heads_here (attention_tiled.cc).
template <typename T>
void attend_queries(const Cache& c, const int32_t* table, int64_t kvh, const Query* qs, int64_t nq,
                    const AttentionScores& opt);
// The same over keys [lo, hi] only, as one part of the queries' contexts (split across threads, combined after):
// each query's output row gets the sum of e^(logit - m[i]) v over the keys it sees there, not normalised, with
// m[i] the largest such logit and l[i] the sum of e^(logit - m[i]); no sink (the combination adds it once).
// A query that sees no key in [lo, hi] gets l[i] = 0 and an output of zeros.
template <typename T>
void attend_queries_part(const Cache& c, const int32_t* table, int64_t kvh, const Query* qs, int64_t nq, int32_t lo,
                         int32_t hi, const AttentionScores& opt, float* m, float* l);

// Positions a query at `pos` sees.
inline int32_t visible(int32_t pos, const AttentionScores& opt) {
  return opt.window > 0 ? std::min(pos + 1, opt.window) : pos + 1;
}

// Whether grouped-query decode of `count` positions goes through attend_range_shared (attention_decode.cc) below a
// key block too (the avx512 build): from 64 positions, where it overtakes attend_one per head (`tessera bench
// attention --threads 2`, 32 heads on 8 kv heads of 128, Zen 5: 0.057 against 0.083 ms at 256 positions,
// 0.023-0.024 against 0.025-0.030 at 64, but 0.019 against 0.017-0.018 at 48 and 0.011-0.013 against 0.009-0.010
// at 16).
constexpr bool shared_heads_here(int64_t group, int32_t count) {
#if defined(__AVX512F__)
  return group > 1 && count >= 64;
#else
  return group < 0 && count < 0;
#endif
}

// Whether prefill with a q8_0 or q4_0 cache (keys and values of one type, head_dim a multiple of 32 where
// tiled_heads_here) takes the tiled path (attend_queries, the avx512 and avx2 builds): its key panel is widened from
// the blocks once per item and each value row once per tile of queries, where attention_quant.cc's prefill converted
// every value row once per query. Heads of 96 (Phi-3) joined the multiples of 64 here with narrow_heads_here's decode
// (docs/benchmarks.md, "Phi-3's heads of 96 with a q8_0 or q4_0 cache").
constexpr bool blocks_tiled_here(DType k, DType v, int64_t head_dim) {
  return k == v && (k == DType::kQ8_0 || k == DType::kQ4_0) && head_dim % kQuantBlock == 0 &&
         tiled_heads_here(head_dim);
}

// Whether decode with heads of 256 (Gemma 2-4, Qwen3.5's attention layers) goes through decode_blocked, every cache
// type and context length, 2 to 64 query heads per kv head: the avx512 build's shared kernel, the avx2 build's
// attend_range_parts (two parts of 128).
constexpr bool wide_heads_here(int64_t head_dim, int64_t group) { return head_dim == 256 && group > 1 && group <= 64; }

// Whether decode with heads of 512 (Gemma 4's global layers), 2 to 64 query heads per kv head, goes through
// decode_blocked, every context length: the avx512 build's attend_range_shared_parts (two parts of 256, each row's
// part widened once for up to four heads), the avx2 build's attend_range_parts (four parts of 128). f32, f16 and bf16
// caches, and q8_0 / q4_0 ones where blocks_shared_here.
constexpr bool wider_heads_here(int64_t head_dim, int64_t group) { return head_dim == 512 && group > 1 && group <= 64; }

// Whether decode with one query head per kv head of 96 (phi3-mini) takes the one-query kernels of head_dim 64 and
// 128 (attend_one, attend_range with 12 vectors a row; f32, f16 and bf16 caches, and q8_0 / q4_0 ones where
// blocks_shared_here). The avx512 build's 32 vector registers hold such a row; the avx2 build's 16 do not (its query
// and accumulators spill), and still these kernels took half attend_head's time there (docs/benchmarks.md, "Heads of
// 48 and 96 on the tiled prefill"). Prefill takes the tiled path (tiled_heads_here, blocks_tiled_here).
constexpr bool narrow_heads_here(int64_t head_dim, int64_t group) { return head_dim == 96 && group == 1; }

// Whether decode with a q8_0 or q4_0 cache (keys and values of one type, heads of 64 and 128, or 256 where
// wide_heads_here, up to 64 query heads per kv head) goes through decode_blocked, which reads the blocks in place:
// grouped heads through the avx512 build's shared kernel (a block row widened once for up to four query heads), one
// head per kv head and the avx2 build through attend_range / attend_one (row8), where attention_quant.cc's decode
// converted each row into memory once per query head. `tessera bench attention --threads 2`, Zen 5, 4096 positions:
// q8_0 at 32 heads on 32 kv heads of 128 4.4-4.6 -> 1.8-1.9 ms (avx512), 1.9-2.0 ms (avx2); 32 on 8 at avx2 2.3 -> 1.4
// ms. The avx2 build keeps q4_0 on attention_quant.cc: its nibbles widened eight at a time per head measured slower
// there with grouped heads (14 on 2 of 64 at 1024 positions, 0.088-0.100 against 0.130-0.150 ms).
// Heads of 256 with q8_0 in the avx2 build only in pairs (Gemma 2): with 4 or 8 on a kv head, attention_quant.cc's
// one widening of each row for all of them beat attend_range_parts' per-head one at 256 positions and, with 4, at
// every length (8 on 2 kv heads at 4096: 0.52-0.59 against 0.68 ms; 8 on 4 at 4096, pairs: 2.4-2.9 against 0.71-0.75).
// Heads of 512 (wider_heads_here) with q8_0 and q4_0, and with q8_0 in the avx2 build, at every group: 2.3-4.7x
// attention_quant.cc in the avx512 build, 1.0-3.7x in the avx2 one (level with 8 heads on each of 2 kv heads;
// docs/benchmarks.md, "Gemma 4's heads of 512 with a q8_0 or q4_0 cache"); q4_0 in the avx2 build
// in pairs only (with 4 or 8 on a kv head its one widening per row beat attend_range_parts there too: 8 on 2 kv heads
// at 4096, 1.45-1.52 against 1.67-1.71 ms; pairs, 32 on 16: 18.0-19.4 against 7.2 ms). Heads of 96 (narrow_heads_here)
// with q8_0 and q4_0 in both builds: attention_quant.cc has no register kernel for their values (32 on 32 kv heads
// at 2000 positions, 2 threads: q8_0 2.3-2.8 -> 1.0-1.1 ms, q4_0 2.4-2.7 -> 1.1-1.2); q4_0 with one head per kv head
// of 64 or 128 stays there in the avx2 build (level or 5% ahead).
constexpr bool blocks_shared_here(DType k, DType v, int64_t head_dim, int64_t group) {
#if defined(__AVX512F__)
  const bool type = k == DType::kQ8_0 || k == DType::kQ4_0,
             wide = wide_heads_here(head_dim, group) || wider_heads_here(head_dim, group);
#else
  const bool type = k == DType::kQ8_0 || (k == DType::kQ4_0 && (narrow_heads_here(head_dim, group) ||
                                                                (wider_heads_here(head_dim, group) && group == 2))),
             wide = (wide_heads_here(head_dim, group) && group == 2) || wider_heads_here(head_dim, group);
#endif
  return k == v && type && (head_dim == 64 || head_dim == 128 || narrow_heads_here(head_dim, group) || wide) &&
         group >= 1 && group <= 64;
}

// Decode of head_dim 64 or 128 (and 96, 256 and 512 where narrow_heads_here, wide_heads_here and wider_heads_here)
// in items of (sequence, kv head, range), a range kDecodeRange of the sequence's visible positions; a sequence at
// most one key block long takes attend_one per head unless shared_heads_here; f32, f16 and bf16 caches, and q8_0 /
// q4_0 ones where blocks_shared_here (attention_decode.cc).
void decode_blocked(const AttentionDecodeOp& op, const Cache& c, const Ctx& ctx);
// The same for grouped-query heads of other multiples of 64, through attend_queries_part (attention_decode.cc).
void decode_grouped_split(const AttentionDecodeOp& op, const Cache& c, int64_t splits, const Ctx& ctx);
#endif

}  // namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail
