// MatMulOp for a few activation rows (decode): one workgroup per weight row i computes out[r, i] for every
// activation row r < n (n <= 8). Each invocation widens groups of four weights (dequant.glsl) and
// accumulates their products with each row; the workgroup's partial sums are then added with subgroup
// arithmetic (built with -DSUBGROUPS where the device reports it for compute) or through shared memory.
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef SUBGROUPS
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint WTYPE = 0u;

layout(set = 0, binding = 0) readonly buffer X { float d[]; } x;
layout(set = 0, binding = 1) readonly buffer W { uint d[]; } w;
layout(set = 0, binding = 2) writeonly buffer Out { float d[]; } outb;
layout(set = 0, binding = 3) readonly buffer Bias { float d[]; } bias;
layout(push_constant) uniform Push {
  uint x_off, w_off, out_off, bias_off;  // w_off in bytes
  uint has_bias, k, m, n, row_bytes;
  uint out_stride;  // out's row length: m is this dispatch's slice of weight rows
} p;

#include "common.glsl"
#define W_WORD(i) w.d[i]
#include "dequant.glsl"

const uint WG = 64u, NMAX = 8u;
shared float red[NMAX][WG];

void main() {
  const uint i = linear_group();
  if (i >= p.m) return;
  const uint t = gl_LocalInvocationID.x;
  const uint rb = p.w_off + i * p.row_bytes;
  float acc[NMAX];
  for (uint r = 0u; r < NMAX; ++r) acc[r] = 0.0;
  for (uint e = 4u * t; e < p.k; e += 4u * WG) {
    const vec4 wv = dq4(rb, e, p.k);
    for (uint r = 0u; r < NMAX; ++r) {
      if (r >= p.n) break;
      const uint xo = p.x_off + r * p.k + e;
      vec4 xv = vec4(0.0);
      for (uint c = 0u; c < 4u; ++c)
        if (e + c < p.k) xv[c] = x.d[xo + c];
      acc[r] += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w;
    }
  }
#ifdef SUBGROUPS
  for (uint r = 0u; r < NMAX; ++r) {
    if (r >= p.n) break;
    const float s = subgroupAdd(acc[r]);
    if (subgroupElect()) red[r][gl_SubgroupID] = s;
  }
  barrier();
  if (t < p.n) {
    float s = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) s += red[t][g];
    outb.d[p.out_off + t * p.out_stride + i] = p.has_bias != 0u ? s + bias.d[p.bias_off + i] : s;
  }
#else
  for (uint r = 0u; r < NMAX; ++r) red[r][t] = acc[r];
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s)
      for (uint r = 0u; r < NMAX; ++r) red[r][t] = red[r][t] + red[r][t + s];
    barrier();
  }
  if (t < p.n) {
    const float s = red[t][0];
    outb.d[p.out_off + t * p.out_stride + i] = p.has_bias != 0u ? s + bias.d[p.bias_off + i] : s;
  }
#endif
}
