// The f32/f16 paged KV cache as the cpu attention kernels read it, shared by attention.cc (kv_write, the
// one-query decode kernels, long-context decode, the operators' entry points) and attention_tiled.cc (the tiled
// path for queries that share a kv head). Included inside each kernel build (TS_CPU_ISA), by those two only.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/cpu/kernels.h"

namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail {

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

// Long contexts: past kKeyBlock positions prefill and decode take the keys in blocks of this many positions with
// an online softmax, so a block's key panel and score rows stay in L2 however long the context.
constexpr int32_t kKeyBlock = 256;

// One query of the tiled path.
struct Query {
  const float* q;
  float* out;
  int32_t first, last;     // the positions it sees
  float sink = -INFINITY;  // its head's attention sink (gpt-oss); -inf: none
};

#if defined(__AVX2__)
// Attention for queries qs[0..nq) of kv head kvh, all reading `table` (T: float or uint16_t, the cache's f32 or
// f16 elements), each writing its head's output row; head_dim a multiple of 64 (attention_tiled.cc).
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
#endif

}  // namespace tessera::ops::cpu::TS_CPU_ISA::attention_detail
