#include "ops/vulkan/kernels.h"

#include "base/check.h"

namespace tessera::ops::vulkan {

const KernelSpec& kernel_spec(Kernel k) {
  static const KernelSpec kSpecs[] = {
      {"embedding", 4, sizeof(EmbeddingPush), true},
      {"rms_norm", 4, sizeof(RmsNormPush), false},
      {"rope", 4, sizeof(RopePush), false},
      {"kv_write", 6, sizeof(KvWritePush), false},
      {"attention", 9, sizeof(AttentionPush), false},
      {"matmul_vec", 4, sizeof(MatMulPush), true},
      {"matmul_vec_subgroups", 4, sizeof(MatMulPush), true},
      {"matmul_tiled", 4, sizeof(MatMulPush), true},
      {"elementwise", 3, sizeof(ElementwisePush), false},
      {"softmax", 2, sizeof(RowPush), false},
      {"argmax", 2, sizeof(RowPush), false},
      {"moe_route", 5, sizeof(MoeRoutePush), false},
      {"moe_gate_up", 8, sizeof(MoeGateUpPush), true},
      {"moe_down", 6, sizeof(MoeDownPush), true},
      {"split_heads", 3, sizeof(SplitHeadsPush), false},
      {"causal_conv1d", 4, sizeof(CausalConv1dPush), false},
      {"gated_delta_rule", 7, sizeof(GatedDeltaRulePush), false},
      {"layer_norm", 4, sizeof(LayerNormPush), false},
      {"attention_noncausal", 4, sizeof(AttentionNonCausalPush), false},
      {"pool", 2, sizeof(PoolPush), false},
  };
  static_assert(std::size(kSpecs) == static_cast<size_t>(Kernel::kCount));
  const auto i = static_cast<size_t>(k);
  TS_CHECK(i < std::size(kSpecs));
  return kSpecs[i];
}

}  // namespace tessera::ops::vulkan
