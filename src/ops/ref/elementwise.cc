// Elementwise and row-reduction operators: silu*mul (or gelu*mul), add, softmax, argmax.
#include <cmath>

#include "ops/ref/kernels.h"

namespace tessera::ops::ref {

Status run_silu_mul(const SiluMulOp& op) {
  const auto* g = data<const float>(op.gate);
  const auto* u = data<const float>(op.up);
  auto* out = data<float>(op.out);
  // A gate of one value per row (sigmoid only, validate()) covers its row of up.
  const int64_t per = op.gate.numel() == op.up.numel() ? 1 : op.up.row_elems();
  for (int64_t i = 0, n = op.up.numel(); i < n; ++i) out[i] = gated(op.act, g[i / per], u[i]);
  return ok_status();
}

Status run_add(const AddOp& op) {
  const auto* a = data<const float>(op.a);
  const auto* b = data<const float>(op.b);
  auto* out = data<float>(op.out);
  for (int64_t i = 0, n = op.a.numel(); i < n; ++i) out[i] = a[i] + b[i];
  return ok_status();
}

Status run_softmax(const SoftmaxOp& op) {
  const int64_t rows = op.x.dim(0), m = op.x.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
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
  }
  return ok_status();
}

Status run_argmax(const ArgmaxOp& op) {
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

}  // namespace tessera::ops::ref
