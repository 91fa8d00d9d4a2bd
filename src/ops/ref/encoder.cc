// The encoder operators (BERT) and pooling: layer_norm, activation, attention_noncausal, pool. Plain loops in a
// stated order, sums of many terms in double: the oracle the other backends are compared with.
#include <cmath>
#include <vector>

#include "ops/ref/kernels.h"

namespace tessera::ops::ref {

float activate(Activation act, float x) {
  switch (act) {
    case Activation::kSilu:
      return x * (1.0f / (1.0f + std::exp(-x)));
    case Activation::kGeluTanh: {  // as run_silu_mul evaluates it
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

Status run_layer_norm(const LayerNormOp& op) {
  const int64_t rows = op.x.dim(0), n = op.x.dim(1);
  const float* w = data<const float>(op.weight);
  const float* b = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = data<const float>(op.x) + r * n;
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += x[j];
    const double mean = sum / static_cast<double>(n);
    double sq = 0.0;
    for (int64_t j = 0; j < n; ++j) sq += (x[j] - mean) * (x[j] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + static_cast<double>(op.eps));
    for (int64_t j = 0; j < n; ++j) {
      row[static_cast<size_t>(j)] = static_cast<float>((x[j] - mean) * inv) * w[j] + (b ? b[j] : 0.0f);
    }
    float* out = data<float>(op.out) + r * n;  // may alias x: written once the row is read
    for (int64_t j = 0; j < n; ++j) out[j] = row[static_cast<size_t>(j)];
  }
  return ok_status();
}

Status run_activation(const ActivationOp& op) {
  const float* x = data<const float>(op.x);
  float* out = data<float>(op.out);
  for (int64_t i = 0; i < op.x.numel(); ++i) out[i] = activate(op.act, x[i]);
  return ok_status();
}

Status run_attention_noncausal(const AttentionNonCausalOp& op) {
  const int64_t n = op.q.dim(0), heads = op.q.dim(1), hd = op.q.dim(2), kv_heads = op.k.dim(1);
  const int64_t group = heads / kv_heads;
  const float scale = op.scale > 0.0f ? op.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const float* q = data<const float>(op.q);
  const float* k = data<const float>(op.k);
  const float* v = data<const float>(op.v);
  float* out = data<float>(op.out);
  std::vector<double> p(static_cast<size_t>(n));
  std::vector<double> acc(static_cast<size_t>(hd));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q + (i * heads + h) * hd;
      const int64_t kvh = h / group;
      double max_score = -INFINITY;
      for (int64_t t = 0; t < n; ++t) {
        const float* kt = k + (t * kv_heads + kvh) * hd;
        double s = 0.0;
        for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(qh[d]) * kt[d];
        s *= scale;
        p[static_cast<size_t>(t)] = s;
        if (s > max_score) max_score = s;
      }
      double sum = 0.0;
      for (int64_t t = 0; t < n; ++t)
        sum += (p[static_cast<size_t>(t)] = std::exp(p[static_cast<size_t>(t)] - max_score));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t t = 0; t < n; ++t) {
        const float* vt = v + (t * kv_heads + kvh) * hd;
        const double w = p[static_cast<size_t>(t)] / sum;
        for (int64_t d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += w * vt[d];
      }
      float* oh = out + (i * heads + h) * hd;
      for (int64_t d = 0; d < hd; ++d) oh[d] = static_cast<float>(acc[static_cast<size_t>(d)]);
    }
  }
  return ok_status();
}

Status run_pool(const PoolOp& op) {
  const int64_t n = op.x.dim(0), dim = op.x.dim(1);
  const float* x = data<const float>(op.x);
  float* out = data<float>(op.out);
  if (op.kind == PoolKind::kFirst || op.kind == PoolKind::kLast) {
    const float* row = x + (op.kind == PoolKind::kFirst ? 0 : n - 1) * dim;
    for (int64_t j = 0; j < dim; ++j) out[j] = row[j];
    return ok_status();
  }
  for (int64_t j = 0; j < dim; ++j) {
    double sum = 0.0;
    for (int64_t r = 0; r < n; ++r) sum += x[r * dim + j];
    out[j] = static_cast<float>(sum / static_cast<double>(n));
  }
  return ok_status();
}

}  // namespace tessera::ops::ref
