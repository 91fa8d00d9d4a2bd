// Scalar kernels of the reference backend, one family per .cc file. Inputs have passed ops::validate();
// data-dependent checks (ids, slots and block numbers in range) are done here and return OutOfRange.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/status.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace tessera::ops::ref {

template <typename T>
T* data(const Tensor& t) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(t.buffer->host_ptr()) + t.offset);
}

// One element of a gated activation act(gate) * up (SiluMulOp's and MoeExpertsOp's formulas, see ops.h).
inline float gated(Activation act, float g, float u, float alpha = 0.0f, float limit = 0.0f) {
  if (act == Activation::kGeluTanh) {
    // GELU's tanh approximation. 0.5 x (1 + tanh(a)) is evaluated as x / (1 + exp(-2a)), the same value
    // without the cancellation of 1 + tanh(a) for negative x (which leaves the result to libm's last ulp).
    constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCoefA = 0.044715f;
    return g / (1.0f + std::exp(-2.0f * kSqrt2OverPi * g * (1.0f + kCoefA * g * g))) * u;
  }
  if (act == Activation::kSigmoid) return u / (1.0f + std::exp(-g));
  if (act == Activation::kSwigluOai) {
    const float x = std::min(g, limit), y = std::clamp(u, -limit, limit);
    return x / (1.0f + std::exp(alpha * (-x))) * (y + 1.0f);
  }
  float v = g;
  v *= (1.0f / (1.0f + std::exp(-v)));
  return v * u;
}

// Stored types the reference accepts (the same answers Device::supports gives).
bool matmul_weight_supported(DType w);
bool kv_cache_supported(DType cache);

Status run_embedding(const EmbeddingOp& op);
Status run_rms_norm(const RmsNormOp& op);
Status run_add_rms_norm(const AddRmsNormOp& op);
Status run_rope(const RopeOp& op);
Status run_kv_write(const KvWriteOp& op);
Status run_attention_prefill(const AttentionPrefillOp& op);
Status run_attention_decode(const AttentionDecodeOp& op);
Status run_matmul(const MatMulOp& op);
Status run_silu_mul(const SiluMulOp& op);
Status run_add(const AddOp& op);
Status run_softmax(const SoftmaxOp& op);
Status run_argmax(const ArgmaxOp& op);
Status run_layer_norm(const LayerNormOp& op);
Status run_activation(const ActivationOp& op);
Status run_attention_noncausal(const AttentionNonCausalOp& op);
Status run_pool(const PoolOp& op);
// One activation value, as ActivationOp defines it.
float activate(Activation act, float x);
Status run_moe_route(const MoeRouteOp& op);
Status run_moe_experts(const MoeExpertsOp& op);
Status run_split_heads(const SplitHeadsOp& op);
Status run_causal_conv1d(const CausalConv1dOp& op);
Status run_gated_delta_rule(const GatedDeltaRuleOp& op);

}  // namespace tessera::ops::ref
