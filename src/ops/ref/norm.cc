// Embedding lookup and RMS normalisation (plain and fused with the residual add).
#include <cmath>
#include <cstring>

#include <fmt/core.h>

#include "base/quant.h"
#include "ops/ref/kernels.h"

namespace tessera::ops::ref {
namespace {

// run.c's rmsnorm, including its operation order: weight * (inv_rms * x).
void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t j = 0; j < n; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(n);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int64_t j = 0; j < n; ++j) out[j] = w[j] * (ss * x[j]);
}

}  // namespace

Status run_embedding(const EmbeddingOp& op) {
  const int64_t vocab = op.table.dim(0), dim = op.table.dim(1);
  const auto* table = data<const float>(op.table);
  const auto* ids = data<const int32_t>(op.ids);
  auto* out = data<float>(op.out);
  for (int64_t i = 0; i < op.ids.dim(0); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return out_of_range(fmt::format("embedding: token id {} is outside the vocabulary [0, {})", ids[i], vocab));
    }
    // A row of a quantised (or f16/bf16) table is whole blocks: widened on its own.
    const size_t row_bytes = dtype_bytes(op.table.dtype, static_cast<size_t>(dim));
    TS_RETURN_IF_ERROR(dequantize(reinterpret_cast<const uint8_t*>(table) + static_cast<size_t>(ids[i]) * row_bytes,
                                  op.table.dtype, {out + i * dim, static_cast<size_t>(dim)}));
    if (op.scale != 1.0f)
      for (int64_t j = 0; j < dim; ++j) out[i * dim + j] *= op.scale;
  }
  return ok_status();
}

Status run_rms_norm(const RmsNormOp& op) {
  const int64_t n = op.x.dim(1);
  for (int64_t r = 0; r < op.x.dim(0); ++r) {
    rms_norm_row(data<const float>(op.x) + r * n, data<const float>(op.weight), data<float>(op.out) + r * n, n, op.eps);
  }
  return ok_status();
}

Status run_add_rms_norm(const AddRmsNormOp& op) {
  const int64_t n = op.residual.dim(1);
  for (int64_t r = 0; r < op.residual.dim(0); ++r) {
    float* x = data<float>(op.residual) + r * n;
    const float* d = data<const float>(op.delta) + r * n;
    for (int64_t j = 0; j < n; ++j) x[j] += d[j];
    rms_norm_row(x, data<const float>(op.weight), data<float>(op.out) + r * n, n, op.eps);
  }
  return ok_status();
}

}  // namespace tessera::ops::ref
