// Elementwise and row-reduction operators: silu*mul (or gelu*mul), add, softmax, argmax.
#include <cmath>

#include "ops/ref/kernels.h"

namespace tessera::ops::ref {

Status run_silu_mul(const SiluMulOp& op) {
  const auto* g = data<const float>(op.gate);
  const auto* u = data<const float>(op.up);
  auto* out = data<float>(op.out);
  if (op.act == Activation::kGeluTanh) {
    // GELU's tanh approximation. 0.5 x (1 + tanh(a)) is evaluated as x / (1 + exp(-2a)), the same value
    // without the cancellation of 1 + tanh(a) for negative x (which leaves the result to libm's last ulp).
    constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCoefA = 0.044715f;
    for (int64_t i = 0, n = op.gate.numel(); i < n; ++i) {
      const float x = g[i];
      out[i] = x / (1.0f + std::exp(-2.0f * kSqrt2OverPi * x * (1.0f + kCoefA * x * x))) * u[i];
    }
    return ok_status();
  }
  for (int64_t i = 0, n = op.gate.numel(); i < n; ++i) {
    float v = g[i];
    v *= (1.0f / (1.0f + std::exp(-v)));
    v *= u[i];
    out[i] = v;
  }
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
