// KvWriteOp: k and v rows of token t go to cache row slots[t]; two elements per invocation so that an f16
// cache is written in whole 32-bit words (p.f16 = 1; rows have an even number of elements and the cache
// views start on a word). A slot outside the cache sets the error word and writes nothing.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer Kin { float d[]; } kin;
layout(set = 0, binding = 1) readonly buffer Vin { float d[]; } vin;
layout(set = 0, binding = 2) buffer Kc { uint d[]; } kc;
layout(set = 0, binding = 3) buffer Vc { uint d[]; } vc;
layout(set = 0, binding = 4) readonly buffer Slots { int d[]; } slots;
layout(set = 0, binding = 5) buffer Err { uint d[]; } err;
layout(push_constant) uniform Push {
  uint k_off, v_off, kc_off, vc_off, slots_off;  // kc_off, vc_off: in cache elements
  uint row, capacity, n, f16;
} p;

#include "common.glsl"

void main() {
  const uint pairs = p.row / 2u;
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.n * pairs) return;
  const uint t = g / pairs, i = (g % pairs) * 2u;
  const int slot = slots.d[p.slots_off + t];
  if (slot < 0 || uint(slot) >= p.capacity) {
    atomicOr(err.d[0], 1u);
    return;
  }
  const uint src = t * p.row + i, dst = uint(slot) * p.row + i;
  const float k0 = kin.d[p.k_off + src], k1 = kin.d[p.k_off + src + 1u];
  const float v0 = vin.d[p.v_off + src], v1 = vin.d[p.v_off + src + 1u];
  if (p.f16 != 0u) {
    kc.d[(p.kc_off + dst) / 2u] = f2h(k0) | (f2h(k1) << 16);
    vc.d[(p.vc_off + dst) / 2u] = f2h(v0) | (f2h(v1) << 16);
  } else {
    kc.d[p.kc_off + dst] = floatBitsToUint(k0);
    kc.d[p.kc_off + dst + 1u] = floatBitsToUint(k1);
    vc.d[p.vc_off + dst] = floatBitsToUint(v0);
    vc.d[p.vc_off + dst + 1u] = floatBitsToUint(v1);
  }
}
