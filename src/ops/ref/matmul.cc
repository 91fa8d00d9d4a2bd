// Dense f32 matrix products, one output at a time with a sequential float accumulator (run.c's order).
#include <fmt/core.h>

#include "ops/ref/kernels.h"

namespace tessera::ops::ref {

Status run_matmul(const MatMulOp& op) {
  if (op.w.dtype != DType::kF32) {
    return unimplemented(fmt::format("ref matmul takes f32 weights, not {}", dtype_name(op.w.dtype)));
  }
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0);
  const auto* x = data<const float>(op.x);
  const auto* w = data<const float>(op.w);
  auto* out = data<float>(op.out);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* wi = w + i * k;
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc += wi[j] * xr[j];
      out[r * m + i] = bias ? acc + bias[i] : acc;
    }
  }
  return ok_status();
}

}  // namespace tessera::ops::ref
