// Row-wise and elementwise operators: embedding, rms_norm (plain and fused with the residual add), rope,
// silu*mul, add, softmax, argmax. They move a few bytes per weight byte the matrix products read, so they
// keep the reference's arithmetic (same order, same libm calls; where FMA is enabled, the compiler fuses the
// norm's x * x + sum) and only split rows over threads, or run rows side by side in vector lanes with each
// lane doing a row's scalar operations (rms_norm_rows): that keeps cpu's f32 greedy output equal to ref's.
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

// The scale of a row from its sum of squares.
inline float rms_scale(float ss, int64_t n, float eps) {
  ss /= static_cast<float>(n);
  ss += eps;
  return 1.0f / std::sqrt(ss);
}

// out = w * (scale * x): two roundings per element in every form, so the vector loop has the scalar loop's bits.
inline void scale_row(const float* x, const float* w, float ss, float* out, int64_t n) {
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(ss);
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_loadu_ps(w + j), _mm512_mul_ps(s, _mm512_loadu_ps(x + j))));
#elif defined(__AVX2__)
  const __m256 s = _mm256_set1_ps(ss);
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_mul_ps(s, _mm256_loadu_ps(x + j))));
#endif
  for (; j < n; ++j) out[j] = w[j] * (ss * x[j]);
}

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
  float ss = 0.0f;
#if defined(__FMA__)
  for (int64_t j = 0; j < n; ++j) ss = std::fma(x[j], x[j], ss);  // what GCC made of `ss += x * x` here anyway
#else
  for (int64_t j = 0; j < n; ++j) ss += x[j] * x[j];
#endif
  scale_row(x, w, rms_scale(ss, n, eps), out, n);
}

// Rows normalised kNormRows at a time: a row's sum of squares is one chain of dependent additions (four cycles
// each, the whole of a prefill row's norm time), so in the vector builds kNormRows rows run their chains side by
// side, one row per lane, each element of a row gathered from its row. Each lane does what rms_norm_row does in
// the same build (one fused multiply-add per element, in element order), so every row has the same bits whatever
// the batch (CpuNorm.EachRowHasTheSameBitsInEveryBatchSize).
#if defined(__AVX512F__)
#define TS_NORM_LANES 1
constexpr int64_t kNormRows = 16;
inline void sum_squares_rows(const float* x, int64_t n, float* ss) {
  const __m512i offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int>(n)));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    // The masked form: GCC 12 warns on the unmasked gather's undefined pass-through (see widen16,
    // attention_cache.h).
    const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, offs, x + j, 4);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  _mm512_storeu_ps(ss, acc);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define TS_NORM_LANES 1
constexpr int64_t kNormRows = 8;
inline void sum_squares_rows(const float* x, int64_t n, float* ss) {
  const __m256i offs =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(n)));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m256 v = _mm256_i32gather_ps(x + j, offs, 4);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  _mm256_storeu_ps(ss, acc);
}
#else
constexpr int64_t kNormRows = 1;  // one row at a time: rms_norm_row
#endif

// Rows [r0, r1) of x normalised into out (both `n` floats a row); `x` rows of kNormRows at a time where whole.
void rms_norm_rows(const float* x, const float* w, float* out, int64_t r0, int64_t r1, int64_t n, float eps) {
  int64_t r = r0;
  // (kNormRows - 1) * n must stay an int32 gather offset.
#if defined(TS_NORM_LANES)
  if (n < (int64_t{1} << 26)) {
    for (; r + kNormRows <= r1; r += kNormRows) {
      float ss[kNormRows];
      sum_squares_rows(x + r * n, n, ss);
      for (int64_t i = 0; i < kNormRows; ++i)
        scale_row(x + (r + i) * n, w, rms_scale(ss[i], n, eps), out + (r + i) * n, n);
    }
  }
#endif
  for (; r < r1; ++r) rms_norm_row(x + r * n, w, out + r * n, n, eps);
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
      ctx, (rows + kNormRows - 1) / kNormRows,
      [&](int64_t g) {
        rms_norm_rows(data<const float>(op.x), data<const float>(op.weight), data<float>(op.out), g * kNormRows,
                      std::min(rows, (g + 1) * kNormRows), n, op.eps);
      },
      static_cast<double>(n * kNormRows), kParallelMin);
  return ok_status();
}

Status add_rms_norm(const AddRmsNormOp& op, const Ctx& ctx) {
  const int64_t rows = op.residual.dim(0), n = op.residual.dim(1);
  parallel_for(
      ctx, (rows + kNormRows - 1) / kNormRows,
      [&](int64_t g) {
        const int64_t r0 = g * kNormRows, r1 = std::min(rows, r0 + kNormRows);
        float* x = data<float>(op.residual);
        const float* d = data<const float>(op.delta);
        for (int64_t j = r0 * n; j < r1 * n; ++j) x[j] += d[j];
        rms_norm_rows(x, data<const float>(op.weight), data<float>(op.out), r0, r1, n, op.eps);
      },
      static_cast<double>(n * kNormRows), kParallelMin);
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
  // GELU (tanh form, ref's arithmetic) is x / (1 + e^z) with z = -2 sqrt(2/pi) x (1 + 0.044715 x^2); silu is z = -x.
  const bool gelu = op.act == Activation::kGeluTanh;
  constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCoefA = 0.044715f;
  auto one_value = [gelu](float x) {
    const float z = gelu ? -2.0f * kSqrt2OverPi * x * (1.0f + kCoefA * x * x) : -x;
    return gelu ? x / (1.0f + std::exp(z)) : x * (1.0f / (1.0f + std::exp(z)));
  };
#if defined(__AVX2__)
  // Eight at a time with exp8 (libm's expf per element was half of this operator's time in prefill, and all of
  // Gemma's GELU in decode); the scalar loop takes the tail.
  constexpr int64_t kSpan = 256;  // elements per work item
  parallel_for(
      ctx, (n + kSpan - 1) / kSpan,
      [&](int64_t b) {
        const int64_t lo = b * kSpan, hi = std::min(n, lo + kSpan);
        int64_t i = lo;
        const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
        const __m256 c = _mm256_set1_ps(-2.0f * kSqrt2OverPi), a = _mm256_set1_ps(kCoefA);
        for (; i + 8 <= hi; i += 8) {
          const __m256 v = _mm256_loadu_ps(g + i);
          __m256 s;
          if (gelu) {
            const __m256 inner = _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(a, v), v));
            const __m256 e = exp8(_mm256_mul_ps(_mm256_mul_ps(c, v), inner));
            s = _mm256_div_ps(v, _mm256_add_ps(one, e));
          } else {
            const __m256 e = exp8(_mm256_xor_ps(v, neg));
            s = _mm256_mul_ps(v, _mm256_div_ps(one, _mm256_add_ps(one, e)));
          }
          _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
        }
        for (; i < hi; ++i) out[i] = one_value(g[i]) * u[i];
      },
      static_cast<double>(kSpan), kParallelMin);
#else
  parallel_for(
      ctx, n, [&](int64_t i) { out[i] = one_value(g[i]) * u[i]; }, 1.0, kParallelMin);
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

Status scale(const ScaleOp& op, const Ctx& ctx) {
  const auto* x = data<const float>(op.x);
  auto* out = data<float>(op.out);
  const int64_t n = op.x.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * op.scale;
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
