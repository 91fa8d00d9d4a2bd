#include "ops/attention_timing.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <fmt/core.h>

#include "base/quant.h"
#include "base/rng.h"
#include "ops/timing_support.h"

namespace tessera::ops {
namespace {

constexpr int64_t kBlockTokens = 16;
constexpr double kCopiedBytes = 256.0 * 1024 * 1024;

}  // namespace

double AttentionTiming::best() const { return best_seconds(seconds); }

double AttentionTiming::median() const { return median_seconds(seconds); }

double AttentionTiming::cache_bytes(const AttentionShape& s) {
  const double elems = static_cast<double>(s.batch) * s.context * static_cast<double>(s.kv_heads * s.head_dim);
  return 2.0 * static_cast<double>(dtype_bytes(s.cache, 1 << 20)) / (1 << 20) * elems;
}

double AttentionTiming::multiply_adds(const AttentionShape& s) {
  // Positions seen, summed over a sequence's queries: context - queries + 1 .. context.
  const double q = s.queries, seen = q * s.context - q * (q - 1) / 2;
  return 2.0 * static_cast<double>(s.batch) * seen * static_cast<double>(s.heads * s.head_dim);
}

Result<AttentionTiming> time_attention(Device& device, const AttentionShape& s, int runs, bool resident) {
  if (s.batch < 1 || s.heads < 1 || s.kv_heads < 1 || s.head_dim < 1 || s.context < 1 || runs < 1) {
    return invalid_argument(fmt::format(
        "attention timing: batch, heads, kv heads, head_dim, context and runs must be at least 1 (got {}, {}, {}, "
        "{}, {}, {})",
        s.batch, s.heads, s.kv_heads, s.head_dim, s.context, runs));
  }
  if (s.queries < 1 || s.queries > s.context) {
    return invalid_argument(
        fmt::format("attention timing: {} new tokens do not fit a context of {} positions", s.queries, s.context));
  }
  if (s.heads % s.kv_heads != 0) {
    return invalid_argument(
        fmt::format("attention timing: {} heads do not share {} kv heads evenly", s.heads, s.kv_heads));
  }
  const DType t = s.cache;
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16 && t != DType::kQ8_0 && t != DType::kQ4_0) {
    return invalid_argument(
        fmt::format("attention timing: {} is not a KV cache type (f32, f16, bf16, q8_0, q4_0)", dtype_name(t)));
  }
  const int block = dtype_info(t).block_elems;
  if (s.head_dim % block != 0) {
    return invalid_argument(fmt::format("attention timing: head_dim {} is not a whole number of {}-element {} blocks",
                                        s.head_dim, block, dtype_name(t)));
  }
  TS_RETURN_IF_ERROR(check_timed_elements(
      static_cast<double>(s.batch) * (s.context + kBlockTokens) * static_cast<double>(s.kv_heads * s.head_dim),
      "attention timing: the cache"));
  const int64_t nq = s.queries;
  TS_RETURN_IF_ERROR(
      check_timed_elements(static_cast<double>(s.batch * nq * s.heads * s.head_dim), "attention timing: the queries"));
  const int64_t per_seq = (s.context + kBlockTokens - 1) / kBlockTokens, blocks = s.batch * per_seq;
  const int64_t row = s.kv_heads * s.head_dim, cache_elems = blocks * kBlockTokens * row;
  AttentionTiming timing;
  timing.copies = resident ? 1 : std::max(1, static_cast<int>(kCopiedBytes / AttentionTiming::cache_bytes(s) + 0.5));
  auto stream = device.create_stream();
  TimedTensors tensors(device, *stream);
  Rng rng(1);
  std::vector<float> values(static_cast<size_t>(cache_elems)),
      q(static_cast<size_t>(s.batch * nq * s.heads * s.head_dim));
  for (float& v : values) v = rng.next_f32() * 2.0f - 1.0f;
  for (float& v : q) v = rng.next_f32() * 2.0f - 1.0f;
  std::vector<uint8_t> stored(dtype_bytes(t, values.size()));
  TS_RETURN_IF_ERROR(quantize(values, t, stored.data()));
  std::vector<Tensor> k, v;
  for (int c = 0; c < timing.copies; ++c) {
    TS_ASSIGN_OR_RETURN(Tensor kc, tensors.make(t, {blocks, kBlockTokens, s.kv_heads, s.head_dim}, stored.data()));
    TS_ASSIGN_OR_RETURN(Tensor vc, tensors.make(t, {blocks, kBlockTokens, s.kv_heads, s.head_dim}, stored.data()));
    k.push_back(kc);
    v.push_back(vc);
  }
  std::vector<int32_t> tables(static_cast<size_t>(blocks)), lens(static_cast<size_t>(s.batch), s.context);
  for (int64_t i = 0; i < blocks; ++i) tables[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  TS_ASSIGN_OR_RETURN(Tensor qt, tensors.make(DType::kF32, {s.batch * nq, s.heads, s.head_dim}, q.data()));
  TS_ASSIGN_OR_RETURN(Tensor table, tensors.make(DType::kI32, {s.batch, per_seq}, tables.data()));
  TS_ASSIGN_OR_RETURN(Tensor len, tensors.make(DType::kI32, {s.batch}, lens.data()));
  TS_ASSIGN_OR_RETURN(Tensor out, tensors.make(DType::kF32, {s.batch * nq, s.heads, s.head_dim}, nullptr));
  TS_RETURN_IF_ERROR(stream->synchronize());
  // A prefill chunk per sequence: its rows of the queries and outputs, its row of the block tables.
  auto run_one = [&](size_t c) -> Status {
    if (nq == 1) return stream->run(AttentionDecodeOp{qt, k[c], v[c], table, len, out});
    for (int64_t b = 0; b < s.batch; ++b) {
      AttentionPrefillOp op{qt.rows(b * nq, nq), k[c], v[c], table.rows(b, 1).reshaped({per_seq}),
                            out.rows(b * nq, nq)};
      op.start_pos = s.context - static_cast<int32_t>(nq);
      TS_RETURN_IF_ERROR(stream->run(op));
    }
    return ok_status();
  };
  for (int r = -1; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < timing.copies; ++c) TS_RETURN_IF_ERROR(run_one(static_cast<size_t>(c)));
    TS_RETURN_IF_ERROR(stream->synchronize());
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0) timing.seconds.push_back(sec / timing.copies);
  }
  return timing;
}

}  // namespace tessera::ops
