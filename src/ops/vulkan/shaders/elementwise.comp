// SiluMulOp (p.op 0: silu(a) * b; 1: gelu_tanh(a) * b; 3: b / (1 + exp(-a)), the sigmoid gate, whose a may hold
// one value per row of b: a_per elements of b share a[g / a_per]), AddOp (p.op 2: a + b), ScaleOp (p.op 4:
// b * scale) and ActivationOp (p.op 5 silu(b), 6 gelu_tanh(b), 7 gelu_erf(b), 8 tanh(b)), one element per invocation, in the
// reference's operation order. The one-input operators bind their input as both a and b.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer A { float d[]; } a;
layout(set = 0, binding = 1) readonly buffer B { float d[]; } b;
layout(set = 0, binding = 2) writeonly buffer Out { float d[]; } outb;
layout(push_constant) uniform Push {
  uint a_off, b_off, out_off, count, op, a_per;
  float scale;
} p;

#include "common.glsl"

// erf(x) as 1 - erfc(|x|) with the sign restored; erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P the degree-9
// polynomial of Numerical Recipes' erfcc (fractional error below 1.2e-7 for every z >= 0). Infinities give +-1, NaN
// stays NaN.
float erf_approx(float x) {
  const float z = abs(x);
  const float t = 1.0 / (1.0 + 0.5 * z);
  precise float poly = -0.82215223 + t * 0.17087277;
  poly = 1.48851587 + t * poly;
  poly = -1.13520398 + t * poly;
  poly = 0.27886807 + t * poly;
  poly = -0.18628806 + t * poly;
  poly = 0.09678418 + t * poly;
  poly = 0.37409196 + t * poly;
  poly = 1.00002368 + t * poly;
  poly = -1.26551223 + t * poly;
  const float erfc_z = z > 10.0 ? 0.0 : t * exp(-z * z + poly);
  const float r = 1.0 - erfc_z;
  return x < 0.0 ? -r : (nan_bits(x) ? x : r);
}

// tanh x for a = |x|: below 0.4 its Taylor series to a^15, from there 1 - 2 / (e^2a + 1) with a capped at 9 (where
// tanh rounds to 1); the sign is x's, NaN stays NaN. (The built-in's cancellation near 0 is the driver's to choose.)
float tanh_odd(float x) {
  const float a = abs(x), a2 = a * a;
  precise float poly = -929569.0 / 638512875.0;
  poly = 21844.0 / 6081075.0 + a2 * poly;
  poly = -1382.0 / 155925.0 + a2 * poly;
  poly = 62.0 / 2835.0 + a2 * poly;
  poly = -17.0 / 315.0 + a2 * poly;
  poly = 2.0 / 15.0 + a2 * poly;
  poly = -1.0 / 3.0 + a2 * poly;
  precise float small = a + a * (a2 * poly);
  precise float large = 1.0 - 2.0 / (exp(2.0 * min(a, 9.0)) + 1.0);
  const float r = a < 0.4 ? small : large;
  return x < 0.0 ? -r : (nan_bits(x) ? x : r);
}

float gelu_tanh(float x) {
  precise float r = x / (1.0 + exp(-2.0 * 0.79788456080286535588 * x * (1.0 + 0.044715 * x * x)));
  return r;
}

void main() {
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.count) return;
  const float x = a.d[p.a_off + g / p.a_per], y = b.d[p.b_off + g];
  precise float r;
  if (p.op == 0u) {
    r = x * (1.0 / (1.0 + exp(-x)));
    r = r * y;
  } else if (p.op == 1u) {
    r = gelu_tanh(x) * y;
  } else if (p.op == 3u) {
    r = y / (1.0 + exp(-x));
  } else if (p.op == 4u) {
    r = y * p.scale;
  } else if (p.op == 5u) {
    r = y * (1.0 / (1.0 + exp(-y)));
  } else if (p.op == 6u) {
    r = gelu_tanh(y);
  } else if (p.op == 8u) {
    r = tanh_odd(y);
  } else if (p.op == 7u) {
    r = 0.5 * y;
    r = r * (1.0 + erf_approx(y * 0.70710678118654752));
  } else {
    r = x + y;
  }
  outb.d[p.out_off + g] = r;
}
