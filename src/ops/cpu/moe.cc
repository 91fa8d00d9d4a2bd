// Mixture of experts on the cpu: routing (the shared host arithmetic of ops/moe_route.h, rows split over the
// threads) and the experts computed expert by expert. The rows routed to one expert are gathered into one
// block, so each expert's three matrices are read once per call for all of its rows (decode reads k experts'
// weights per token, prefill reads each expert once per chunk), through the same matmul kernels dense layers
// use, on each expert's 2-D slice of the 3-D tensors (repacked per expert at load, repack.h). Each result row
// goes to its (row, slot) place and the slots are summed in slot order, as ref does; the kernels give a row the
// same bits whatever shares its block, so batching and chunking never change an output. While every expert has
// few rows (decode, small batches) the threads take whole experts instead of splitting each expert's products.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "base/quant.h"
#include "ops/cpu/kernels.h"
#include "ops/moe_route.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

// Host arrays as operands of the matmul kernels (which address tensors through Buffer::host_ptr()).
class HostView final : public Buffer {
 public:
  HostView(void* p, size_t bytes) : Buffer(bytes), p_(p) {}
  void* host_ptr() override { return p_; }

 private:
  void* p_;
};

// Experts run one per thread (not split across threads) while none has more rows than this.
constexpr int64_t kExpertParallelRows = 16;

Status matmul_any(const MatMulOp& op, const Ctx& ctx) {
  const int block = dtype_info(op.w.dtype).block_elems;
  if (block == kQuantBlock) return matmul_quant(op, ctx);
  if (block == kSuperBlock) return matmul_kquant(op, ctx);
  return matmul_dense(op, ctx);
}

// Expert e's matrix of a [E, rows, cols] tensor, as a matmul weight.
Tensor slice(const Tensor& t, int64_t e) {
  Tensor s(t.buffer, t.offset, t.dtype, {t.dim(1), t.dim(2)});
  s.offset += static_cast<size_t>(e) * s.bytes();
  return s;
}

// Row e of an optional [E, width] bias, as a matmul bias.
Tensor bias_row(const Tensor& b, int64_t e) {
  if (!b.valid()) return {};
  Tensor r(b.buffer, b.offset, DType::kF32, {b.dim(1)});
  r.offset += static_cast<size_t>(e) * r.bytes();
  return r;
}

// One expert's rows and intermediates (per thread when experts run in parallel).
struct ExpertScratch {
  std::vector<float> xs, g, u, gu, y;
};

struct Scratch {
  std::vector<int32_t> count, order;  // rows per expert (prefix sums), then the (row, slot)s by expert
  std::vector<int32_t> active;        // the experts with rows
  std::vector<float> result;          // every (row, slot)'s result
};

// Expert e's feed-forward over its `rows` (row, slot) pairs order[first, first + rows), each result written to
// its pair's place in `result`.
Status run_expert(const MoeExpertsOp& op, int64_t e, const int32_t* order, int64_t rows, ExpertScratch& s,
                  float* result, const Ctx& ctx) {
  const bool fused = op.gate_up.valid();
  const int64_t dim = op.x.dim(1), k = op.ids.dim(1), ff = fused ? op.gate_up.dim(1) / 2 : op.gate.dim(1);
  s.xs.resize(static_cast<size_t>(rows * dim));
  s.g.resize(static_cast<size_t>(rows * ff));
  s.u.resize(static_cast<size_t>(rows * ff));
  s.y.resize(static_cast<size_t>(rows * dim));
  if (fused) s.gu.resize(static_cast<size_t>(rows * 2 * ff));
  HostView xs_buf(s.xs.data(), s.xs.size() * 4), g_buf(s.g.data(), s.g.size() * 4), u_buf(s.u.data(), s.u.size() * 4),
      y_buf(s.y.data(), s.y.size() * 4), gu_buf(s.gu.data(), s.gu.size() * 4);
  const auto* x = data<const float>(op.x);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = order[r] / k;
    std::memcpy(s.xs.data() + r * dim, x + row * dim, static_cast<size_t>(dim) * sizeof(float));
  }
  const Tensor xs(&xs_buf, 0, DType::kF32, {rows, dim}), g(&g_buf, 0, DType::kF32, {rows, ff}),
      u(&u_buf, 0, DType::kF32, {rows, ff}), y(&y_buf, 0, DType::kF32, {rows, dim});
  if (fused) {
    // One product for both: [rows, 2 ff], gate's columns then up's, split (and biased) into g and u.
    const Tensor gu(&gu_buf, 0, DType::kF32, {rows, 2 * ff});
    TS_RETURN_IF_ERROR(matmul_any(MatMulOp{xs, slice(op.gate_up, e), gu}, ctx));
    const float* gb = op.gate_bias.valid() ? data<const float>(op.gate_bias) + e * ff : nullptr;
    const float* ub = op.up_bias.valid() ? data<const float>(op.up_bias) + e * ff : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = s.gu.data() + r * 2 * ff;
      float* gr = s.g.data() + r * ff;
      float* ur = s.u.data() + r * ff;
      for (int64_t i = 0; i < ff; ++i) {
        gr[i] = gb ? src[i] + gb[i] : src[i];
        ur[i] = ub ? src[ff + i] + ub[i] : src[ff + i];
      }
    }
  } else {
    TS_RETURN_IF_ERROR(matmul_any(MatMulOp{xs, slice(op.gate, e), g, bias_row(op.gate_bias, e)}, ctx));
    TS_RETURN_IF_ERROR(matmul_any(MatMulOp{xs, slice(op.up, e), u, bias_row(op.up_bias, e)}, ctx));
  }
  if (op.act == Activation::kSwigluOai) {
    float* gv = s.g.data();
    const float* uv = s.u.data();
    const float alpha = op.alpha, limit = op.limit;
    for (int64_t i = 0; i < rows * ff; ++i) {
      const float a = std::min(gv[i], limit), b = std::clamp(uv[i], -limit, limit);
      gv[i] = a / (1.0f + std::exp(alpha * (-a))) * (b + 1.0f);
    }
  } else {
#if defined(TS_AMX_TILES)
    // The amx builds compile only the matmuls and this file; its other operators are the avx512 build's.
    TS_RETURN_IF_ERROR(avx512::silu_mul(SiluMulOp{g, u, g, op.act}, ctx));
#else
    TS_RETURN_IF_ERROR(silu_mul(SiluMulOp{g, u, g, op.act}, ctx));
#endif
  }
  TS_RETURN_IF_ERROR(matmul_any(MatMulOp{g, slice(op.down, e), y, bias_row(op.down_bias, e)}, ctx));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(result + order[r] * dim, s.y.data() + r * dim, static_cast<size_t>(dim) * sizeof(float));
  return ok_status();
}

}  // namespace

Status moe_route(const MoeRouteOp& op, const Ctx& ctx) {
  const int64_t n = op.logits.dim(0), experts = op.logits.dim(1), k = op.ids.dim(1);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  const float* scale = op.expert_scale.valid() ? data<const float>(op.expert_scale) : nullptr;
  parallel_for(
      ctx, n,
      [&](int64_t r) {
        thread_local std::vector<float> p;
        thread_local std::vector<char> taken;
        p.resize(static_cast<size_t>(experts));
        taken.resize(static_cast<size_t>(experts));
        route_experts_row(data<const float>(op.logits) + r * experts, experts, bias, k, op.gating, op.normalize,
                          op.scale, p.data(), taken.data(), data<int32_t>(op.ids) + r * k,
                          data<float>(op.weights) + r * k, scale);
      },
      static_cast<double>(experts * k), 4096.0);
  return ok_status();
}

Status moe_experts(const MoeExpertsOp& op, const Ctx& ctx) {
  const bool fused = op.gate_up.valid();
  const Tensor& gw = fused ? op.gate_up : op.gate;
  const int64_t n = op.x.dim(0), dim = op.x.dim(1), k = op.ids.dim(1), experts = gw.dim(0);
  const auto* ids = data<const int32_t>(op.ids);
  for (int64_t i = 0; i < n * k; ++i) {
    if (ids[i] < 0 || ids[i] >= experts)
      return out_of_range(fmt::format("moe_experts: expert id {} is outside [0, {})", ids[i], experts));
  }
  thread_local Scratch tls;  // the calling thread's; the workers below reach it through this reference
  Scratch& s = tls;
  // Counting sort of the (row, slot) pairs by expert, stable: an expert's rows stay in row order.
  s.count.assign(static_cast<size_t>(experts) + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) ++s.count[static_cast<size_t>(ids[i]) + 1];
  for (int64_t e = 0; e < experts; ++e) s.count[static_cast<size_t>(e) + 1] += s.count[static_cast<size_t>(e)];
  s.order.resize(static_cast<size_t>(n * k));
  {
    std::vector<int32_t> next(s.count.begin(), s.count.end() - 1);
    for (int64_t i = 0; i < n * k; ++i)
      s.order[static_cast<size_t>(next[static_cast<size_t>(ids[i])]++)] = static_cast<int32_t>(i);
  }
  int64_t most = 0;
  s.active.clear();
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t rows = s.count[static_cast<size_t>(e) + 1] - s.count[static_cast<size_t>(e)];
    if (rows > 0) s.active.push_back(static_cast<int32_t>(e));
    most = std::max(most, rows);
  }
  s.result.resize(static_cast<size_t>(n * k * dim));
  const int threads = ctx.pool ? ctx.pool->threads() : 1;
  const auto active = static_cast<int64_t>(s.active.size());
  if (threads > 1 && active >= 2 * threads && most <= kExpertParallelRows) {
    // Few rows per expert (decode, small batches): each thread takes whole experts, computed inline, so a step
    // is one fork and join for all of them instead of three or four per expert (each expert's products are too
    // small to split well). The kernels give the same bits inline as on the pool.
    std::vector<Status> failed(static_cast<size_t>(active), ok_status());
    parallel_for(ctx, active, [&](int64_t i) {
      thread_local ExpertScratch es;
      const int64_t e = s.active[static_cast<size_t>(i)], first = s.count[static_cast<size_t>(e)];
      failed[static_cast<size_t>(i)] = run_expert(
          op, e, s.order.data() + first, s.count[static_cast<size_t>(e) + 1] - first, es, s.result.data(), Ctx{});
    });
    for (const Status& st : failed) TS_RETURN_IF_ERROR(st);
  } else {
    thread_local ExpertScratch es;
    for (const int32_t e : s.active) {
      const int64_t first = s.count[static_cast<size_t>(e)];
      TS_RETURN_IF_ERROR(run_expert(op, e, s.order.data() + first, s.count[static_cast<size_t>(e) + 1] - first, es,
                                    s.result.data(), ctx));
    }
  }
  const auto* w = data<const float>(op.weights);
  auto* out = data<float>(op.out);
  parallel_for(
      ctx, n,
      [&](int64_t t) {
        float* o = out + t * dim;
        for (int64_t j = 0; j < k; ++j) {
          const float wj = w[t * k + j];
          const float* r = s.result.data() + (t * k + j) * dim;
          if (j == 0) {
            for (int64_t i = 0; i < dim; ++i) o[i] = r[i] * wj;
          } else {
            for (int64_t i = 0; i < dim; ++i) o[i] = o[i] + r[i] * wj;
          }
        }
      },
      static_cast<double>(k * dim), 1 << 14);
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
