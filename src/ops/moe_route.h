// The routing of one row of a mixture-of-experts layer (MoeRouteOp's arithmetic, ops.h), shared by the host
// backends (ref, cpu): routing is a few hundred scalar operations per token, and one implementation keeps every
// host backend choosing the same experts bit for bit. Device backends implement the same definition.
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace tessera::ops {

// logits [experts] -> ids [k], weights [k]; p is scratch of `experts` floats, taken of `experts` bytes; bias and
// expert_scale may be null.
void route_experts_row(const float* logits, int64_t experts, const float* bias, int64_t k, MoeGating gating,
                       bool normalize, float scale, float* p, char* taken, int32_t* ids, float* weights,
                       const float* expert_scale = nullptr);

}  // namespace tessera::ops
