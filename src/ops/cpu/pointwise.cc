// Row-wise and elementwise operators: embedding, rms_norm (plain and fused with the residual add), rope,
// silu*mul, add, softmax, argmax. They move a few bytes per weight byte the matrix products read, so they
// keep the reference's exact arithmetic (same order, same libm calls) and only split rows over threads:
// that keeps cpu's f32 greedy output equal to ref's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which threading costs more than it saves

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t j = 0; j < n; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(n);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int64_t j = 0; j < n; ++j) out[j] = w[j] * (ss * x[j]);
}

// Turns the first `rot` elements of each head of `hd` (rot == hd: all of them).
void rotate(float* v, int64_t heads, int64_t hd, int64_t rot, const float* cs, const float* sn, RopeLayout layout) {
  const int64_t half = rot / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* x = v + h * hd;
    for (int64_t j = 0; j < half; ++j) {
      const int64_t a = layout == RopeLayout::kInterleaved ? 2 * j : j;
      const int64_t b = layout == RopeLayout::kInterleaved ? 2 * j + 1 : j + half;
      const float x0 = x[a], x1 = x[b];
      x[a] = x0 * cs[j] - x1 * sn[j];
      x[b] = x0 * sn[j] + x1 * cs[j];
    }
  }
}

}  // namespace

Status embedding(const EmbeddingOp& op, const Ctx& ctx) {
  const int64_t vocab = op.table.dim(0), dim = op.table.dim(1);
  const auto* ids = data<const int32_t>(op.ids);
  for (int64_t i = 0; i < op.ids.dim(0); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return out_of_range(fmt::format("embedding: token id {} is outside the vocabulary [0, {})", ids[i], vocab));
    }
    float* out = data<float>(op.out) + i * dim;
    // A table in its stored type (f16, bf16, a quantised type: whole blocks per row) widens each looked-up
    // row, so a model's embedding keeps the file's size in memory (a tied classifier then shares it).
    const size_t row_bytes = dtype_bytes(op.table.dtype, static_cast<size_t>(dim));
    TS_RETURN_IF_ERROR(dequantize(data<const uint8_t>(op.table) + static_cast<size_t>(ids[i]) * row_bytes,
                                  op.table.dtype, {out, static_cast<size_t>(dim)}));
    if (op.scale != 1.0f)
      for (int64_t j = 0; j < dim; ++j) out[j] *= op.scale;
  }
  return ok_status();
}

Status rms_norm(const RmsNormOp& op, const Ctx& ctx) {
  const int64_t rows = op.x.dim(0), n = op.x.dim(1);
  parallel_for(
      ctx, rows,
      [&](int64_t r) {
        rms_norm_row(data<const float>(op.x) + r * n, data<const float>(op.weight), data<float>(op.out) + r * n, n,
                     op.eps);
      },
      static_cast<double>(n), kParallelMin);
  return ok_status();
}

Status add_rms_norm(const AddRmsNormOp& op, const Ctx& ctx) {
  const int64_t rows = op.residual.dim(0), n = op.residual.dim(1);
  parallel_for(
      ctx, rows,
      [&](int64_t r) {
        float* x = data<float>(op.residual) + r * n;
        const float* d = data<const float>(op.delta) + r * n;
        for (int64_t j = 0; j < n; ++j) x[j] += d[j];
        rms_norm_row(x, data<const float>(op.weight), data<float>(op.out) + r * n, n, op.eps);
      },
      static_cast<double>(n), kParallelMin);
  return ok_status();
}

Status rope(const RopeOp& op, const Ctx& ctx) {
  const int64_t n = op.q.dim(0), hd = op.q.dim(2), rot = op.rotated(hd), half = rot / 2;
  const auto* pos = data<const int32_t>(op.positions);
  std::vector<float> freq(static_cast<size_t>(half));
  const float* table = op.freqs.valid() ? data<const float>(op.freqs) : nullptr;
  const float mscale = table ? op.mscale : 1.0f;
  for (int64_t j = 0; j < half; ++j) {
    freq[static_cast<size_t>(j)] =
        table ? table[j] : 1.0f / std::pow(op.theta, static_cast<float>(2 * j) / static_cast<float>(rot));
  }
  parallel_for(
      ctx, n,
      [&](int64_t t) {
        std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
        for (int64_t j = 0; j < half; ++j) {
          const float angle = static_cast<float>(pos[t]) * freq[static_cast<size_t>(j)];
          cs[static_cast<size_t>(j)] = std::cos(angle);
          sn[static_cast<size_t>(j)] = std::sin(angle);
          if (table) {
            cs[static_cast<size_t>(j)] *= mscale;
            sn[static_cast<size_t>(j)] *= mscale;
          }
        }
        rotate(data<float>(op.q) + t * op.q.row_elems(), op.q.dim(1), hd, rot, cs.data(), sn.data(), op.layout);
        rotate(data<float>(op.k) + t * op.k.row_elems(), op.k.dim(1), hd, rot, cs.data(), sn.data(), op.layout);
      },
      static_cast<double>(op.q.row_elems()), kParallelMin);
  return ok_status();
}

Status silu_mul(const SiluMulOp& op, const Ctx& ctx) {
  const auto* g = data<const float>(op.gate);
  const auto* u = data<const float>(op.up);
  auto* out = data<float>(op.out);
  const int64_t n = op.gate.numel();
  if (op.act == Activation::kSigmoid) {  // ref's arithmetic; a gate of one value per row covers its row of up
    const int64_t per = n == op.up.numel() ? 1 : op.up.row_elems();
    parallel_for(
        ctx, op.up.numel(), [&](int64_t i) { out[i] = u[i] / (1.0f + std::exp(-g[i / per])); }, 1.0, kParallelMin);
    return ok_status();
  }
  if (op.act == Activation::kGeluTanh) {
    constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCoefA = 0.044715f;  // ref's arithmetic
    parallel_for(
        ctx, n,
        [&](int64_t i) {
          const float x = g[i];
          out[i] = x / (1.0f + std::exp(-2.0f * kSqrt2OverPi * x * (1.0f + kCoefA * x * x))) * u[i];
        },
        1.0, kParallelMin);
    return ok_status();
  }
#if defined(__AVX2__)
  // Eight at a time with exp8 (libm's expf per element was half of this operator's time in prefill); the
  // scalar loop takes the tail.
  constexpr int64_t kSpan = 256;  // elements per work item
  parallel_for(
      ctx, (n + kSpan - 1) / kSpan,
      [&](int64_t b) {
        const int64_t lo = b * kSpan, hi = std::min(n, lo + kSpan);
        int64_t i = lo;
        const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
        for (; i + 8 <= hi; i += 8) {
          const __m256 v = _mm256_loadu_ps(g + i);
          const __m256 e = exp8(_mm256_xor_ps(v, neg));
          const __m256 s = _mm256_mul_ps(v, _mm256_div_ps(one, _mm256_add_ps(one, e)));
          _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
        }
        for (; i < hi; ++i) {
          float v = g[i];
          v *= (1.0f / (1.0f + std::exp(-v)));
          out[i] = v * u[i];
        }
      },
      static_cast<double>(kSpan), kParallelMin);
#else
  parallel_for(
      ctx, n,
      [&](int64_t i) {
        float v = g[i];
        v *= (1.0f / (1.0f + std::exp(-v)));
        out[i] = v * u[i];
      },
      1.0, kParallelMin);
#endif
  return ok_status();
}

Status add(const AddOp& op, const Ctx& ctx) {
  const auto* a = data<const float>(op.a);
  const auto* b = data<const float>(op.b);
  auto* out = data<float>(op.out);
  const int64_t n = op.a.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  return ok_status();
}

Status softmax(const SoftmaxOp& op, const Ctx& ctx) {
  const int64_t rows = op.x.dim(0), m = op.x.dim(1);
  parallel_for(
      ctx, rows,
      [&](int64_t r) {
        const float* x = data<const float>(op.x) + r * m;
        float* out = data<float>(op.out) + r * m;
        float mx = -INFINITY;
        for (int64_t i = 0; i < m; ++i) mx = x[i] > mx ? x[i] : mx;
        float sum = 0.0f;
        for (int64_t i = 0; i < m; ++i) {
          out[i] = std::exp(x[i] - mx);
          sum += out[i];
        }
        for (int64_t i = 0; i < m; ++i) out[i] /= sum;
      },
      static_cast<double>(m), kParallelMin);
  return ok_status();
}

Status argmax(const ArgmaxOp& op, const Ctx& ctx) {
  const int64_t rows = op.x.dim(0), m = op.x.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = data<const float>(op.x) + r * m;
    int32_t best = 0;
    for (int64_t i = 1; i < m; ++i) {
      if (x[i] > x[best]) best = static_cast<int32_t>(i);
    }
    data<int32_t>(op.out)[r] = best;
  }
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
