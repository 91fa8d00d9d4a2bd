// MoeExpertsOp, part 2 of 2: out[t, i] = sum over slots j = 0 .. k-1, in order, of weights[t, j] * (down[e] row i .
// h[t * k + j] + down_bias[e, i]), e = ids[t, j] (the first product assigned, as the reference), one invocation per
// (row, output). Rows [row_base, row_base + rows) per dispatch, h holding theirs (moe_gate_up.comp); out may be x
// (every row of x this dispatch overwrites was read by the gate_up dispatch before it). Expert ids outside
// [0, experts) were flagged there; here they count as 0.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint WTYPE = 0u;

layout(set = 0, binding = 0) readonly buffer H { float d[]; } h;
layout(set = 0, binding = 1) readonly buffer Ids { int d[]; } ids;
layout(set = 0, binding = 2) readonly buffer Weights { float d[]; } wts;
layout(set = 0, binding = 3) readonly buffer Down { uint d[]; } dw;
layout(set = 0, binding = 4) readonly buffer DownBias { float d[]; } db;
layout(set = 0, binding = 5) writeonly buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint h_off, ids_off, w_off, d_off;  // d_off in bytes
  uint db_off, out_off, has_db;
  uint row_base, rows, k, dim, ff, experts;
  uint expert_bytes, row_bytes;
} p;

#include "common.glsl"
#define W_WORD(i) dw.d[i]
#include "dequant.glsl"

void main() {
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.rows * p.dim) return;
  const uint t = g / p.dim, i = g % p.dim;
  precise float acc = 0.0;
  for (uint j = 0u; j < p.k; ++j) {
    const uint slot = (p.row_base + t) * p.k + j;
    const int e = ids.d[p.ids_off + slot];
    float y = 0.0;
    if (e >= 0 && uint(e) < p.experts) {
      const uint rb = p.d_off + uint(e) * p.expert_bytes + i * p.row_bytes;
      const uint ho = p.h_off + (t * p.k + j) * p.ff;
      for (uint c = 0u; c < p.ff; c += 4u) {
        const vec4 wv = dq4(rb, c, p.ff);
        vec4 hv = vec4(0.0);
        for (uint q = 0u; q < 4u; ++q)
          if (c + q < p.ff) hv[q] = h.d[ho + c + q];
        y += wv.x * hv.x + wv.y * hv.y + wv.z * hv.z + wv.w * hv.w;
      }
      if (p.has_db != 0u) y += db.d[p.db_off + uint(e) * p.dim + i];
    }
    const float w = wts.d[p.w_off + slot];
    acc = j == 0u ? y * w : acc + y * w;
  }
  outb.d[p.out_off + (p.row_base + t) * p.dim + i] = acc;
}
