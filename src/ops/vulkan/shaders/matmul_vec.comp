// MatMulOp for a few activation rows (decode, n <= 8): out[r, i] for every activation row r of 8 weight
// rows i per workgroup. Each weight row is widened four elements at a time (dequant.glsl) and multiplied with
// every activation row. No barrier anywhere: barriers cost far more than the arithmetic on CPU-hosted Vulkan
// (lavapipe runs a workgroup's invocations as coroutines).
// - Built with -DSUBGROUPS (where the device reports subgroup arithmetic in compute): each subgroup takes a
//   weight row at a time, its invocations stride over k, and subgroupAdd sums their partials.
// - Otherwise each invocation of the first 8 computes one weight row alone.
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

const uint NMAX = 8u, ROWS = 8u;

// Partial sums of weight row i against every activation row, over groups of four from `first` by `step`.
void row_partials(uint i, uint first, uint step, inout float acc[NMAX]) {
  const uint rb = p.w_off + i * p.row_bytes;
  for (uint e = first; e < p.k; e += step) {
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
}

void store(uint i, uint r, float s) {
  outb.d[p.out_off + r * p.out_stride + i] = p.has_bias != 0u ? s + bias.d[p.bias_off + i] : s;
}

void main() {
  const uint base = linear_group() * ROWS;
#ifdef SUBGROUPS
  for (uint row = gl_SubgroupID; row < ROWS; row += gl_NumSubgroups) {
    const uint i = base + row;
    if (i >= p.m) break;
    float acc[NMAX];
    for (uint r = 0u; r < NMAX; ++r) acc[r] = 0.0;
    row_partials(i, 4u * gl_SubgroupInvocationID, 4u * gl_SubgroupSize, acc);
    for (uint r = 0u; r < NMAX; ++r) {
      if (r >= p.n) break;
      const float s = subgroupAdd(acc[r]);
      if (subgroupElect()) store(i, r, s);
    }
  }
#else
  const uint i = base + gl_LocalInvocationID.x;
  if (gl_LocalInvocationID.x >= ROWS || i >= p.m) return;
  float acc[NMAX];
  for (uint r = 0u; r < NMAX; ++r) acc[r] = 0.0;
  row_partials(i, 0u, 4u, acc);
  for (uint r = 0u; r < p.n; ++r) store(i, r, acc[r]);
#endif
}
