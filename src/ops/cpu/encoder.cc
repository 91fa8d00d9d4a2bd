// The encoder operators (BERT) and pooling on the cpu: layer_norm, activation, attention_noncausal, pool. They
// run once per layer over an input that is computed in one step, so they split rows (attention: query x head
// pairs) over the stream's threads and leave the inner loops to the compiler's vectoriser; reductions keep the
// reference's order over rows, with f32 dot products inside attention (within the suite's attention bound).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which threading costs more than it saves

float activate(Activation act, float x) {
  switch (act) {
    case Activation::kSilu:
      return x * (1.0f / (1.0f + std::exp(-x)));
    case Activation::kGeluTanh: {
      constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCoefA = 0.044715f;
      return x / (1.0f + std::exp(-2.0f * kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
    }
    case Activation::kGeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Activation::kTanh:
      return std::tanh(x);
    case Activation::kSwigluOai:  // gated (moe_experts' and silu_mul's only): validate() refuses them for activation
    case Activation::kSigmoid:
      break;
  }
  return x;
}

}  // namespace

Status layer_norm(const LayerNormOp& op, const Ctx& ctx) {
  const int64_t rows = op.x.dim(0), n = op.x.dim(1);
  const float* w = data<const float>(op.weight);
  const float* b = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  const float* xs = data<const float>(op.x);
  float* outs = data<float>(op.out);
  parallel_for(
      ctx, rows,
      [&](int64_t r) {
        const float* x = xs + r * n;
        float* out = outs + r * n;
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) sum += x[j];
        const double mean = sum / static_cast<double>(n);
        double sq = 0.0;
        for (int64_t j = 0; j < n; ++j) sq += (x[j] - mean) * (x[j] - mean);
        const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + static_cast<double>(op.eps));
        // out may alias x: each element is read before it is written, and the statistics are already taken.
        for (int64_t j = 0; j < n; ++j) out[j] = static_cast<float>((x[j] - mean) * inv) * w[j] + (b ? b[j] : 0.0f);
      },
      static_cast<double>(n), kParallelMin);
  return ok_status();
}

Status activation(const ActivationOp& op, const Ctx& ctx) {
  const float* x = data<const float>(op.x);
  float* out = data<float>(op.out);
  constexpr int64_t kChunk = 4096;
  const int64_t total = op.x.numel(), chunks = (total + kChunk - 1) / kChunk;
  parallel_for(
      ctx, chunks,
      [&](int64_t c) {
        int64_t i = c * kChunk;
        const int64_t end = std::min(total, (c + 1) * kChunk);
#if defined(__AVX2__)
        // tanh (Gemma's final logit softcap: a whole vocabulary a token) eight at a time.
        if (op.act == Activation::kTanh)
          for (; i + 8 <= end; i += 8) _mm256_storeu_ps(out + i, tanh8(_mm256_loadu_ps(x + i)));
#endif
        for (; i < end; ++i) out[i] = activate(op.act, x[i]);
      },
      static_cast<double>(kChunk), kParallelMin);
  return ok_status();
}

Status attention_noncausal(const AttentionNonCausalOp& op, const Ctx& ctx) {
  const int64_t n = op.q.dim(0), heads = op.q.dim(1), hd = op.q.dim(2), kv_heads = op.k.dim(1);
  const int64_t group = heads / kv_heads;
  const float scale = op.scale > 0.0f ? op.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const float* q = data<const float>(op.q);
  const float* k = data<const float>(op.k);
  const float* v = data<const float>(op.v);
  float* out = data<float>(op.out);
  parallel_for(
      ctx, n * heads,
      [&](int64_t item) {
        const int64_t i = item / heads, h = item % heads, kvh = h / group;
        thread_local std::vector<float> p, acc;
        p.resize(static_cast<size_t>(n));
        acc.assign(static_cast<size_t>(hd), 0.0f);
        const float* qh = q + (i * heads + h) * hd;
        float max_score = -INFINITY;
        for (int64_t t = 0; t < n; ++t) {
          const float* kt = k + (t * kv_heads + kvh) * hd;
          float s = 0.0f;
          for (int64_t d = 0; d < hd; ++d) s += qh[d] * kt[d];
          s *= scale;
          p[static_cast<size_t>(t)] = s;
          max_score = std::max(max_score, s);
        }
        float sum = 0.0f;
        for (int64_t t = 0; t < n; ++t)
          sum += (p[static_cast<size_t>(t)] = std::exp(p[static_cast<size_t>(t)] - max_score));
        const float inv = 1.0f / sum;
        for (int64_t t = 0; t < n; ++t) {
          const float* vt = v + (t * kv_heads + kvh) * hd;
          const float w = p[static_cast<size_t>(t)] * inv;
          for (int64_t d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += w * vt[d];
        }
        float* oh = out + (i * heads + h) * hd;
        for (int64_t d = 0; d < hd; ++d) oh[d] = acc[static_cast<size_t>(d)];
      },
      static_cast<double>(2 * n * hd), kParallelMin);
  return ok_status();
}

Status pool(const PoolOp& op, const Ctx& /*ctx*/) {
  const int64_t n = op.x.dim(0), dim = op.x.dim(1);
  const float* x = data<const float>(op.x);
  float* out = data<float>(op.out);
  if (op.kind == PoolKind::kFirst || op.kind == PoolKind::kLast) {
    const float* row = x + (op.kind == PoolKind::kFirst ? 0 : n - 1) * dim;
    std::copy(row, row + dim, out);
    return ok_status();
  }
  std::vector<double> sum(static_cast<size_t>(dim), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < dim; ++j) sum[static_cast<size_t>(j)] += x[r * dim + j];
  for (int64_t j = 0; j < dim; ++j) out[j] = static_cast<float>(sum[static_cast<size_t>(j)] / static_cast<double>(n));
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
