// Timing of attention on a device, for `tessera bench attention`: the operator alone, without the weights around
// it, so a decode kernel's reading of the KV cache can be compared with the memory's read speed, and a prefill
// chunk's arithmetic with the core's FMA peak.
//
// The cache holds random values in the requested type, each sequence's positions in consecutive blocks of 16 (as a
// fresh sequence gets them), one query per head and new token. The cache is written in as many copies as make at
// least 256 MiB (one layer each), so a run reads them from memory, not from the last level cache; a run is one
// AttentionDecodeOp (a prefill chunk: one AttentionPrefillOp per sequence) on every copy, synchronised, and its time
// is per copy. A resident timing writes one copy instead, so a cache
// that fits the processor's caches is read from them: the kernel's own speed, without the memory's (its gap to the
// copied timing is what reading from memory costs).
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops {

struct AttentionShape {
  DType cache = DType::kF16;
  int64_t batch = 1, heads = 32, kv_heads = 8, head_dim = 128;
  int32_t context = 4096;  // positions each sequence sees, the new ones included
  // New tokens per sequence: 1 times decode (one AttentionDecodeOp for the batch); more time a prefill chunk, the
  // last `queries` positions of each sequence (one AttentionPrefillOp per sequence, causal).
  int32_t queries = 1;
};

struct AttentionTiming {
  std::vector<double> seconds;  // one operator's time, one per timed run (after one untimed warm-up run)
  int copies = 1;               // caches the runs rotate over
  double best() const;
  double median() const;
  // Bytes of keys and values one operator reads (batch x context x kv_heads x head_dim elements of K and of V).
  static double cache_bytes(const AttentionShape& s);
  // Multiply-adds of one run: every query head's scores and weighted sum over the positions it sees (2 x head_dim
  // per position; a prefill chunk's query at position p sees p + 1).
  static double multiply_adds(const AttentionShape& s);
};

// InvalidArgument for sizes < 1, queries > context, heads not a multiple of kv_heads, a cache type that is not a KV
// cache type (f32, f16, bf16, q8_0, q4_0) or a head_dim it cannot hold, or runs < 1; the device's own error when it
// refuses the operator.
Result<AttentionTiming> time_attention(Device& device, const AttentionShape& shape, int runs, bool resident = false);

}  // namespace tessera::ops
