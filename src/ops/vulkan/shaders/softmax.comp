// SoftmaxOp, one workgroup per row: the maximum (NaN never becomes it, as in the reference's comparison),
// exponentials of x - max and their sum, then each divided by the sum.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer X { float d[]; } x;
layout(set = 0, binding = 1) buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint x_off, out_off, m, rows;
} p;

#include "common.glsl"

const uint WG = 64u;
shared float red[WG];

void main() {
  const uint r = linear_group();
  if (r >= p.rows) return;
  const uint t = gl_LocalInvocationID.x;
  const uint xo = p.x_off + r * p.m, oo = p.out_off + r * p.m;
  float mx = uintBitsToFloat(0xff800000u);
  for (uint j = t; j < p.m; j += WG) {
    const float v = x.d[xo + j];
    mx = v > mx ? v : mx;
  }
  red[t] = mx;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) red[t] = red[t + s] > red[t] ? red[t + s] : red[t];
    barrier();
  }
  mx = red[0];
  barrier();
  float sum = 0.0;
  for (uint j = t; j < p.m; j += WG) {
    const float e = exp(x.d[xo + j] - mx);
    outb.d[oo + j] = e;
    sum += e;
  }
  red[t] = sum;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) red[t] = red[t] + red[t + s];
    barrier();
  }
  sum = red[0];
  for (uint j = t; j < p.m; j += WG) outb.d[oo + j] = outb.d[oo + j] / sum;
}
