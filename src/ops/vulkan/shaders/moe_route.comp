// MoeRouteOp, one invocation per row, the host backends' arithmetic (ops/moe_route.cc) step for step: the gating
// function's scores, k passes over the experts (the larger score first, NaN last, ties to the lower expert), then
// softmax over the chosen (gating 2), renormalisation and scale. Routing is a few hundred scalar operations per
// row: a row per invocation keeps the order of every sum the reference's. Last, each weight times its expert's
// scale where the op has expert_scale (Gemma 4's per-expert output scales).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer Logits { float d[]; } logits;
layout(set = 0, binding = 1) readonly buffer Bias { float d[]; } bias;
layout(set = 0, binding = 2) buffer Ids { int d[]; } ids;
layout(set = 0, binding = 3) buffer Weights { float d[]; } wts;
layout(set = 0, binding = 4) readonly buffer ExpertScale { float d[]; } escale;
layout(push_constant) uniform Push {
  uint l_off, b_off, ids_off, w_off, rows, experts, k;
  uint gating;  // 0 softmax, 1 sigmoid, 2 softmax over the chosen
  uint normalize, has_bias;
  float scale;
  uint es_off, has_es;
} p;

#include "common.glsl"

bool ranks_before(float a, uint ia, float b, uint ib) {
  if (nan_bits(a)) return nan_bits(b) && ia < ib;
  if (nan_bits(b)) return true;
  return a > b || (a == b && ia < ib);
}

void main() {
  const uint r = linear_group() * 64u + gl_LocalInvocationID.x;
  if (r >= p.rows) return;
  const uint lo = p.l_off + r * p.experts, io = p.ids_off + r * p.k, wo = p.w_off + r * p.k;
  float mx = uintBitsToFloat(0xff800000u);
  precise float sum = 0.0;
  if (p.gating == 0u) {
    for (uint i = 0u; i < p.experts; ++i) mx = logits.d[lo + i] > mx ? logits.d[lo + i] : mx;
    for (uint i = 0u; i < p.experts; ++i) sum += exp(logits.d[lo + i] - mx);
  }
  for (uint j = 0u; j < p.k; ++j) {
    int best = -1;
    float best_score = 0.0, best_p = 0.0;
    for (uint i = 0u; i < p.experts; ++i) {
      bool taken = false;
      for (uint c = 0u; c < j; ++c) taken = taken || ids.d[io + c] == int(i);
      if (taken) continue;
      const float l = logits.d[lo + i];
      precise float pi;
      if (p.gating == 0u) {
        pi = exp(l - mx) / sum;
      } else if (p.gating == 1u) {
        pi = 1.0 / (1.0 + exp(-l));
      } else {
        pi = l;
      }
      precise float s = p.has_bias != 0u ? pi + bias.d[p.b_off + i] : pi;
      if (best < 0 || ranks_before(s, i, best_score, uint(best))) {
        best = int(i);
        best_score = s;
        best_p = pi;
      }
    }
    ids.d[io + j] = best;
    wts.d[wo + j] = best_p;
  }
  if (p.gating == 2u) {
    float m2 = uintBitsToFloat(0xff800000u);
    for (uint j = 0u; j < p.k; ++j) m2 = wts.d[wo + j] > m2 ? wts.d[wo + j] : m2;
    precise float s2 = 0.0;
    for (uint j = 0u; j < p.k; ++j) {
      const float e = exp(wts.d[wo + j] - m2);
      wts.d[wo + j] = e;
      s2 += e;
    }
    for (uint j = 0u; j < p.k; ++j) wts.d[wo + j] = wts.d[wo + j] / s2;
  }
  if (p.normalize != 0u) {
    precise float s3 = 0.0;
    for (uint j = 0u; j < p.k; ++j) s3 += wts.d[wo + j];
    if (!nan_bits(s3) && s3 < 6.103515625e-5) s3 = 6.103515625e-5;  // as std::max(s3, c): a NaN sum stays NaN
    for (uint j = 0u; j < p.k; ++j) wts.d[wo + j] = wts.d[wo + j] / s3;
  }
  if (p.scale != 1.0)
    for (uint j = 0u; j < p.k; ++j) wts.d[wo + j] = wts.d[wo + j] * p.scale;
  if (p.has_es != 0u)
    for (uint j = 0u; j < p.k; ++j) wts.d[wo + j] = wts.d[wo + j] * escale.d[p.es_off + uint(ids.d[io + j])];
}
