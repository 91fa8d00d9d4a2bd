// KvWriteOp: k and v rows of token t go to cache row slots[t], converted as base/quant converts them (p.ctype:
// 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0). Whole 32-bit words are written so that no two invocations share one: two
// elements per invocation for f32, f16 and bf16 (rows have an even number of elements, cache views start on a
// word), two blocks of 32 for the block types (a token's row holds an even number of blocks, and two blocks are
// 68 or 36 bytes, so each pair starts on a word). A slot outside the cache sets the error word and writes nothing.
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
  uint k_off, v_off, kc_off, vc_off, slots_off;  // kc_off, vc_off: cache elements, or bytes for the block types
  uint row, capacity, n, ctype;
} p;

#include "common.glsl"

// base/quant's f32_to_bf16: round to nearest even, NaN kept quiet.
uint f2bf(float f) {
  uint x = floatBitsToUint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;
  x += 0x7fffu + ((x >> 16) & 1u);
  return x >> 16;
}

uint conv(float f) { return p.ctype == 1u ? f2h(f) : f2bf(f); }

// std::lround: to nearest, halves away from zero (a - floor(a) is exact below 2^23).
int lround_away(float v) {
  const float a = abs(v), fl = floor(a);
  const float r = a - fl >= 0.5 ? fl + 1.0 : fl;
  return v < 0.0 ? -int(r) : int(r);
}

uint words[17];  // one pair of blocks: 68 bytes (q8_0) or 36 (q4_0)

void put(uint at, uint b) { words[at >> 2] |= (b & 0xffu) << ((at & 3u) * 8u); }

// One block of 32 elements starting at x[src] into words at byte `at`, as base/quant's quantize_q8_0 / q4_0.
void quant_block(bool is_k, uint src, uint at) {
  float x[32];
  for (uint i = 0u; i < 32u; ++i) x[i] = is_k ? kin.d[src + i] : vin.d[src + i];
  if (p.ctype == 3u) {
    float amax = 0.0;
    for (uint i = 0u; i < 32u; ++i) amax = abs(x[i]) > amax ? abs(x[i]) : amax;  // std::fmax: a NaN is passed over
    const float d = amax / 127.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    const uint h = f2h(d);
    put(at, h), put(at + 1u, h >> 8);
    for (uint i = 0u; i < 32u; ++i) {
      precise float v = x[i] * id;
      put(at + 2u + i, uint(lround_away(v)));
    }
    return;
  }
  float amax = 0.0, mx = 0.0;
  for (uint i = 0u; i < 32u; ++i) {
    if (abs(x[i]) > amax) {
      amax = abs(x[i]);
      mx = x[i];
    }
  }
  const float d = mx / -8.0;
  const float id = d != 0.0 ? 1.0 / d : 0.0;
  const uint h = f2h(d);
  put(at, h), put(at + 1u, h >> 8);
  for (uint j = 0u; j < 16u; ++j) {
    precise float a = x[j] * id;
    a = a + 8.5;
    precise float b = x[j + 16u] * id;
    b = b + 8.5;
    const int qa = clamp(int(a), 0, 15), qb = clamp(int(b), 0, 15);
    put(at + 2u + j, uint(qa) | (uint(qb) << 4));
  }
}

void main() {
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (p.ctype >= 3u) {
    const uint pairs = p.row / 64u, bb = p.ctype == 3u ? 34u : 18u, nw = bb / 2u;
    if (g >= p.n * pairs) return;
    const uint t = g / pairs, pb = g % pairs;
    const int slot = slots.d[p.slots_off + t];
    if (slot < 0 || uint(slot) >= p.capacity) {
      atomicOr(err.d[0], 1u);
      return;
    }
    const uint src = t * p.row + pb * 64u, dst = uint(slot) * (p.row / 32u) * bb + pb * 2u * bb;
    for (uint which = 0u; which < 2u; ++which) {
      for (uint w = 0u; w < 17u; ++w) words[w] = 0u;
      quant_block(which == 0u, (which == 0u ? p.k_off : p.v_off) + src, 0u);
      quant_block(which == 0u, (which == 0u ? p.k_off : p.v_off) + src + 32u, bb);
      const uint base = ((which == 0u ? p.kc_off : p.vc_off) + dst) >> 2;
      for (uint w = 0u; w < nw; ++w) {
        if (which == 0u) {
          kc.d[base + w] = words[w];
        } else {
          vc.d[base + w] = words[w];
        }
      }
    }
    return;
  }
  const uint pairs = p.row / 2u;
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
  if (p.ctype != 0u) {
    kc.d[(p.kc_off + dst) / 2u] = conv(k0) | (conv(k1) << 16);
    vc.d[(p.vc_off + dst) / 2u] = conv(v0) | (conv(v1) << 16);
  } else {
    kc.d[p.kc_off + dst] = floatBitsToUint(k0);
    kc.d[p.kc_off + dst + 1u] = floatBitsToUint(k1);
    vc.d[p.vc_off + dst] = floatBitsToUint(v0);
    vc.d[p.vc_off + dst + 1u] = floatBitsToUint(v1);
  }
}
