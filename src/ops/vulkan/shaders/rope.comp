// RopeOp: one invocation per (token, pair j) turns pair j of every q and k head of that token by
// pos * freqs[j]; pairs come from the first `rot` elements of each head (all of them but with partial rotary), the
// rest pass through. The host always passes a frequency table: the op's own (scaled rope, cos and sin then
// times mscale) or theta^(-2j/head_dim) computed on the host exactly as the reference computes it (GLSL's
// pow is allowed several ulp of error, which pos up to 1e5 would turn into visibly wrong angles).
//
// sin and cos are computed here, not with GLSL's builtins, whose precision Vulkan only bounds on [-pi, pi]:
// the angle is reduced by k * pi/2 with pi/2 split in 8-bit parts (k * part is exact for k < 2^16, angles up
// to about 1e5) and the remainder, in [-pi/4, pi/4], goes through minimax polynomials (Cephes' sinf/cosf
// coefficients), within an ulp or two of libm's correctly rounded values.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) buffer Q { float d[]; } q;
layout(set = 0, binding = 1) buffer K { float d[]; } k;
layout(set = 0, binding = 2) readonly buffer Pos { int d[]; } pos;
layout(set = 0, binding = 3) readonly buffer Freqs { float d[]; } freqs;
layout(push_constant) uniform Push {
  uint q_off, k_off, pos_off, freqs_off;
  uint q_heads, k_heads, head_dim, n;
  uint interleaved, use_mscale;
  float mscale;
  uint rot;  // elements turned per head (head_dim but with partial rotary)
} p;

#include "common.glsl"

vec2 sin_cos(float a) {
  precise float kf = floor(a * 0.636619772 + 0.5);
  precise float r = a - kf * 1.5703125;
  r = r - kf * 0.0004825592041015625;
  r = r - kf * 0.00000126659870147705078125;
  r = r - kf * 9.895302355289459228515625e-10;
  r = r - kf * 2.5633440682570896e-12;
  precise float z = r * r;
  precise float s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
  precise float c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
  const int quadrant = int(kf) & 3;
  if (quadrant == 0) return vec2(s, c);
  if (quadrant == 1) return vec2(c, -s);
  if (quadrant == 2) return vec2(-s, -c);
  return vec2(-c, s);
}

void main() {
  const uint half_dim = p.rot / 2u;
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.n * half_dim) return;
  const uint t = g / half_dim, j = g % half_dim;
  precise float angle = float(pos.d[p.pos_off + t]) * freqs.d[p.freqs_off + j];
  vec2 sc = sin_cos(angle);
  precise float c = sc.y, s = sc.x;
  if (p.use_mscale != 0u) {
    c = c * p.mscale;
    s = s * p.mscale;
  }
  const uint a = p.interleaved != 0u ? 2u * j : j;
  const uint b = p.interleaved != 0u ? 2u * j + 1u : j + half_dim;
  for (uint h = 0u; h < p.q_heads; ++h) {
    const uint base = p.q_off + (t * p.q_heads + h) * p.head_dim;
    const float x0 = q.d[base + a], x1 = q.d[base + b];
    precise float y0 = x0 * c - x1 * s;
    precise float y1 = x0 * s + x1 * c;
    q.d[base + a] = y0;
    q.d[base + b] = y1;
  }
  for (uint h = 0u; h < p.k_heads; ++h) {
    const uint base = p.k_off + (t * p.k_heads + h) * p.head_dim;
    const float x0 = k.d[base + a], x1 = k.d[base + b];
    precise float y0 = x0 * c - x1 * s;
    precise float y1 = x0 * s + x1 * c;
    k.d[base + a] = y0;
    k.d[base + b] = y1;
  }
}
