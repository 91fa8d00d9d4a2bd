// SiluMulOp (p.op 0: silu(a) * b; 1: gelu_tanh(a) * b; 3: b / (1 + exp(-a)), the sigmoid gate, whose a may hold
// one value per row of b: a_per elements of b share a[g / a_per]) and AddOp (p.op 2: a + b), one element per
// invocation, in the reference's operation order.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer A { float d[]; } a;
layout(set = 0, binding = 1) readonly buffer B { float d[]; } b;
layout(set = 0, binding = 2) writeonly buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint a_off, b_off, out_off, count, op, a_per;
} p;

#include "common.glsl"

void main() {
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.count) return;
  const float x = a.d[p.a_off + g / p.a_per], y = b.d[p.b_off + g];
  precise float r;
  if (p.op == 0u) {
    r = x * (1.0 / (1.0 + exp(-x)));
    r = r * y;
  } else if (p.op == 1u) {
    r = x / (1.0 + exp(-2.0 * 0.79788456080286535588 * x * (1.0 + 0.044715 * x * x))) * y;
  } else if (p.op == 3u) {
    r = y / (1.0 + exp(-x));
  } else {
    r = x + y;
  }
  outb.d[p.out_off + g] = r;
}
