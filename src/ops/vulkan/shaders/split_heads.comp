// SplitHeadsOp: a[r] = the first d elements of head row r of x [n, H, 2 d], b[r] the last d; one invocation per
// element of a (and the one of b beside it).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer X { float d[]; } x;
layout(set = 0, binding = 1) writeonly buffer A { float d[]; } a;
layout(set = 0, binding = 2) writeonly buffer B { float d[]; } b;
layout(push_constant) uniform Push {
  uint x_off, a_off, b_off, d, count;  // count: rows * d
} p;

#include "common.glsl"

void main() {
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.count) return;
  const uint r = g / p.d, i = g % p.d;
  a.d[p.a_off + g] = x.d[p.x_off + 2u * r * p.d + i];
  b.d[p.b_off + g] = x.d[p.x_off + 2u * r * p.d + p.d + i];
}
