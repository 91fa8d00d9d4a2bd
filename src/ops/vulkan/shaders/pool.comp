// PoolOp, one invocation per column: kind 0 the mean (the column's sum in row order, then divided by n), 1 row 0,
// 2 row n - 1 (copies, bit for bit).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer X { float d[]; } x;
layout(set = 0, binding = 1) writeonly buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint x_off, out_off, n, dim, kind;
} p;

#include "common.glsl"

void main() {
  const uint j = linear_group() * 64u + gl_LocalInvocationID.x;
  if (j >= p.dim) return;
  if (p.kind != 0u) {
    const uint row = p.kind == 1u ? 0u : p.n - 1u;
    outb.d[p.out_off + j] = x.d[p.x_off + row * p.dim + j];
    return;
  }
  precise float s = 0.0;
  for (uint r = 0u; r < p.n; ++r) s += x.d[p.x_off + r * p.dim + j];
  outb.d[p.out_off + j] = s / float(p.n);
}
