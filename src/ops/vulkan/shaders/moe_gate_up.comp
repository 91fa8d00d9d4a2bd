// MoeExpertsOp, part 1 of 2: h[t * k + j, i] = act(gate[e] row i . x[t] + gate_bias[e, i], up[e] row i . x[t] +
// up_bias[e, i]) for e = ids[t, j], one invocation per (row, slot, hidden unit), each reading its expert's two rows
// (dequant.glsl, four elements at a time). Rows [row_base, row_base + rows) of x go into h (a scratch buffer) per
// dispatch. gate and up share a weight type; fused gate_up binds one tensor twice, up's rows ff rows after gate's.
// An expert id outside [0, experts) sets the stream's error word and gives 0.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint WTYPE = 0u;

layout(set = 0, binding = 0) readonly buffer X { float d[]; } x;
layout(set = 0, binding = 1) readonly buffer Ids { int d[]; } ids;
layout(set = 0, binding = 2) readonly buffer Gate { uint d[]; } gw;
layout(set = 0, binding = 3) readonly buffer Up { uint d[]; } uw;
layout(set = 0, binding = 4) readonly buffer GateBias { float d[]; } gb;
layout(set = 0, binding = 5) readonly buffer UpBias { float d[]; } ub;
layout(set = 0, binding = 6) writeonly buffer H { float d[]; } h;
layout(set = 0, binding = 7) buffer Err { uint d[]; } err;
layout(push_constant) uniform Push {
  uint x_off, ids_off, g_off, u_off;  // g_off, u_off in bytes
  uint gb_off, ub_off, h_off, has_gb, has_ub;
  uint row_base, rows, k, dim, ff, experts;
  uint expert_bytes, row_bytes;  // between two experts' first rows; one row
  uint act;                      // 0 silu, 1 gelu_tanh, 2 swiglu_oai
  float alpha, limit;
} p;

#include "common.glsl"
// dequant.glsl reads one binding; wsel picks gate's or up's for the dq4 calls that follow.
uint wsel = 0u;
#define W_WORD(i) (wsel == 0u ? gw.d[i] : uw.d[i])
#include "dequant.glsl"

// As ops/ref's gated(), operation for operation.
float gated(float g, float u) {
  precise float r;
  if (p.act == 1u) {
    r = g / (1.0 + exp(-2.0 * 0.79788456080286535588 * g * (1.0 + 0.044715 * g * g))) * u;
  } else if (p.act == 2u) {
    const float a = p.limit < g ? p.limit : g;                              // std::min(g, limit)
    const float b = u < -p.limit ? -p.limit : (p.limit < u ? p.limit : u);  // std::clamp(u, -limit, limit)
    r = a / (1.0 + exp(p.alpha * (-a))) * (b + 1.0);
  } else {
    r = g * (1.0 / (1.0 + exp(-g)));
    r = r * u;
  }
  return r;
}

void main() {
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.rows * p.k * p.ff) return;
  const uint tk = g / p.ff, i = g % p.ff;
  const int e = ids.d[p.ids_off + p.row_base * p.k + tk];
  const uint ho = p.h_off + tk * p.ff + i;
  if (e < 0 || uint(e) >= p.experts) {
    atomicOr(err.d[0], 1u);
    h.d[ho] = 0.0;
    return;
  }
  const uint xo = p.x_off + (p.row_base + tk / p.k) * p.dim;
  const uint at = uint(e) * p.expert_bytes + i * p.row_bytes;
  float gs = 0.0, us = 0.0;
  for (uint c = 0u; c < p.dim; c += 4u) {
    wsel = 0u;
    const vec4 gv = dq4(p.g_off + at, c, p.dim);
    wsel = 1u;
    const vec4 uv = dq4(p.u_off + at, c, p.dim);
    vec4 xv = vec4(0.0);
    for (uint q = 0u; q < 4u; ++q)
      if (c + q < p.dim) xv[q] = x.d[xo + c + q];
    gs += gv.x * xv.x + gv.y * xv.y + gv.z * xv.z + gv.w * xv.w;
    us += uv.x * xv.x + uv.y * xv.y + uv.z * xv.z + uv.w * xv.w;
  }
  if (p.has_gb != 0u) gs += gb.d[p.gb_off + uint(e) * p.ff + i];
  if (p.has_ub != 0u) us += ub.d[p.ub_off + uint(e) * p.ff + i];
  h.d[ho] = gated(gs, us);
}
