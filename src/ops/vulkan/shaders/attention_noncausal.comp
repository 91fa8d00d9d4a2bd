// AttentionNonCausalOp, one workgroup per (query, head): every key of the sequence in chunks of 64 with an online
// softmax. Invocation t scores key c + t (a sum in element order), the workgroup takes the chunk's maximum, rescales
// what it holds and adds the chunk's weighted values; each invocation keeps the output elements d = t, t + 64, ...
// (head_dim up to 64 * MAXD). Scores are q.k * p.scale (the host passes 1 / sqrt(head_dim) when the op's is 0).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer Q { float d[]; } q;
layout(set = 0, binding = 1) readonly buffer K { float d[]; } k;
layout(set = 0, binding = 2) readonly buffer V { float d[]; } v;
layout(set = 0, binding = 3) writeonly buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint q_off, k_off, v_off, out_off, n, heads, kv_heads, head_dim;
  float scale;
} p;

#include "common.glsl"

const uint WG = 64u;
const uint MAXD = 8u;
shared float qs[WG * MAXD];
shared float ps[WG];
shared float red[WG];

void main() {
  const uint item = linear_group();
  if (item >= p.n * p.heads) return;
  const uint t = gl_LocalInvocationID.x;
  const uint i = item / p.heads, h = item % p.heads;
  const uint kvh = h / (p.heads / p.kv_heads);
  const uint qo = p.q_off + (i * p.heads + h) * p.head_dim;
  for (uint d = t; d < p.head_dim; d += WG) qs[d] = q.d[qo + d];
  barrier();
  float m = uintBitsToFloat(0xff800000u), l = 0.0;
  float acc[MAXD];
  for (uint c = 0u; c < MAXD; ++c) acc[c] = 0.0;
  for (uint c0 = 0u; c0 < p.n; c0 += WG) {
    const uint key = c0 + t;
    float s = uintBitsToFloat(0xff800000u);
    if (key < p.n) {
      const uint ko = p.k_off + (key * p.kv_heads + kvh) * p.head_dim;
      precise float dot = 0.0;
      for (uint d = 0u; d < p.head_dim; ++d) dot += qs[d] * k.d[ko + d];
      s = dot * p.scale;
    }
    red[t] = s;
    barrier();
    for (uint st = WG / 2u; st > 0u; st >>= 1) {
      if (t < st) red[t] = red[t + st] > red[t] ? red[t + st] : red[t];
      barrier();
    }
    const float mnew = red[0] > m ? red[0] : m;
    const float alpha = exp(m - mnew);  // 0 on the first chunk (m = -inf)
    ps[t] = key < p.n ? exp(s - mnew) : 0.0;
    barrier();
    const uint count = min(WG, p.n - c0);
    precise float chunk = 0.0;
    for (uint j = 0u; j < count; ++j) chunk += ps[j];
    l = l * alpha + chunk;
    for (uint c = 0u; c < MAXD; ++c) {
      const uint d = t + c * WG;
      if (d >= p.head_dim) break;
      precise float a = acc[c] * alpha;
      for (uint j = 0u; j < count; ++j) a += ps[j] * v.d[p.v_off + ((c0 + j) * p.kv_heads + kvh) * p.head_dim + d];
      acc[c] = a;
    }
    m = mnew;
    barrier();
  }
  const uint oo = p.out_off + (i * p.heads + h) * p.head_dim;
  for (uint c = 0u; c < MAXD; ++c) {
    const uint d = t + c * WG;
    if (d >= p.head_dim) break;
    outb.d[oo + d] = acc[c] / l;
  }
}
