// GatedDeltaRuleOp, one invocation per (value head h, value element j): row j of head h's state pairs value j with
// every key element and evolves on its own, so the invocation carries that row through the n tokens in order, in
// the state buffer itself. Per token it takes the l2 norms of its query and key heads (every invocation of the head
// computes the same sums in the same order), the decay g and the write strength b, and then as the reference:
//   row *= g; d = (v_j - row . k) b; row += d k; out_j = row . q / sqrt(S)
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer Qkv { float d[]; } qkv;
layout(set = 0, binding = 1) readonly buffer Alpha { float d[]; } alpha;
layout(set = 0, binding = 2) readonly buffer Beta { float d[]; } beta;
layout(set = 0, binding = 3) readonly buffer DtBias { float d[]; } dt_bias;
layout(set = 0, binding = 4) readonly buffer A { float d[]; } av;
layout(set = 0, binding = 5) buffer State { float d[]; } state;
layout(set = 0, binding = 6) writeonly buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint qkv_off, alpha_off, beta_off, dt_off, a_off, s_off, out_off;
  uint n, hv, s, hk, reset;
  float eps, scale;  // scale: 1 / sqrt(S), from the host
} p;

#include "common.glsl"

// 1 / max(|x|, eps) of the S elements from `at`, summed in order.
float inv_norm(uint at) {
  precise float sum = 0.0;
  for (uint i = 0u; i < p.s; ++i) sum += qkv.d[at + i] * qkv.d[at + i];
  precise float len = sqrt(sum);
  len = len < p.eps ? p.eps : len;
  precise float r = 1.0 / len;
  return r;
}

void main() {
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.hv * p.s) return;
  const uint h = g / p.s, j = g % p.s, kh = h % p.hk;
  const uint width = (2u * p.hk + p.hv) * p.s;
  const uint row = p.s_off + (h * p.s + j) * p.s;
  if (p.reset != 0u)
    for (uint i = 0u; i < p.s; ++i) state.d[row + i] = 0.0;
  for (uint t = 0u; t < p.n; ++t) {
    const uint base = p.qkv_off + t * width;
    const uint qa = base + kh * p.s, ka = base + (p.hk + kh) * p.s;
    const float qn = inv_norm(qa), kn = inv_norm(ka);
    precise float sp = alpha.d[p.alpha_off + t * p.hv + h] + dt_bias.d[p.dt_off + h];
    sp = sp > 20.0 ? sp : log(1.0 + exp(sp));
    precise float decay = exp(sp * av.d[p.a_off + h]);
    precise float b = 1.0 / (1.0 + exp(-beta.d[p.beta_off + t * p.hv + h]));
    precise float sum = 0.0;
    for (uint i = 0u; i < p.s; ++i) {
      precise float m = state.d[row + i] * decay;
      state.d[row + i] = m;
      precise float ki = qkv.d[ka + i] * kn;
      sum += m * ki;
    }
    precise float d = (qkv.d[base + (2u * p.hk + h) * p.s + j] - sum) * b;
    precise float o = 0.0;
    for (uint i = 0u; i < p.s; ++i) {
      precise float ki = qkv.d[ka + i] * kn;
      precise float m = state.d[row + i] + d * ki;
      state.d[row + i] = m;
      precise float qi = qkv.d[qa + i] * qn;
      o += m * qi;
    }
    precise float y = o * p.scale;
    outb.d[p.out_off + (t * p.hv + h) * p.s + j] = y;
  }
}
