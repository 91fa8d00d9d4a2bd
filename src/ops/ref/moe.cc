// Mixture of experts: routing (softmax / sigmoid / softmax over the chosen, top-k, renormalisation) and the
// experts' gated MLPs, one row and one slot at a time with sequential float accumulation. Expert weights of any
// stored type are widened a row at a time, as ref's matmul does. The oracle for every backend's MoE kernels.
#include <vector>

#include <fmt/core.h>

#include "base/quant.h"
#include "ops/moe_route.h"
#include "ops/ref/kernels.h"

namespace tessera::ops::ref {
namespace {

// y [rows] = W [rows, cols] (rows starting at row0 of a stored matrix) . x, widening each row.
Status matvec(const uint8_t* w, DType type, int64_t rows, int64_t cols, const float* x, std::vector<float>& wrow,
              float* y) {
  const size_t row_bytes = dtype_bytes(type, static_cast<size_t>(cols));
  wrow.resize(static_cast<size_t>(cols));
  for (int64_t i = 0; i < rows; ++i) {
    TS_RETURN_IF_ERROR(dequantize(w + static_cast<size_t>(i) * row_bytes, type, wrow));
    float acc = 0.0f;
    for (int64_t j = 0; j < cols; ++j) acc += wrow[static_cast<size_t>(j)] * x[j];
    y[i] = acc;
  }
  return ok_status();
}

}  // namespace

Status run_moe_route(const MoeRouteOp& op) {
  const int64_t n = op.logits.dim(0), experts = op.logits.dim(1), k = op.ids.dim(1);
  std::vector<float> p(static_cast<size_t>(experts));
  std::vector<char> taken(static_cast<size_t>(experts));
  for (int64_t r = 0; r < n; ++r) {
    route_experts_row(data<const float>(op.logits) + r * experts, experts,
                      op.bias.valid() ? data<const float>(op.bias) : nullptr, k, op.gating, op.normalize, op.scale,
                      p.data(), taken.data(), data<int32_t>(op.ids) + r * k, data<float>(op.weights) + r * k,
                      op.expert_scale.valid() ? data<const float>(op.expert_scale) : nullptr);
  }
  return ok_status();
}

Status run_moe_experts(const MoeExpertsOp& op) {
  const bool fused = op.gate_up.valid();
  const Tensor& gw = fused ? op.gate_up : op.gate;
  const int64_t n = op.x.dim(0), dim = op.x.dim(1), k = op.ids.dim(1), experts = gw.dim(0),
                ff = fused ? gw.dim(1) / 2 : gw.dim(1);
  const auto* x = data<const float>(op.x);
  const auto* ids = data<const int32_t>(op.ids);
  const auto* weights = data<const float>(op.weights);
  auto* out = data<float>(op.out);
  // Expert e's gate rows start at e * (gate matrix bytes); fused, at e * (2 ff rows) with up's ff rows after them.
  const size_t half_bytes = dtype_bytes(gw.dtype, static_cast<size_t>(ff * dim));
  const size_t gate_stride = fused ? 2 * half_bytes : half_bytes;
  const uint8_t* gate_base = data<const uint8_t>(gw);
  const uint8_t* up_base = fused ? gate_base + half_bytes : data<const uint8_t>(op.up);
  const size_t down_bytes = dtype_bytes(op.down.dtype, static_cast<size_t>(dim * ff));
  const float* gb = op.gate_bias.valid() ? data<const float>(op.gate_bias) : nullptr;
  const float* ub = op.up_bias.valid() ? data<const float>(op.up_bias) : nullptr;
  const float* db = op.down_bias.valid() ? data<const float>(op.down_bias) : nullptr;
  for (int64_t t = 0; t < n * k; ++t) {
    if (ids[t] < 0 || ids[t] >= experts)
      return out_of_range(fmt::format("moe_experts: expert id {} is outside [0, {})", ids[t], experts));
  }
  std::vector<float> g(static_cast<size_t>(ff)), u(static_cast<size_t>(ff)), y(static_cast<size_t>(dim)), wrow;
  std::vector<float> acc(static_cast<size_t>(dim));
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * dim;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[t * k + j];
      const size_t at = static_cast<size_t>(e) * gate_stride;
      TS_RETURN_IF_ERROR(matvec(gate_base + at, gw.dtype, ff, dim, xt, wrow, g.data()));
      TS_RETURN_IF_ERROR(matvec(up_base + at, gw.dtype, ff, dim, xt, wrow, u.data()));
      for (int64_t i = 0; i < ff; ++i) {
        const float gi = gb ? g[static_cast<size_t>(i)] + gb[e * ff + i] : g[static_cast<size_t>(i)];
        const float ui = ub ? u[static_cast<size_t>(i)] + ub[e * ff + i] : u[static_cast<size_t>(i)];
        g[static_cast<size_t>(i)] = gated(op.act, gi, ui, op.alpha, op.limit);
      }
      TS_RETURN_IF_ERROR(matvec(data<const uint8_t>(op.down) + static_cast<size_t>(e) * down_bytes, op.down.dtype, dim,
                                ff, g.data(), wrow, y.data()));
      const float w = weights[t * k + j];
      for (int64_t i = 0; i < dim; ++i) {
        const float yi = db ? y[static_cast<size_t>(i)] + db[e * dim + i] : y[static_cast<size_t>(i)];
        acc[static_cast<size_t>(i)] = j == 0 ? yi * w : acc[static_cast<size_t>(i)] + yi * w;
      }
    }
    std::copy(acc.begin(), acc.end(), out + t * dim);
  }
  return ok_status();
}

}  // namespace tessera::ops::ref
