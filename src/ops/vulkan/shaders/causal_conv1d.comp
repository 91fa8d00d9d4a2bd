// CausalConv1dOp, one invocation per channel: out[t][c] = silu(sum over taps i, in order, of weight[c][i] w[t + i][c])
// over the window w = [state; x] (state read as zeros when reset), then the channel's state becomes the last K - 1
// rows of w. Channels are independent, so each invocation carries its own column through the n tokens; the state
// is rewritten row by row upwards, each new row taken from a later old one (not yet rewritten) or from x.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer X { float d[]; } x;
layout(set = 0, binding = 1) readonly buffer W { float d[]; } weight;
layout(set = 0, binding = 2) buffer State { float d[]; } state;
layout(set = 0, binding = 3) writeonly buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint x_off, w_off, s_off, out_off, n, channels, taps, reset;
} p;

#include "common.glsl"

uint c_;
// Row r of the window [state; x] in channel c_.
float window(uint r) {
  const uint keep = p.taps - 1u;
  if (r < keep) return p.reset != 0u ? 0.0 : state.d[p.s_off + r * p.channels + c_];
  return x.d[p.x_off + (r - keep) * p.channels + c_];
}

void main() {
  c_ = linear_group() * 64u + gl_LocalInvocationID.x;
  if (c_ >= p.channels) return;
  for (uint t = 0u; t < p.n; ++t) {
    precise float sum = 0.0;
    for (uint i = 0u; i < p.taps; ++i) sum += window(t + i) * weight.d[p.w_off + c_ * p.taps + i];
    precise float y = sum / (1.0 + exp(-sum));
    outb.d[p.out_off + t * p.channels + c_] = y;
  }
  for (uint r = 0u; r + 1u < p.taps; ++r) state.d[p.s_off + r * p.channels + c_] = window(p.n + r);
}
