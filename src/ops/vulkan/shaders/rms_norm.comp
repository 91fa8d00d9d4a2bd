// RmsNormOp and AddRmsNormOp (p.add = 1: x += delta first, written back), one workgroup per row:
// out = w * (1 / sqrt(mean(x^2) + eps) * x), the reference's operation order except the sum's.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) buffer X { float d[]; } x;
layout(set = 0, binding = 1) readonly buffer Delta { float d[]; } delta;
layout(set = 0, binding = 2) readonly buffer W { float d[]; } w;
layout(set = 0, binding = 3) buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint x_off, delta_off, w_off, out_off;
  uint dim, rows, add;
  float eps;
} p;

#include "common.glsl"

shared float partial[64];

void main() {
  const uint r = linear_group();
  if (r >= p.rows) return;
  const uint t = gl_LocalInvocationID.x;
  const uint xo = p.x_off + r * p.dim, oo = p.out_off + r * p.dim, dlo = p.delta_off + r * p.dim;
  precise float ss = 0.0;
  for (uint j = t; j < p.dim; j += 64u) {
    precise float v = x.d[xo + j];
    if (p.add != 0u) {
      v = v + delta.d[dlo + j];
      x.d[xo + j] = v;
    }
    ss += v * v;
  }
  partial[t] = ss;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) partial[t] = partial[t] + partial[t + s];
    barrier();
  }
  precise float inv = partial[0] / float(p.dim);
  inv = inv + p.eps;
  inv = 1.0 / sqrt(inv);
  for (uint j = t; j < p.dim; j += 64u) {
    precise float v = w.d[p.w_off + j] * (inv * x.d[xo + j]);
    outb.d[oo + j] = v;
  }
}
