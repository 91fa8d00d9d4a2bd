// Conformance cases of the encoder operators (BERT) and pooling: layer_norm (with and without bias, in place),
// activation (gelu_erf, gelu_tanh, silu), attention_noncausal (BERT-base/small, Qwen-like GQA and odd lengths),
// pool (mean, first, last). Shapes follow the embedding models Tessera runs: dim 384 (bge-small), 768
// (bert-base), 1024 (Qwen3-Embedding-0.6B), head_dim 32, 64 and 128, inputs up to BERT's 512 positions.
#include <cmath>

#include <fmt/core.h>

#include "ops/conformance/conformance.h"

namespace tessera::ops::conformance {
namespace {

constexpr double kExact = 0.0;
constexpr double kReduction = 1e-9;
constexpr double kTranscendental = 1e-8;
// One function of each element with no cancellation to excuse: a few ulp of f32 (about 1e-7 each) squared.
constexpr double kElementwise = 1e-12;
constexpr double kAttention = 1e-7;
constexpr int64_t kSlowWork = 6'000'000;

std::vector<float> uniform(CaseEnv& e, int64_t count, float scale, bool special) {
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = (e.rng().next_f32() * 2.0f - 1.0f) * scale;
  if (special) {
    v[0] = NAN;
    if (v.size() > 2) v[2] = INFINITY;
    if (v.size() > 3) v.back() = -INFINITY;
  }
  return v;
}

std::string_view act_name(Activation a) {
  return a == Activation::kGeluErf    ? "gelu_erf"
         : a == Activation::kGeluTanh ? "gelu_tanh"
         : a == Activation::kTanh     ? "tanh"
                                      : "silu";
}

std::string_view pool_name(PoolKind k) {
  return k == PoolKind::kMean ? "mean" : k == PoolKind::kFirst ? "first" : "last";
}

}  // namespace

void add_encoder_cases(std::vector<Case>& cases) {
  for (int64_t n : {1, 7, 64}) {
    for (int64_t dim : {64, 384, 768, 1024}) {
      for (bool bias : {true, false}) {
        for (float eps : {1e-12f, 1e-5f}) {
          cases.push_back({"layer_norm", DType::kF32,
                           fmt::format("n={} dim={} eps={}{}", n, dim, eps, bias ? " bias" : ""), kReduction, false,
                           [=](CaseEnv& e) -> Op {
                             // An offset and spread like a residual stream's, so the mean matters.
                             std::vector<float> x = uniform(e, n * dim, 3.0f, false);
                             for (float& v : x) v += 0.75f;
                             LayerNormOp op{e.values(DType::kF32, {n, dim}, x), e.random(DType::kF32, {dim}), Tensor(),
                                            e.output(DType::kF32, {n, dim}), eps};
                             if (bias) op.bias = e.random(DType::kF32, {dim});
                             return op;
                           }});
        }
      }
      if (dim != 384) continue;
      cases.push_back({"layer_norm", DType::kF32, fmt::format("n={} dim={} in place", n, dim), kReduction, false,
                       [=](CaseEnv& e) -> Op {
                         Tensor x = e.output(DType::kF32, {n, dim}, 2.0f);
                         return LayerNormOp{x, e.random(DType::kF32, {dim}), e.random(DType::kF32, {dim}), x, 1e-12f};
                       }});
      cases.push_back({"layer_norm", DType::kF32, fmt::format("n={} dim={} nan+inf", n, dim), kReduction, false,
                       [=](CaseEnv& e) -> Op {
                         return LayerNormOp{e.values(DType::kF32, {n, dim}, uniform(e, n * dim, 1.0f, true)),
                                            e.random(DType::kF32, {dim}), e.random(DType::kF32, {dim}),
                                            e.output(DType::kF32, {n, dim}), 1e-12f};
                       }});
    }
  }
  for (Activation act : {Activation::kGeluErf, Activation::kGeluTanh, Activation::kSilu, Activation::kTanh}) {
    for (int64_t n : {1, 3, 64}) {
      for (int64_t width : {1, 7, 1536, 3072}) {
        for (bool special : {false, true}) {
          if (special && width < 7) continue;
          cases.push_back({"activation", DType::kF32,
                           fmt::format("n={} width={} {}{}", n, width, act_name(act), special ? " nan+inf" : ""),
                           kTranscendental, false, [=](CaseEnv& e) -> Op {
                             return ActivationOp{
                                 e.values(DType::kF32, {n, width}, uniform(e, n * width, 8.0f, special)),
                                 e.output(DType::kF32, {n, width}), act};
                           }});
        }
      }
    }
    cases.push_back({"activation", DType::kF32, fmt::format("n=5 width=384 {} in place", act_name(act)),
                     kTranscendental, false, [=](CaseEnv& e) -> Op {
                       Tensor x = e.output(DType::kF32, {5, 384}, 6.0f);
                       return ActivationOp{x, x, act};
                     }});
  }
  // tanh as Gemma's final logit softcap takes it: whole vocabulary rows of logits / cap, mostly well inside
  // (-1, 1), where a series and the exponential form meet.
  for (int64_t n : {1, 2}) {
    for (float spread : {0.5f, 2.0f}) {
      cases.push_back({"activation", DType::kF32, fmt::format("n={} width=262144 tanh spread {}", n, spread),
                       kElementwise, false, [=](CaseEnv& e) -> Op {
                         return ActivationOp{e.values(DType::kF32, {n, 262144}, uniform(e, n * 262144, spread, false)),
                                             e.output(DType::kF32, {n, 262144}), Activation::kTanh};
                       }});
    }
  }
  struct Heads {
    int64_t heads, kv_heads, head_dim;
  };
  for (Heads h : {Heads{12, 12, 32}, Heads{12, 12, 64}, Heads{4, 2, 32}, Heads{16, 8, 128}, Heads{14, 2, 64}}) {
    for (int64_t n : {1, 2, 17, 64, 200, 512}) {
      for (float scale : {0.0f, 0.125f}) {
        if (scale > 0.0f && n != 17) continue;
        const int64_t work = 2 * n * n * h.heads * h.head_dim;
        cases.push_back({"attention_noncausal", DType::kF32,
                         fmt::format("n={} heads={}/{} head_dim={}{}", n, h.heads, h.kv_heads, h.head_dim,
                                     scale > 0.0f ? " scale=0.125" : ""),
                         kAttention, work > kSlowWork, [=](CaseEnv& e) -> Op {
                           return AttentionNonCausalOp{e.random(DType::kF32, {n, h.heads, h.head_dim}, 2.0f),
                                                       e.random(DType::kF32, {n, h.kv_heads, h.head_dim}, 2.0f),
                                                       e.random(DType::kF32, {n, h.kv_heads, h.head_dim}),
                                                       e.output(DType::kF32, {n, h.heads, h.head_dim}), scale};
                         }});
      }
    }
  }
  for (PoolKind kind : {PoolKind::kMean, PoolKind::kFirst, PoolKind::kLast}) {
    for (int64_t n : {1, 5, 64, 512}) {
      for (int64_t dim : {64, 384, 1024}) {
        cases.push_back({"pool", DType::kF32, fmt::format("n={} dim={} {}", n, dim, pool_name(kind)),
                         kind == PoolKind::kMean ? kReduction : kExact, false, [=](CaseEnv& e) -> Op {
                           return PoolOp{e.random(DType::kF32, {n, dim}, 3.0f), e.output(DType::kF32, {1, dim}), kind};
                         }});
      }
    }
    cases.push_back({"pool", DType::kF32, fmt::format("n=9 dim=64 {} nan+inf", pool_name(kind)),
                     kind == PoolKind::kMean ? kReduction : kExact, false, [=](CaseEnv& e) -> Op {
                       return PoolOp{e.values(DType::kF32, {9, 64}, uniform(e, 9 * 64, 1.0f, true)),
                                     e.output(DType::kF32, {1, 64}), kind};
                     }});
  }
}

}  // namespace tessera::ops::conformance
