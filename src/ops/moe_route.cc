#include "ops/moe_route.h"

#include <algorithm>
#include <cmath>

namespace tessera::ops {
namespace {

// a ranks before b: the larger score first, NaN last, ties to the lower expert.
bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  if (std::isnan(a)) return std::isnan(b) && ia < ib;
  if (std::isnan(b)) return true;
  return a > b || (a == b && ia < ib);
}

}  // namespace

void route_experts_row(const float* l, int64_t experts, const float* bias, int64_t k, MoeGating gating, bool normalize,
                       float scale, float* p, char* taken, int32_t* ids, float* w, const float* expert_scale) {
  if (gating == MoeGating::kSoftmax) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < experts; ++i) mx = l[i] > mx ? l[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < experts; ++i) sum += (p[i] = std::exp(l[i] - mx));
    for (int64_t i = 0; i < experts; ++i) p[i] /= sum;
  } else if (gating == MoeGating::kSigmoid) {
    for (int64_t i = 0; i < experts; ++i) p[i] = 1.0f / (1.0f + std::exp(-l[i]));
  } else {
    for (int64_t i = 0; i < experts; ++i) p[i] = l[i];
  }
  std::fill(taken, taken + experts, 0);
  // k passes over the experts: k is small (2 to 8) and the order, ties included, is fixed.
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    float best_score = 0.0f;
    for (int64_t i = 0; i < experts; ++i) {
      if (taken[i]) continue;
      const float s = bias ? p[i] + bias[i] : p[i];
      if (best < 0 || ranks_before(s, i, best_score, best)) {
        best = i;
        best_score = s;
      }
    }
    taken[best] = 1;
    ids[j] = static_cast<int32_t>(best);
    w[j] = p[best];
  }
  if (gating == MoeGating::kSoftmaxWeight) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < k; ++j) mx = w[j] > mx ? w[j] : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = std::exp(w[j] - mx));
    for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
  if (normalize) {
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += w[j];
    sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp: the smallest normal f16
    for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
  if (scale != 1.0f)
    for (int64_t j = 0; j < k; ++j) w[j] *= scale;
  if (expert_scale != nullptr)
    for (int64_t j = 0; j < k; ++j) w[j] *= expert_scale[ids[j]];
}

}  // namespace tessera::ops
