// Helpers shared by every shader of the vulkan backend (ops/vulkan/shaders/*.comp, compiled by glslc).
//
// Tensors reach a shader as a storage-buffer binding (a window of a VkBuffer) plus an offset inside it in
// the push constants: elements for f32 / i32 views, bytes for stored weight types. Grids larger than the
// 65535 workgroups one dimension guarantees are laid out in two dimensions; linear_group() undoes that.
// Conversions between f32 and f16 are done in integer arithmetic, bit-exact with base/quant.cc, so that
// byte-moving operators (kv_write into an f16 cache, embedding lookups) match the reference exactly on any
// device, whatever its float16 support or denormal mode.

uint linear_group() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

float h2f(uint h) {
  const uint sign = (h & 0x8000u) << 16;
  const uint e = (h >> 10) & 0x1fu;
  const uint m = h & 0x3ffu;
  if (e == 0u) {
    // Subnormal (or zero): m * 2^-24, exact in f32 (a normal number there).
    precise float v = float(m) * 5.9604644775390625e-8;
    return sign != 0u ? -v : v;
  }
  if (e == 0x1fu) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
  return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// NaN by its bits. GLSL does not promise NaN semantics (no float-controls mode is asked for), and the NVIDIA
// driver's compiler folds isnan() and turns `a < b ? b : a` into a max that drops NaN (seen on an H200:
// moe_route's normalisation of a NaN row gave 9171.9 instead of NaN); integer tests on the bits it keeps.
bool nan_bits(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }

// Round to nearest even; overflow to inf; NaN stays NaN (quiet); as base/quant.cc's f32_to_f16.
uint f2h(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint ex = (x >> 23) & 0xffu;
  uint mant = x & 0x7fffffu;
  if (ex == 0xffu) return sign | 0x7c00u | (mant != 0u ? 0x200u : 0u);
  const int e = int(ex) - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00u;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000u;
    const uint shift = uint(14 - e);
    uint half_bits = mant >> shift;
    const uint rem = mant & ((1u << shift) - 1u);
    const uint halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half_bits & 1u) != 0u)) ++half_bits;
    return sign | half_bits;
  }
  uint half_bits = (uint(e) << 10) | (mant >> 13);
  const uint rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half_bits & 1u) != 0u)) ++half_bits;
  return sign | half_bits;
}

float bf2f(uint b) { return uintBitsToFloat(b << 16); }
