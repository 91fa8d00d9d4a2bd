// MatMulOp for many activation rows (prefill, large decode batches): each workgroup computes a 32 x 32 tile
// of out (32 weight rows x 32 activation rows), stepping through k 32 at a time. Per step the 128
// invocations widen the tile's weights (dequant.glsl, four at a time) and load the activations into
// shared memory, then each accumulates a 2 x 4 block of outputs. Rows and columns past the matrix edges
// load as zeros and are not written.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint WTYPE = 0u;

layout(set = 0, binding = 0) readonly buffer X { float d[]; } x;
layout(set = 0, binding = 1) readonly buffer W { uint d[]; } w;
layout(set = 0, binding = 2) writeonly buffer Out { float d[]; } outb;
layout(set = 0, binding = 3) readonly buffer Bias { float d[]; } bias;
layout(push_constant) uniform Push {
  uint x_off, w_off, out_off, bias_off;
  uint has_bias, k, m, n, row_bytes;
  uint out_stride;  // out's row length: m is this dispatch's slice of weight rows
} p;

#include "common.glsl"
#define W_WORD(i) w.d[i]
#include "dequant.glsl"

const uint TM = 32u, TN = 32u, TK = 32u;
shared float ws[TM][TK + 1u];
shared float xs[TN][TK + 1u];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint i0 = gl_WorkGroupID.x * TM, r0 = gl_WorkGroupID.y * TN;
  const uint tx = t % 16u, ty = t / 16u;  // outputs: weight rows i0 + 2 tx + {0,1}, activation rows r0 + 4 ty + {0..3}
  float acc[2][4];
  for (uint a = 0u; a < 2u; ++a)
    for (uint b = 0u; b < 4u; ++b) acc[a][b] = 0.0;
  for (uint k0 = 0u; k0 < p.k; k0 += TK) {
    // 32 rows x 8 groups of four = 256 loads of each tile: two per invocation.
    for (uint l = t; l < TM * (TK / 4u); l += 128u) {
      const uint row = l / (TK / 4u), e = k0 + 4u * (l % (TK / 4u));
      const uint i = i0 + row;
      vec4 v = vec4(0.0);
      if (i < p.m && e < p.k) v = dq4(p.w_off + i * p.row_bytes, e, p.k);
      for (uint c = 0u; c < 4u; ++c) ws[row][e - k0 + c] = v[c];
      const uint r = r0 + row;
      vec4 xv = vec4(0.0);
      if (r < p.n)
        for (uint c = 0u; c < 4u; ++c)
          if (e + c < p.k) xv[c] = x.d[p.x_off + r * p.k + e + c];
      for (uint c = 0u; c < 4u; ++c) xs[row][e - k0 + c] = xv[c];
    }
    barrier();
    for (uint kk = 0u; kk < TK; ++kk) {
      const float w0 = ws[2u * tx][kk], w1 = ws[2u * tx + 1u][kk];
      for (uint b = 0u; b < 4u; ++b) {
        const float xv = xs[4u * ty + b][kk];
        acc[0][b] += w0 * xv;
        acc[1][b] += w1 * xv;
      }
    }
    barrier();
  }
  for (uint a = 0u; a < 2u; ++a) {
    const uint i = i0 + 2u * tx + a;
    if (i >= p.m) continue;
    const float bv = p.has_bias != 0u ? bias.d[p.bias_off + i] : 0.0;
    for (uint b = 0u; b < 4u; ++b) {
      const uint r = r0 + 4u * ty + b;
      if (r < p.n) outb.d[p.out_off + r * p.out_stride + i] = p.has_bias != 0u ? acc[a][b] + bv : acc[a][b];
    }
  }
}
