// LayerNormOp, one workgroup per row: the mean, then the mean of the squared deviations (the population variance),
// each a sum in float over a fixed tree; out = (x - mean) / sqrt(var + eps) * w (+ b). out may alias x: every
// element is read by the invocation that writes it, after both sums.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) buffer X { float d[]; } x;
layout(set = 0, binding = 1) readonly buffer W { float d[]; } w;
layout(set = 0, binding = 2) readonly buffer Bias { float d[]; } bias;
layout(set = 0, binding = 3) buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint x_off, w_off, b_off, out_off, dim, rows, has_bias;
  float eps;
} p;

#include "common.glsl"

const uint WG = 64u;
shared float red[WG];

float row_sum(float v) {
  const uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) red[t] = red[t] + red[t + s];
    barrier();
  }
  const float total = red[0];
  barrier();
  return total;
}

void main() {
  const uint r = linear_group();
  if (r >= p.rows) return;
  const uint t = gl_LocalInvocationID.x;
  const uint xo = p.x_off + r * p.dim, oo = p.out_off + r * p.dim;
  precise float s = 0.0;
  for (uint j = t; j < p.dim; j += WG) s += x.d[xo + j];
  const float mean = row_sum(s) / float(p.dim);
  precise float sq = 0.0;
  for (uint j = t; j < p.dim; j += WG) {
    const float d = x.d[xo + j] - mean;
    sq += d * d;
  }
  precise float inv = row_sum(sq) / float(p.dim);
  inv = 1.0 / sqrt(inv + p.eps);
  for (uint j = t; j < p.dim; j += WG) {
    precise float v = (x.d[xo + j] - mean) * inv;
    v = v * w.d[p.w_off + j];
    if (p.has_bias != 0u) v = v + bias.d[p.b_off + j];
    outb.d[oo + j] = v;
  }
}
