// The readers of one panel block of each quantised type repacked into panels at load (repack.h has the layout):
// its P rows' f32 scales (and minimums) and its dwords of unsigned bytes, with the vector helpers they use. Read by
// matmul_repacked.h's kernels (and matmul_amx.h's tiles through them), inside the same per-build namespace, after
// matmul_packed.h.
#pragma once

#include <cstdint>

#include "ops/cpu/matmul_packed.h"

#if defined(__AVX2__)
namespace tessera::ops::cpu::TS_CPU_ISA::packed {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
inline VI ldu(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline VI vand(VI a, VI b) { return _mm512_and_si512(a, b); }
inline VI vor(VI a, VI b) { return _mm512_or_si512(a, b); }
inline VI srl(VI a, unsigned n) { return _mm512_srli_epi32(a, n); }
inline VI sll(VI a, unsigned n) { return _mm512_slli_epi32(a, n); }
inline VI sra(VI a, unsigned n) { return _mm512_srai_epi32(a, n); }
inline VI vsub(VI a, VI b) { return _mm512_sub_epi32(a, b); }
// -v, exactly (the sign bit flipped).
inline VF vneg(VF v) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), bcast(INT32_MIN))); }
// Byte i of every 16-byte lane of `table` at each byte's index (the low 4 bits of idx, whose high bits are clear).
inline VI lookup16(VI table, VI idx) { return _mm512_shuffle_epi8(table, idx); }
// 2^(e - 128) of each lane's byte e, as e8m0_half (denormal for e < 2).
inline VF e8m0_halves(const uint8_t* p) {
  const VI e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __mmask16 small = _mm512_cmplt_epi32_mask(e, bcast(2));
  const VI bits =
      _mm512_mask_sllv_epi32(_mm512_slli_epi32(_mm512_sub_epi32(e, bcast(1)), 23), small, bcast(0x00200000), e);
  return _mm512_castsi512_ps(bits);
}
inline VF cvt(VI a) { return _mm512_cvtepi32_ps(a); }
// kP f16 values from p, widened.
inline VF halves(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline void store_vf(float* p, VF v) { _mm512_store_ps(p, v); }
#else
inline VI ldu(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline VI vand(VI a, VI b) { return _mm256_and_si256(a, b); }
inline VI vor(VI a, VI b) { return _mm256_or_si256(a, b); }
inline VI srl(VI a, unsigned n) { return _mm256_srli_epi32(a, static_cast<int>(n)); }
inline VI sll(VI a, unsigned n) { return _mm256_slli_epi32(a, static_cast<int>(n)); }
inline VI sra(VI a, unsigned n) { return _mm256_srai_epi32(a, static_cast<int>(n)); }
inline VI vsub(VI a, VI b) { return _mm256_sub_epi32(a, b); }
inline VF vneg(VF v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }
inline VI lookup16(VI table, VI idx) { return _mm256_shuffle_epi8(table, idx); }
inline VF e8m0_halves(const uint8_t* p) {
  const VI e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const VI small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  const VI bits = _mm256_blendv_epi8(_mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23),
                                     _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e), small);
  return _mm256_castsi256_ps(bits);
}
inline VF cvt(VI a) { return _mm256_cvtepi32_ps(a); }
inline VF halves(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline void store_vf(float* p, VF v) { _mm256_store_ps(p, v); }
#endif
constexpr int kV = kP * 4;  // bytes per vector of the panel: one dword per row

// Readers of one panel block (P rows x one block). kBytes: the type's block bytes (a panel block is kP * kBytes);
// kGroups groups of kGroup elements per block; scales() writes the groups' f32 scale (and minimum) vectors,
// s[gl * kP + r]; group() the group's kGroup / 4 dword vectors of unsigned bytes.
struct PanelQ4_0 {
  static constexpr int kBytes = 18, kGroups = 1, kGroup = 32, kOffset = 8, kMaxByte = 15;
  static constexpr bool kDwordWise = false;
  static constexpr bool kMin = false;
  static void scales(const uint8_t* pb, float* s, float*) { store_vf(s, halves(pb)); }
  static void group(const uint8_t* pb, int, VI* u) {
    const VI m = bcast(0x0f0f0f0f);
    for (int j = 0; j < 4; ++j) {
      const VI v = ldu(pb + 2 * kP + j * kV);
      u[j] = vand(v, m);
      u[j + 4] = vand(srl(v, 4), m);
    }
  }
  // u[d] of group(), alone.
  static VI dword(const uint8_t* pb, int, int d) {
    const VI v = ldu(pb + 2 * kP + (d & 3) * kV);
    return vand(d < 4 ? v : srl(v, 4), bcast(0x0f0f0f0f));
  }
};
// q4_1: P f16 d, P f16 m, then q4_0's nibbles; the minimum term is -m (as PackMinBlocks::scales).
struct PanelQ4_1 {
  static constexpr int kBytes = 20, kGroups = 1, kGroup = 32, kOffset = 0, kMaxByte = 15;
  static constexpr bool kDwordWise = false;
  static constexpr bool kMin = true;
  static void scales(const uint8_t* pb, float* s, float* mn) {
    store_vf(s, halves(pb));
    store_vf(mn, vneg(halves(pb + 2 * kP)));
  }
  static void group(const uint8_t* pb, int, VI* u) { PanelQ4_0::group(pb + 2 * kP, 0, u); }
  static VI dword(const uint8_t* pb, int, int d) { return PanelQ4_0::dword(pb + 2 * kP, 0, d); }
};
// mxfp4: q4_0's layout with a one-byte exponent per row for the f16 scale; each nibble is an E2M1 code, looked up as
// its doubled value + 16 (4 .. 28; the unsigned byte of matmul_quant.cc's row-major mxfp4 kernels).
struct PanelMXFP4 {
  static constexpr int kBytes = 17, kGroups = 1, kGroup = 32, kOffset = 16, kMaxByte = 28;
  static constexpr bool kDwordWise = false;
  static constexpr bool kMin = false;
  static VI codes() {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    return _mm512_broadcast_i32x4(mxfp4_code_bytes());
#else
    return _mm256_broadcastsi128_si256(mxfp4_code_bytes());
#endif
  }
  static void scales(const uint8_t* pb, float* s, float*) { store_vf(s, e8m0_halves(pb)); }
  static void group(const uint8_t* pb, int, VI* u) {
    const VI m = bcast(0x0f0f0f0f), t = codes();
    for (int j = 0; j < 4; ++j) {
      const VI v = ldu(pb + kP + j * kV);
      u[j] = lookup16(t, vand(v, m));
      u[j + 4] = lookup16(t, vand(srl(v, 4), m));
    }
  }
  static VI dword(const uint8_t* pb, int, int d) {
    const VI v = ldu(pb + kP + (d & 3) * kV);
    return lookup16(codes(), vand(d < 4 ? v : srl(v, 4), bcast(0x0f0f0f0f)));
  }
};
// q5_0: q4_0's nibbles plus a fifth bit per element from the row's 32-bit qh (bit i: element i), spread to bit 4
// of each byte: the four bits of a dword's elements times 0x00204081 land, without carries, at bits 0, 8, 16, 24.
struct PanelQ5_0 {
  static constexpr int kBytes = 22, kGroups = 1, kGroup = 32, kOffset = 16, kMaxByte = 31;
  static constexpr bool kDwordWise = false;
  static constexpr bool kMin = false;
  static void scales(const uint8_t* pb, float* s, float*) { store_vf(s, halves(pb)); }
  static VI fifth(VI qh, unsigned first) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    const VI spread = _mm512_mullo_epi32(vand(srl(qh, first), bcast(0xf)), bcast(0x00204081));
#else
    const VI spread = _mm256_mullo_epi32(vand(srl(qh, first), bcast(0xf)), bcast(0x00204081));
#endif
    return sll(vand(spread, bcast(0x01010101)), 4);
  }
  static void group(const uint8_t* pb, int, VI* u) {
    const VI m = bcast(0x0f0f0f0f);
    const VI qh = ldu(pb + 2 * kP);
    for (int j = 0; j < 4; ++j) {
      const VI v = ldu(pb + 6 * kP + j * kV);
      u[j] = vor(vand(v, m), fifth(qh, static_cast<unsigned>(4 * j)));
      u[j + 4] = vor(vand(srl(v, 4), m), fifth(qh, static_cast<unsigned>(16 + 4 * j)));
    }
  }
  static VI dword(const uint8_t* pb, int, int d) {
    const VI v = ldu(pb + 6 * kP + (d & 3) * kV), m = bcast(0x0f0f0f0f);
    return vor(vand(d < 4 ? v : srl(v, 4), m), fifth(ldu(pb + 2 * kP), static_cast<unsigned>(4 * d)));
  }
};
// q5_1: P f16 d, P f16 m, then q5_0's fifth bits and nibbles.
struct PanelQ5_1 {
  static constexpr int kBytes = 24, kGroups = 1, kGroup = 32, kOffset = 0, kMaxByte = 31;
  static constexpr bool kDwordWise = false;
  static constexpr bool kMin = true;
  static void scales(const uint8_t* pb, float* s, float* mn) { PanelQ4_1::scales(pb, s, mn); }
  static void group(const uint8_t* pb, int, VI* u) { PanelQ5_0::group(pb + 2 * kP, 0, u); }
  static VI dword(const uint8_t* pb, int, int d) { return PanelQ5_0::dword(pb + 2 * kP, 0, d); }
};
struct PanelQ4_K {
  static constexpr int kBytes = 144, kGroups = 8, kGroup = 32, kOffset = 0, kMaxByte = 15;
  static constexpr bool kDwordWise = true;
  static constexpr bool kMin = true;
  // As matmul_kquant.cc's PackQ4_K::scales16: the same f32 products d * sc and dmin * m.
  static void scales(const uint8_t* pb, float* s, float* mn) {
    const VF d = halves(pb), dmin = halves(pb + 2 * kP);
    const VI a0 = ldu(pb + 4 * kP), a1 = ldu(pb + 4 * kP + kV), a2 = ldu(pb + 4 * kP + 2 * kV);
    const VI c3f = bcast(0x3f3f3f3f), c0f = bcast(0x0f0f0f0f), c03 = bcast(0x03030303), ff = bcast(0xff);
    const VI sc_lo = vand(a0, c3f), m_lo = vand(a1, c3f);
    const VI sc_hi = vor(vand(a2, c0f), sll(vand(srl(a0, 6), c03), 4));
    const VI m_hi = vor(vand(srl(a2, 4), c0f), sll(vand(srl(a1, 6), c03), 4));
    for (unsigned j = 0; j < 4; ++j) {
      store_vf(s + j * kP, vmul(d, cvt(vand(srl(sc_lo, 8 * j), ff))));
      store_vf(s + (4 + j) * kP, vmul(d, cvt(vand(srl(sc_hi, 8 * j), ff))));
      store_vf(mn + j * kP, vmul(dmin, cvt(vand(srl(m_lo, 8 * j), ff))));
      store_vf(mn + (4 + j) * kP, vmul(dmin, cvt(vand(srl(m_hi, 8 * j), ff))));
    }
  }
  static void group(const uint8_t* pb, int gl, VI* u) {
    const VI m = bcast(0x0f0f0f0f);
    const uint8_t* q = pb + 16 * kP + (gl / 2) * 8 * kV;
    for (int j = 0; j < 8; ++j) {
      const VI v = ldu(q + j * kV);
      u[j] = vand(gl % 2 == 0 ? v : srl(v, 4), m);
    }
  }
  static VI dword(const uint8_t* pb, int gl, int d) {
    const VI v = ldu(pb + 16 * kP + (gl / 2) * 8 * kV + d * kV);
    return vand(gl % 2 == 0 ? v : srl(v, 4), bcast(0x0f0f0f0f));
  }
};
// q5_k: q4_k's scales and nibbles (at 48 kP, after the qh vectors) plus a fifth bit per element: bit gl of the qh
// dword d, for elements 4d.. of group gl.
struct PanelQ5_K {
  static constexpr int kBytes = 176, kGroups = 8, kGroup = 32, kOffset = 0, kMaxByte = 31;
  static constexpr bool kDwordWise = true;
  static constexpr bool kMin = true;
  static void scales(const uint8_t* pb, float* s, float* mn) { PanelQ4_K::scales(pb, s, mn); }
  static VI dword(const uint8_t* pb, int gl, int d) {
    const VI v = ldu(pb + 48 * kP + (gl / 2) * 8 * kV + d * kV), m = bcast(0x0f0f0f0f);
    const VI h = sll(vand(srl(ldu(pb + 16 * kP + d * kV), static_cast<unsigned>(gl)), bcast(0x01010101)), 4);
    return vor(vand(gl % 2 == 0 ? v : srl(v, 4), m), h);
  }
  static void group(const uint8_t* pb, int gl, VI* u) {
    for (int d = 0; d < 8; ++d) u[d] = dword(pb, gl, d);
  }
};
struct PanelQ6_K {
  static constexpr int kBytes = 210, kGroups = 16, kGroup = 16, kOffset = 32, kMaxByte = 63;
  static constexpr bool kDwordWise = true;
  static constexpr bool kMin = false;
  // As PackQ6_K::scales16: d * sc with the int8 scales sign-extended.
  static void scales(const uint8_t* pb, float* s, float*) {
    const VF d = halves(pb);
    for (int q = 0; q < 4; ++q) {
      const VI v = ldu(pb + 2 * kP + q * kV);
      for (unsigned j = 0; j < 4; ++j) store_vf(s + (4 * q + j) * kP, vmul(d, cvt(sra(sll(v, 24 - 8 * j), 24))));
    }
  }
  // Group gl = 8h + 2 part + half of super-block half h: elements 32 part + 16 half .. of that half, whose low
  // nibbles are in ql[64h + 32 (part & 1) ..] (shifted by 4 for part >= 2) and high bit pairs in qh[32h ..]
  // (bit pair `part`).
  static void group(const uint8_t* pb, int gl, VI* u) {
    const int h = gl / 8, part = (gl % 8) / 2, half = gl % 2;
    const uint8_t* ql = pb + 18 * kP + (16 * h + 8 * (part & 1) + 4 * half) * kV;
    const uint8_t* qh = pb + 146 * kP + (8 * h + 4 * half) * kV;
    const VI m = bcast(0x0f0f0f0f), m3 = bcast(0x03030303);
    const auto lo_shift = static_cast<unsigned>(4 * (part >> 1)), hi_shift = static_cast<unsigned>(2 * part);
    for (int d = 0; d < 4; ++d) {
      const VI l = vand(srl(ldu(ql + d * kV), lo_shift), m);
      u[d] = vor(l, sll(vand(srl(ldu(qh + d * kV), hi_shift), m3), 4));
    }
  }
  static VI dword(const uint8_t* pb, int gl, int d) {
    const int h = gl / 8, part = (gl % 8) / 2, half = gl % 2;
    const uint8_t* ql = pb + 18 * kP + (16 * h + 8 * (part & 1) + 4 * half) * kV;
    const uint8_t* qh = pb + 146 * kP + (8 * h + 4 * half) * kV;
    const auto lo_shift = static_cast<unsigned>(4 * (part >> 1)), hi_shift = static_cast<unsigned>(2 * part);
    const VI l = vand(srl(ldu(ql + d * kV), lo_shift), bcast(0x0f0f0f0f));
    return vor(l, sll(vand(srl(ldu(qh + d * kV), hi_shift), bcast(0x03030303)), 4));
  }
};
// q2_k: P f16 d and dmin, 4 vectors of the 16 scale bytes (low nibble the group's scale, high its minimum), 16 vectors
// of qs. Group gl = 8h + 2j + half (h: which 128 elements, j: the bit pair) takes dwords 8h + 4 half + d of qs,
// bit pair j of each byte.
struct PanelQ2_K {
  static constexpr int kBytes = 84, kGroups = 16, kGroup = 16, kOffset = 0, kMaxByte = 3;
  static constexpr bool kDwordWise = true;
  static constexpr bool kMin = true;
  // As matmul_kquant.cc's PackQ2_K::scales: d * (sc & 15) and dmin * (sc >> 4).
  static void scales(const uint8_t* pb, float* s, float* mn) {
    const VF d = halves(pb), dmin = halves(pb + 2 * kP);
    const VI c0f = bcast(0x0f);
    for (int q = 0; q < 4; ++q) {
      const VI v = ldu(pb + 4 * kP + q * kV);
      for (unsigned j = 0; j < 4; ++j) {
        store_vf(s + (4 * q + j) * kP, vmul(d, cvt(vand(srl(v, 8 * j), c0f))));
        store_vf(mn + (4 * q + j) * kP, vmul(dmin, cvt(vand(srl(v, 8 * j + 4), c0f))));
      }
    }
  }
  static VI dword(const uint8_t* pb, int gl, int d) {
    const int h = gl / 8, j = (gl % 8) / 2, half = gl % 2;
    const VI v = ldu(pb + 20 * kP + (8 * h + 4 * half + d) * kV);
    return vand(srl(v, static_cast<unsigned>(2 * j)), bcast(0x03030303));
  }
  static void group(const uint8_t* pb, int gl, VI* u) {
    for (int d = 0; d < 4; ++d) u[d] = dword(pb, gl, d);
  }
};
// q3_k: P f16 d, 3 vectors of the 12 scale bytes, 8 vectors of hmask, 16 of qs. Group gl = 8h + 2j + half: q2_k's
// bit pair j of qs dwords 8h + 4 half + d, plus bit 4h + j of hmask dword 4 half + d as bit 2 (the stored q is that
// byte minus the offset 4).
struct PanelQ3_K {
  static constexpr int kBytes = 110, kGroups = 16, kGroup = 16, kOffset = 4, kMaxByte = 7;
  static constexpr bool kDwordWise = true;
  static constexpr bool kMin = false;
  // As PackQ3_K::scales (unpack_q3_k_scales): scale i has its low nibble in byte i % 8 (high nibble for i >= 8) and
  // its top two bits in byte 8 + i % 4 at bit 2 (i / 4); d * (sc - 32).
  static void scales(const uint8_t* pb, float* s, float*) {
    const VF d = halves(pb);
    const VI a0 = ldu(pb + 2 * kP), a1 = ldu(pb + 2 * kP + kV), a2 = ldu(pb + 2 * kP + 2 * kV);
    const VI c0f = bcast(0x0f0f0f0f), c03 = bcast(0x03030303), ff = bcast(0xff), c32 = bcast(32);
    const VI w[4] = {vor(vand(a0, c0f), sll(vand(a2, c03), 4)), vor(vand(a1, c0f), sll(vand(srl(a2, 2), c03), 4)),
                     vor(vand(srl(a0, 4), c0f), sll(vand(srl(a2, 4), c03), 4)),
                     vor(vand(srl(a1, 4), c0f), sll(vand(srl(a2, 6), c03), 4))};
    for (int q = 0; q < 4; ++q)
      for (unsigned j = 0; j < 4; ++j)
        store_vf(s + (4 * q + j) * kP, vmul(d, cvt(vsub(vand(srl(w[q], 8 * j), ff), c32))));
  }
  static VI dword(const uint8_t* pb, int gl, int d) {
    const int h = gl / 8, j = (gl % 8) / 2, half = gl % 2;
    const VI v = ldu(pb + 46 * kP + (8 * h + 4 * half + d) * kV), hm = ldu(pb + 14 * kP + (4 * half + d) * kV);
    const VI lo = vand(srl(v, static_cast<unsigned>(2 * j)), bcast(0x03030303));
    return vor(lo, sll(vand(srl(hm, static_cast<unsigned>(4 * h + j)), bcast(0x01010101)), 2));
  }
  static void group(const uint8_t* pb, int gl, VI* u) {
    for (int d = 0; d < 4; ++d) u[d] = dword(pb, gl, d);
  }
};

}  // namespace tessera::ops::cpu::TS_CPU_ISA::packed
#endif  // __AVX2__
