// ArgmaxOp, one workgroup per row. The reference scans left to right keeping the first strictly greater
// value, so its answer is 0 when x[0] is NaN and otherwise the first index of the largest non-NaN value
// (0 when there is none). Each invocation finds that over its elements, the workgroup merges (larger value,
// then smaller index), and x[0] being NaN decides last.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer X { float d[]; } x;
layout(set = 0, binding = 1) writeonly buffer Out { int d[]; } outb;
layout(push_constant) uniform Push {
  uint x_off, out_off, m, rows;
} p;

#include "common.glsl"

const uint WG = 64u, NONE = 0xffffffffu;
shared float best_v[WG];
shared uint best_i[WG];

void main() {
  const uint r = linear_group();
  if (r >= p.rows) return;
  const uint t = gl_LocalInvocationID.x;
  const uint xo = p.x_off + r * p.m;
  float bv = 0.0;
  uint bi = NONE;
  for (uint j = t; j < p.m; j += WG) {
    const float v = x.d[xo + j];
    if (!nan_bits(v) && (bi == NONE || v > bv)) {
      bv = v;
      bi = j;
    }
  }
  best_v[t] = bv;
  best_i[t] = bi;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) {
      const float ov = best_v[t + s];
      const uint oi = best_i[t + s];
      const bool take = oi != NONE && (best_i[t] == NONE || ov > best_v[t] || (ov == best_v[t] && oi < best_i[t]));
      if (take) {
        best_v[t] = ov;
        best_i[t] = oi;
      }
    }
    barrier();
  }
  if (t == 0u) {
    const uint b = nan_bits(x.d[xo]) || best_i[0] == NONE ? 0u : best_i[0];
    outb.d[p.out_off + r] = int(b);
  }
}
