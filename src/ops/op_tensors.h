// for_each_tensor: every tensor an operator names, valid or not, in one list for every operator of ops.h. The
// graph path rebinds them (ops/graph.cc), the GPU backends check each one's view (vulkan, cuda); a new operator's
// tensors are listed here once, and the static_assert stops a build that forgot.
#pragma once

#include <type_traits>
#include <variant>

#include "ops/ops.h"

namespace tessera::ops {

// Calls f(tensor) for each tensor of `op`; OpT is Op or const Op, f takes Tensor& or const Tensor& to match.
template <typename OpT, typename F>
requires std::is_same_v<std::remove_const_t<OpT>, Op>
void for_each_tensor(OpT& op, F&& f) {
  std::visit(
      [&f](auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbeddingOp>) {
          f(o.table), f(o.ids), f(o.out);
        } else if constexpr (std::is_same_v<T, RmsNormOp>) {
          f(o.x), f(o.weight), f(o.out);
        } else if constexpr (std::is_same_v<T, AddRmsNormOp>) {
          f(o.residual), f(o.delta), f(o.weight), f(o.out);
        } else if constexpr (std::is_same_v<T, RopeOp>) {
          f(o.q), f(o.k), f(o.positions), f(o.freqs);
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          f(o.k), f(o.v), f(o.k_cache), f(o.v_cache), f(o.slots);
        } else if constexpr (std::is_same_v<T, AttentionPrefillOp>) {
          f(o.q), f(o.k_cache), f(o.v_cache), f(o.block_table), f(o.out), f(o.sinks);
        } else if constexpr (std::is_same_v<T, AttentionDecodeOp>) {
          f(o.q), f(o.k_cache), f(o.v_cache), f(o.block_tables), f(o.context_lens), f(o.out), f(o.sinks);
        } else if constexpr (std::is_same_v<T, MatMulOp>) {
          f(o.x), f(o.w), f(o.out), f(o.bias);
        } else if constexpr (std::is_same_v<T, SiluMulOp>) {
          f(o.gate), f(o.up), f(o.out);
        } else if constexpr (std::is_same_v<T, AddOp>) {
          f(o.a), f(o.b), f(o.out);
        } else if constexpr (std::is_same_v<T, LayerNormOp>) {
          f(o.x), f(o.weight), f(o.bias), f(o.out);
        } else if constexpr (std::is_same_v<T, AttentionNonCausalOp>) {
          f(o.q), f(o.k), f(o.v), f(o.out);
        } else if constexpr (std::is_same_v<T, SoftmaxOp> || std::is_same_v<T, ArgmaxOp> ||
                             std::is_same_v<T, ActivationOp> || std::is_same_v<T, ScaleOp> ||
                             std::is_same_v<T, PoolOp>) {
          f(o.x), f(o.out);
        } else if constexpr (std::is_same_v<T, MoeRouteOp>) {
          f(o.logits), f(o.ids), f(o.weights), f(o.bias), f(o.expert_scale);
        } else if constexpr (std::is_same_v<T, SplitHeadsOp>) {
          f(o.x), f(o.a), f(o.b);
        } else if constexpr (std::is_same_v<T, CausalConv1dOp>) {
          f(o.x), f(o.weight), f(o.state), f(o.out);
        } else if constexpr (std::is_same_v<T, GatedDeltaRuleOp>) {
          f(o.qkv), f(o.alpha), f(o.beta), f(o.dt_bias), f(o.a), f(o.state), f(o.out);
        } else {
          static_assert(std::is_same_v<T, MoeExpertsOp>, "every operator lists its tensors here");
          f(o.x), f(o.ids), f(o.weights), f(o.gate), f(o.up), f(o.down), f(o.out), f(o.gate_bias), f(o.up_bias),
              f(o.down_bias), f(o.gate_up);
        }
      },
      op);
}

}  // namespace tessera::ops
