// Matrix products, one output at a time with a sequential float accumulator (run.c's order). Stored weight
// types (f16, bf16 and every GGUF block type of base/quant.h) are widened to f32 one row at a time with base/quant.h's
// reference conversions, then multiplied exactly like f32 weights: the oracle for every quantised kernel.
#include <vector>

#include <fmt/core.h>

#include "base/quant.h"
#include "ops/ref/kernels.h"

namespace tessera::ops::ref {

bool matmul_weight_supported(DType w) { return w != DType::kI32; }

Status run_matmul(const MatMulOp& op) {
  if (!matmul_weight_supported(op.w.dtype)) {
    return unimplemented(fmt::format("ref matmul does not take {} weights", dtype_name(op.w.dtype)));
  }
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0);
  const auto* x = data<const float>(op.x);
  const auto* wbytes = data<const uint8_t>(op.w);
  const size_t wrow_bytes = dtype_bytes(op.w.dtype, static_cast<size_t>(k));
  const bool dense = op.w.dtype == DType::kF32;
  auto* out = data<float>(op.out);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  std::vector<float> wrow(dense ? 0 : static_cast<size_t>(k));
  // Weight rows outermost so a stored row is widened once for every activation row.
  for (int64_t i = 0; i < m; ++i) {
    const float* wi;
    if (dense) {
      wi = reinterpret_cast<const float*>(wbytes) + i * k;
    } else {
      TS_RETURN_IF_ERROR(dequantize(wbytes + static_cast<size_t>(i) * wrow_bytes, op.w.dtype, wrow));
      wi = wrow.data();
    }
    for (int64_t r = 0; r < n; ++r) {
      const float* xr = x + r * k;
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc += wi[j] * xr[j];
      out[r * m + i] = bias ? acc + bias[i] : acc;
    }
  }
  return ok_status();
}

}  // namespace tessera::ops::ref
