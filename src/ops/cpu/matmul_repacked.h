// The quantised matmul for weights repacked into panels at load (repack.h has the layout): every batch size, 1
// included, runs one kernel straight from the packed bytes. Per group of G elements it loads the P rows' dwords
// (4-bit types: one load and an and / shift yield the dwords of two groups), runs one vpdpbusd (avx2: maddubs +
// madd) per dword against each activation row's broadcast dword, and ends the group with one int->float
// conversion and FMA for all P rows; per block, the P rows' scales come from one or a few vector loads. Included by
// matmul_quant.cc and matmul_kquant.cc after matmul_packed.h, inside the same per-build namespace.
//
// Same bits at every batch size: each activation row has its own accumulators and meets the same instructions in
// the same order whatever shares its tile, so a row's output does not depend on the batch. Rows past the last
// whole panel (stored row-major) take matmul_packed.h's kernels, which agree with themselves across batch sizes.
#pragma once

#include <fmt/core.h>

#include "ops/cpu/matmul_packed.h"
#include "ops/cpu/panel_readers.h"
#include "ops/cpu/repack.h"

#if defined(__AVX2__)
namespace tessera::ops::cpu::TS_CPU_ISA::packed {

// Four activation bytes (one dword) in every lane.
inline VI bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return bcast(v);
}

// Keeps v in a register at this point: the integer sums around it stay the chains they are written as (GCC
// reassociates a chain of integer adds into a tree, which needs more registers than 16 and spills).
inline void pin(VI& v) { asm("" : "+x"(v)); }

// block_step<PanelQ4_K, 1> (decode: one activation row x, row index t) written out: each weight dword is loaded
// once for its two groups (low nibbles: group 2j, high: 2j + 1), and each group's integer sum is made in registers.
// avx512: the high nibbles stay in place (an and instead of a shift and an and; their sum, 16 times the true one, is
// divided exactly), and each group's products run in two vpdpbusd chains. avx2: a group's eight maddubs add up in
// int16 (at most 8 * 2 * 15 * 128 = 30720) and widen once, as the general step's. Named registers, no arrays: the
// general step kept its group's dwords on the stack (GCC splits arrays into registers before it unrolls) and ran at
// 44 G multiply-adds/s from the L3 of an AMD Zen 4 core, this at 72 (avx512; `tessera bench matmul --dtype q4_k
// --rows 1 --k 4096 --m 4096`; 70 with block_step_row's per-group decode). The integer sums are exact, and the f32
// steps are the general step's in its order, so the bits are its bits.
//
// NP = 2 steps the same block column of two panels (pb[0] into acc[0], pb[1] into acc[1]) and broadcasts each
// activation dword and scale once for both: every panel's rows still meet the instructions above in their order
// (the bits do not depend on NP), and the decode's two streams cost one set of activation loads. In the whole
// llama3.1-8b Q4_K_M decode on AMD Zen 5 (2 threads) that took the q4_k matmuls to the rate of a plain read of the same
// bytes and the q6_k ones (block_step_16_row<L, 2>) to 83-85% of it, from 75-79% for all (docs/benchmarks.md, "Two
// panels, one set of activation loads"); on Zen 5 the q4_k decode now walks one panel at a time (kOneStreamDecode).
template <int NP = 1>
inline void block_step_q4_k_row(const uint8_t* const* pb, int64_t b, int64_t groups, const uint8_t* x, const Acts& a,
                                int64_t t, VF* acc) {
  static_assert(NP == 1 || NP == 2);
  alignas(64) float s[NP][8 * kP];
  alignas(64) float mn[NP][8 * kP];
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) PanelQ4_K::scales(pb[p], s[p], mn[p]);
  const VI lo_mask = bcast(0x0f0f0f0f);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  const VI hi_mask = bcast(static_cast<int32_t>(0xf0f0f0f0u)), zero = bcast(0);
#else
  const VI ones = _mm256_set1_epi16(1);
#endif
  const auto row = static_cast<size_t>(t * groups);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const int64_t ge = b * 8 + 2 * j, go = ge + 1;
    const uint8_t* qa = pb[0] + 16 * kP + j * 8 * kV;
    const uint8_t* qb = pb[NP - 1] + 16 * kP + j * 8 * kV;
    const uint8_t* xe = x + ge * 32;
    const uint8_t* xo = xe + 32;
    const VI start_e = bcast(a.start[row + static_cast<size_t>(ge)]);
    const VI start_o = bcast(a.start[row + static_cast<size_t>(go)]);
    VI ie[NP], io[NP];  // each panel's two groups' integer sums
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    VI e0 = start_e, e1 = zero, o0 = zero, o1 = zero;      // panel 0
    VI e0b = start_e, e1b = zero, o0b = zero, o1b = zero;  // panel 1 (NP = 2)
#pragma GCC unroll 4
    for (int d = 0; d < 8; d += 2) {
      const VI xe0 = bcast4(xe + 4 * d), xo0 = bcast4(xo + 4 * d);
      const VI xe1 = bcast4(xe + 4 * d + 4), xo1 = bcast4(xo + 4 * d + 4);
      const VI v0 = ldu(qa + d * kV), v1 = ldu(qa + (d + 1) * kV);
      e0 = dot4(e0, vand(v0, lo_mask), xe0);
      o0 = dot4(o0, vand(v0, hi_mask), xo0);
      e1 = dot4(e1, vand(v1, lo_mask), xe1);
      o1 = dot4(o1, vand(v1, hi_mask), xo1);
      if constexpr (NP == 2) {
        const VI w0 = ldu(qb + d * kV), w1 = ldu(qb + (d + 1) * kV);
        e0b = dot4(e0b, vand(w0, lo_mask), xe0);
        o0b = dot4(o0b, vand(w0, hi_mask), xo0);
        e1b = dot4(e1b, vand(w1, lo_mask), xe1);
        o1b = dot4(o1b, vand(w1, hi_mask), xo1);
      }
    }
    ie[0] = _mm512_add_epi32(e0, e1);
    io[0] = _mm512_add_epi32(start_o, _mm512_srai_epi32(_mm512_add_epi32(o0, o1), 4));
    if constexpr (NP == 2) {
      ie[NP - 1] = _mm512_add_epi32(e0b, e1b);
      io[NP - 1] = _mm512_add_epi32(start_o, _mm512_srai_epi32(_mm512_add_epi32(o0b, o1b), 4));
    }
#else
    VI pe = _mm256_setzero_si256(), po = pe, qe = pe, qo = pe;  // int16 sums: panel 0, panel 1 (NP = 2)
#pragma GCC unroll 8
    for (int d = 0; d < 8; ++d) {
      const VI xd_e = bcast4(xe + 4 * d), xd_o = bcast4(xo + 4 * d);
      const VI v = ldu(qa + d * kV);
      pe = _mm256_add_epi16(pe, _mm256_maddubs_epi16(vand(v, lo_mask), xd_e));
      po = _mm256_add_epi16(po, _mm256_maddubs_epi16(vand(srl(v, 4), lo_mask), xd_o));
      pin(pe), pin(po);
      if constexpr (NP == 2) {
        const VI w = ldu(qb + d * kV);
        qe = _mm256_add_epi16(qe, _mm256_maddubs_epi16(vand(w, lo_mask), xd_e));
        qo = _mm256_add_epi16(qo, _mm256_maddubs_epi16(vand(srl(w, 4), lo_mask), xd_o));
        pin(qe), pin(qo);
      }
    }
    ie[0] = _mm256_add_epi32(start_e, _mm256_madd_epi16(pe, ones));
    io[0] = _mm256_add_epi32(start_o, _mm256_madd_epi16(po, ones));
    if constexpr (NP == 2) {
      ie[NP - 1] = _mm256_add_epi32(start_e, _mm256_madd_epi16(qe, ones));
      io[NP - 1] = _mm256_add_epi32(start_o, _mm256_madd_epi16(qo, ones));
    }
#endif
    const VF xde = bcastf(a.xd[row + static_cast<size_t>(ge)]), xdo = bcastf(a.xd[row + static_cast<size_t>(go)]);
    const VF xse = bcastf(a.xs[row + static_cast<size_t>(ge)]), xso = bcastf(a.xs[row + static_cast<size_t>(go)]);
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p) {
      acc[p] = fma_i(ie[p], vmul(load_vf(s[p] + 2 * j * kP), xde), acc[p]);
      acc[p] = fnma(load_vf(mn[p] + 2 * j * kP), xse, acc[p]);
      acc[p] = fma_i(io[p], vmul(load_vf(s[p] + (2 * j + 1) * kP), xdo), acc[p]);
      acc[p] = fnma(load_vf(mn[p] + (2 * j + 1) * kP), xso, acc[p]);
    }
  }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)

// block_step<L, 1> of the other 32-element types (q4_0, q5_0, q4_1, q5_1, mxfp4, q5_k), in the same manner: each dword
// decoded where it is used (dword()), two chains per group. q4_0 65 -> 119 G multiply-adds/s, q5_0 32 -> 36, as above.
// One panel a step: two at once, as block_step_q4_k_row<2>, were slower from the L3 of one Zen 5 core (q4_0 142-151 ->
// 106-113 G multiply-adds/s, mxfp4 154-165 -> 87-89, q5_k 66-67 -> 54-55, q5_0 the same; --k 4096 --m 4096).
template <typename L>
inline void block_step_row(const uint8_t* pb, int64_t b, int64_t groups, const uint8_t* x, const Acts& a, int64_t t,
                           VF& acc) {
  constexpr int kD = L::kGroup / 4;
  static_assert(kD % 2 == 0);
  alignas(64) float s[L::kGroups * kP];
  alignas(64) float mn[L::kMin ? L::kGroups * kP : kP];
  L::scales(pb, s, mn);
  const auto row = static_cast<size_t>(t * groups);
#pragma GCC unroll 16
  for (int gl = 0; gl < L::kGroups; ++gl) {
    const int64_t g = b * L::kGroups + gl;
    const auto gi = row + static_cast<size_t>(g);
    const uint8_t* xg = x + g * L::kGroup;
    VI c0 = bcast(a.start[gi]), c1 = bcast(0);
#pragma GCC unroll 8
    for (int d = 0; d < kD; d += 2) {
      c0 = dot4(c0, L::dword(pb, gl, d), bcast4(xg + 4 * d));
      c1 = dot4(c1, L::dword(pb, gl, d + 1), bcast4(xg + 4 * d + 4));
    }
    acc = fma_i(_mm512_add_epi32(c0, c1), vmul(load_vf(s + gl * kP), bcastf(a.xd[gi])), acc);
    if constexpr (L::kMin) acc = fnma(load_vf(mn + gl * kP), bcastf(a.xs[gi]), acc);
  }
}
#endif

// ---- One-row steps of the 16-element-group k-quants (q2_k, q3_k, q6_k). A super-block half h holds groups 8h + 2j +
// half (j = 0..3), and dword d of those four groups comes from the same stored bytes: q6_k's low nibbles from ql
// vectors 16h + 4 half + d (j = 0, 2: low / high nibble) and 16h + 8 + 4 half + d (j = 1, 3) with bit pair j of qh
// vector 8h + 4 half + d; q2_k's bit pair j of qs vector 8h + 4 half + d; q3_k the same plus bit 4h + j of hmask vector
// 4 half + d. So each vector is loaded once for its four groups, the eight integer sums of a half are kept, and the f32
// steps then run in group order as the general step's: the bits are its bits. From the L3 of one AMD Zen 4 core (G
// multiply-adds/s, general step -> this; docs/benchmarks.md): avx512 q6_k 39 -> 44, q3_k 43.8 -> 50.3; avx2 q6_k 23.1
// -> 32.5, q3_k 24.2 -> 33.2; q2_k, whose decode is one shift and one and, gains nothing (it shares the code).

// a | (b & c).
inline VI or_and(VI a, VI b, VI c) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return _mm512_ternarylogic_epi32(a, b, c, 0xf8);
#else
  return vor(a, vand(b, c));
#endif
}
inline VI addi(VI a, VI b) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return _mm512_add_epi32(a, b);
#else
  return _mm256_add_epi32(a, b);
#endif
}

// Dword d of groups 8h + 2j + half, j = 0..3, as unsigned bytes.
struct Parts4 {
  VI u0, u1, u2, u3;
};
template <typename L>
inline Parts4 parts16(const uint8_t* pb, int h, int half, int d) {
  if constexpr (std::is_same_v<L, PanelQ6_K>) {
    const VI c0f = bcast(0x0f0f0f0f), c30 = bcast(0x30303030);
    const VI hv = ldu(pb + 146 * kP + (8 * h + 4 * half + d) * kV);
    const VI v0 = ldu(pb + 18 * kP + (16 * h + 4 * half + d) * kV);
    const VI v1 = ldu(pb + 18 * kP + (16 * h + 8 + 4 * half + d) * kV);
    // low nibble | (bit pair j << 4)
    return {or_and(vand(sll(hv, 4), c30), v0, c0f), or_and(vand(sll(hv, 2), c30), v1, c0f),
            or_and(vand(hv, c30), srl(v0, 4), c0f), or_and(vand(srl(hv, 2), c30), srl(v1, 4), c0f)};
  } else {
    constexpr bool kQ3 = std::is_same_v<L, PanelQ3_K>;
    static_assert(kQ3 || std::is_same_v<L, PanelQ2_K>);
    const VI c03 = bcast(0x03030303);
    const VI v = ldu(pb + (kQ3 ? 46 : 20) * kP + (8 * h + 4 * half + d) * kV);
    Parts4 p{vand(v, c03), vand(srl(v, 2), c03), vand(srl(v, 4), c03), vand(srl(v, 6), c03)};
    if constexpr (kQ3) {
      // Bit 4h + j of each hmask byte, to bit 2.
      const VI hm = ldu(pb + 14 * kP + (4 * half + d) * kV), c04 = bcast(0x04040404);
      auto high = [&](int shift) {
        return shift >= 0 ? srl(hm, static_cast<unsigned>(shift)) : sll(hm, static_cast<unsigned>(-shift));
      };
      p.u0 = or_and(p.u0, high(4 * h - 2), c04), p.u1 = or_and(p.u1, high(4 * h - 1), c04);
      p.u2 = or_and(p.u2, high(4 * h), c04), p.u3 = or_and(p.u3, high(4 * h + 1), c04);
    }
    return p;
  }
}

// NP = 2: two panels, one set of activation loads, as block_step_q4_k_row (avx512 only: written for the avx2 step too,
// both panels' int16 sums no longer fit its 16 registers, and the q6_k matmuls of the llama3.1-8b decode at avx2 ran
// no faster, 40.5 / 44.5 GB/s against 40.6 / 46.7 one panel a step, in the per-call rotation of docs/benchmarks.md).
template <typename L, int NP = 1>
inline void block_step_16_row(const uint8_t* const* pb, int64_t b, int64_t groups, const uint8_t* x, const Acts& a,
                              int64_t t, VF* acc) {
  static_assert(NP == 1 || NP == 2);
  alignas(64) float s[NP][16 * kP];
  alignas(64) float mn[NP][L::kMin ? 16 * kP : kP];
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) L::scales(pb[p], s[p], mn[p]);
  const auto row = static_cast<size_t>(t * groups);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const uint8_t* xh = x + (b * 16 + 8 * h) * 16;  // group 8h's 16 bytes, then the next groups'
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    // sum[j][half]: group 8h + 2j + half (t..: the second panel's). Named registers, no arrays (see
    // block_step_q4_k_row).
    VI s00 = bcast(0), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00, s31 = s00;
    VI t00 = s00, t01 = s00, t10 = s00, t11 = s00, t20 = s00, t21 = s00, t30 = s00, t31 = s00;
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
#pragma GCC unroll 4
      for (int d = 0; d < 4; ++d) {
        const uint8_t* xd = xh + half * 16 + 4 * d;  // group 8h + 2j + half: + 32 j
        const VI x0 = bcast4(xd), x1 = bcast4(xd + 32), x2 = bcast4(xd + 64), x3 = bcast4(xd + 96);
        const Parts4 p = parts16<L>(pb[0], h, half, d);
        if (half == 0) {
          s00 = dot4(s00, p.u0, x0), s10 = dot4(s10, p.u1, x1), s20 = dot4(s20, p.u2, x2), s30 = dot4(s30, p.u3, x3);
        } else {
          s01 = dot4(s01, p.u0, x0), s11 = dot4(s11, p.u1, x1), s21 = dot4(s21, p.u2, x2), s31 = dot4(s31, p.u3, x3);
        }
        if constexpr (NP == 2) {
          const Parts4 q = parts16<L>(pb[1], h, half, d);
          if (half == 0) {
            t00 = dot4(t00, q.u0, x0), t10 = dot4(t10, q.u1, x1), t20 = dot4(t20, q.u2, x2), t30 = dot4(t30, q.u3, x3);
          } else {
            t01 = dot4(t01, q.u0, x0), t11 = dot4(t11, q.u1, x1), t21 = dot4(t21, q.u2, x2), t31 = dot4(t31, q.u3, x3);
          }
        }
      }
    }
    const VI sums[2][8] = {{s00, s01, s10, s11, s20, s21, s30, s31}, {t00, t01, t10, t11, t20, t21, t30, t31}};
#else
    static_assert(NP == 1);
    // kSum dwords' maddubs add up in int16 (each at most 2 * kMaxByte * 128) before one madd widens them; the sums of
    // the half's first half wait in memory for its second.
    constexpr int kSum = std::min(4, 32767 / (2 * L::kMaxByte * 128));
    static_assert(kSum >= 1 && 4 % kSum == 0);
    const VI ones = _mm256_set1_epi16(1);
    alignas(32) VI sums[1][8];  // sums[0][2j + half]
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      VI s0 = bcast(0), s1 = s0, s2 = s0, s3 = s0;
#pragma GCC unroll 4
      for (int d0 = 0; d0 < 4; d0 += kSum) {
        VI q0, q1, q2, q3;
#pragma GCC unroll 4
        for (int j = 0; j < kSum; ++j) {
          const int d = d0 + j;
          const Parts4 p = parts16<L>(pb[0], h, half, d);
          const uint8_t* xd = xh + half * 16 + 4 * d;
          const VI m0 = _mm256_maddubs_epi16(p.u0, bcast4(xd)), m1 = _mm256_maddubs_epi16(p.u1, bcast4(xd + 32));
          const VI m2 = _mm256_maddubs_epi16(p.u2, bcast4(xd + 64)), m3 = _mm256_maddubs_epi16(p.u3, bcast4(xd + 96));
          if (j == 0) {
            q0 = m0, q1 = m1, q2 = m2, q3 = m3;
          } else {
            q0 = _mm256_add_epi16(q0, m0), q1 = _mm256_add_epi16(q1, m1);
            q2 = _mm256_add_epi16(q2, m2), q3 = _mm256_add_epi16(q3, m3);
          }
        }
        s0 = addi(s0, _mm256_madd_epi16(q0, ones)), s1 = addi(s1, _mm256_madd_epi16(q1, ones));
        s2 = addi(s2, _mm256_madd_epi16(q2, ones)), s3 = addi(s3, _mm256_madd_epi16(q3, ones));
      }
      sums[0][half] = s0, sums[0][2 + half] = s1, sums[0][4 + half] = s2, sums[0][6 + half] = s3;
    }
#endif
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const int gl = 8 * h + i;
      const auto gi = row + static_cast<size_t>(b * 16 + gl);
      const VF xd = bcastf(a.xd[gi]);
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) {
        // q2_k has no offset, so its start is 0.
        const VI isum = L::kOffset == 0 ? sums[p][i] : addi(bcast(a.start[gi]), sums[p][i]);
        acc[p] = fma_i(isum, vmul(load_vf(s[p] + gl * kP), xd), acc[p]);
        if constexpr (L::kMin) acc[p] = fnma(load_vf(mn[p] + gl * kP), bcastf(a.xs[gi]), acc[p]);
      }
    }
  }
}

// Whether the decode steps panels in pairs (block_step_row_pair): q4_k, and on avx512 the 16-element-group k-quants.
template <typename L>
constexpr bool kPairRowStep =
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    std::is_same_v<L, PanelQ4_K> || L::kGroup == 16;
#else
    std::is_same_v<L, PanelQ4_K>;
#endif
// Block column b of two panels (pb[0] into acc[0], pb[1] into acc[1]) against one activation row, sharing its loads.
template <typename L>
inline void block_step_row_pair(const uint8_t* const* pb, int64_t b, int64_t groups, const uint8_t* x, const Acts& a,
                                int64_t t, VF* acc) {
  static_assert(kPairRowStep<L>);
  if constexpr (std::is_same_v<L, PanelQ4_K>) {
    block_step_q4_k_row<2>(pb, b, groups, x, a, t, acc);
  } else {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    block_step_16_row<L, 2>(pb, b, groups, x, a, t, acc);
#endif
  }
}

// One panel block (block column b) of one panel against activation rows t0 .. t0 + TT - 1, into acc; the f32 steps
// are micro()'s.
template <typename L, int TT>
inline __attribute__((always_inline)) void block_step(const uint8_t* pb, int64_t b, int64_t groups,
                                                      const uint8_t* const* xq, const Acts& a, int64_t t0, VF* acc) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  if constexpr (TT == 1) {
    if constexpr (std::is_same_v<L, PanelQ4_K>)
      return block_step_q4_k_row(&pb, b, groups, xq[0], a, t0, acc);
    else if constexpr (L::kGroup == 16)
      return block_step_16_row<L>(&pb, b, groups, xq[0], a, t0, acc);
    else
      return block_step_row<L>(pb, b, groups, xq[0], a, t0, acc[0]);
  }
#else
  if constexpr (TT == 1 && std::is_same_v<L, PanelQ4_K>) return block_step_q4_k_row(&pb, b, groups, xq[0], a, t0, acc);
  if constexpr (TT == 1 && L::kGroup == 16) return block_step_16_row<L>(&pb, b, groups, xq[0], a, t0, acc);
#endif
  constexpr int kD = L::kGroup / 4;
  alignas(64) float s[L::kGroups * kP];
  alignas(64) float mn[L::kMin ? L::kGroups * kP : kP];
  L::scales(pb, s, mn);
  // The accumulators in registers for the whole block and the activation arrays by plain pointers: updated through
  // `acc` (vector types may alias anything), every group stored all TT of them and reloaded Acts' pointers after
  // each store (q4_k at 8 rows: the hottest instructions of the step).
  VF sum[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) sum[t] = acc[t];
  const int32_t* start = a.start.data();
  const float *xd = a.xd.data(), *xs = a.xs.data();
  for (int gl = 0; gl < L::kGroups; ++gl) {
    const int64_t g = b * L::kGroups + gl;
    VI isum[TT];
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) isum[t] = bcast(start[(t0 + t) * groups + g]);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
      // Each dword decoded where it is used, for every activation row (an array of the group's dwords stayed on the
      // stack, see block_step_row).
#pragma GCC unroll 8
    for (int d = 0; d < kD; ++d) {
      const VI w = L::dword(pb, gl, d);
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) isum[t] = dot4(isum[t], w, bcast4(xq[t] + g * L::kGroup + 4 * d));
    }
#else
    // maddubs leaves int16 sums of two products, each at most kMaxByte * 128; kSum dwords' worth add up in int16
    // before one madd widens them (4-bit types: all 8 of a group), where dot4 widened every dword. Integer sums
    // are exact either way, so the bits are dot4's.
    constexpr int kSum = std::min(kD, 32767 / (2 * L::kMaxByte * 128));
    static_assert(kSum >= 1 && kD % kSum == 0);
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (L::kDwordWise || TT <= 2) {
      // The k-quants decode each weight dword where it is used (dword()), for all activation rows at once:
      // holding the group's 8 at once spilled the 16 registers (q4_k 52 -> 75 G multiply-adds/s). So do q4_0 and
      // q5_0 at one or two rows (decode): 46 -> 73 and 23 -> 27 G multiply-adds/s at one row on an AMD Zen 4 core
      // (`--cpu-isa avx2`); from three rows up, one decode of the group per row-set pays.
#pragma GCC unroll 8
      for (int d0 = 0; d0 < kD; d0 += kSum) {
        __m256i p[TT];
#pragma GCC unroll 8
        for (int j = 0; j < kSum; ++j) {
          const VI w = L::dword(pb, gl, d0 + j);
#pragma GCC unroll 16
          for (int t = 0; t < TT; ++t) {
            int32_t x4;
            std::memcpy(&x4, xq[t] + g * L::kGroup + 4 * (d0 + j), 4);
            const __m256i q = _mm256_maddubs_epi16(w, bcast(x4));
            p[t] = j == 0 ? q : _mm256_add_epi16(p[t], q);
          }
        }
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], ones));
      }
    } else {
      // q4_0 / q5_0 decode two dwords per load: the group's dwords once, then one activation row at a time.
      VI u[kD];
      L::group(pb, gl, u);
#pragma GCC unroll 8
      for (int d0 = 0; d0 < kD; d0 += kSum) {
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) {
          const uint8_t* x = xq[t] + g * L::kGroup + 4 * d0;
          int32_t x4;
          std::memcpy(&x4, x, 4);
          __m256i p = _mm256_maddubs_epi16(u[d0], bcast(x4));
#pragma GCC unroll 8
          for (int j = 1; j < kSum; ++j) {
            std::memcpy(&x4, x + 4 * j, 4);
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[d0 + j], bcast(x4)));
          }
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, ones));
        }
      }
    }
#endif
    const VF sv = load_vf(s + gl * kP);
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) sum[t] = fma_i(isum[t], vmul(sv, bcastf(xd[(t0 + t) * groups + g])), sum[t]);
    if constexpr (L::kMin) {
      const VF mv = load_vf(mn + gl * kP);
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) sum[t] = fnma(mv, bcastf(xs[(t0 + t) * groups + g]), sum[t]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) acc[t] = sum[t];
}

// out[p][t * ld + r] for NP panels (pw[p], each kP rows) and activation rows t0 .. t0 + TT - 1. NP = 2 walks two
// panels far apart in lockstep: two sequential streams keep more loads in flight than one with the near prefetch
// (decode reads every weight byte once and waits on memory); at one activation row the avx512 q4_k and
// 16-element-group steps take both panels' block at once (block_step_row_pair) and load the activations once. Each
// panel's rows keep their own accumulators and instructions, so the bits do not depend on NP. On Zen 5 one stream
// fetching 8 KiB ahead (`ahead`) kept more in flight still for most k-quants (kOneStreamDecode below).
//
// Prefetch. The hardware prefetcher alone left the first loads of each block waiting, so each block step first fetches
// the one about 2 KiB ahead into L1 (q4_k's 2304-byte panel block, seven of q4_0's 288). Four k-quant blocks ahead (9
// KiB) held llama3.1-8b Q4_K_M decode at 4.40 tok/s on the AMX Xeon, one block gives 5.2 (docs/benchmarks.md). On AMD
// Zen 4 the k-quants' whole-block bursts into L1 are what hold the stream back (one core, avx512 kernels, 65536 x 4096
// from memory: q4_k 35 G multiply-adds/s, q6_k 12 against 44 from L3): there the k-quants fetch the block about 16
// KiB ahead into L2 instead (q4_k 57, q6_k 33; 2 KiB ahead into L2 or 16 KiB into L1 did not help, nor both), which
// leaves L1 to the hardware prefetcher; the avx2 kernels' q6_k went from 18.6 to 22.5. q4_0 streams faster with the
// L1 prefetch there too (49 against 41 with L2), so it keeps it. On Zen 5 (family 1Ah: 48 KiB L1) the near L1 prefetch
// is the faster again (one core, avx512, 128256 x 2048 from memory, median ms of five alternating runs: q4_k 5.2
// -> 3.6, q6_k 10.2 -> 6.3; two threads and the avx2 kernels alike), so the far one is for the families before it
// (prefetch_panels_far_to_l2); the dense decode rows keep theirs there (f16 4096 x 16384: 3.6 against 5.1 without).
// Every line of the kBytes at p into L2 (far) or L1. Inline asm rather than _mm_prefetch: GCC 12 merged the two loops
// below, written with _mm_prefetch, into one whose hint was no longer a constant, and then dropped every prefetch.
template <int64_t kBytes>
inline void prefetch_block(const uint8_t* p, bool far) {
  if (far) {
    for (int64_t o = 0; o < kBytes; o += 64) asm volatile("prefetcht1 %0" : : "m"(p[o]));
  } else {
    for (int64_t o = 0; o < kBytes; o += 64) asm volatile("prefetcht0 %0" : : "m"(p[o]));
  }
}

// `ahead` > 0: fetch that many bytes ahead into L1 instead (the one-stream decode walk, PanelWalk::kOne).
template <typename L, int TT, int NP = 1>
void panel_rows(const uint8_t* const* pw, int64_t nb, int64_t k, const Acts& a, int64_t t0, float* const* out,
                int64_t ld, const float* const* bias, int64_t ahead = 0) {
  constexpr int64_t kPanelBlock = static_cast<int64_t>(kP) * L::kBytes;
  constexpr int64_t kNearBlocks = std::max<int64_t>(1, (2048 + kPanelBlock / 2) / kPanelBlock);
  constexpr int64_t kFarBlocks = std::max<int64_t>(1, (kFarPrefetchBytes + kPanelBlock / 2) / kPanelBlock);
  const bool far = ahead == 0 && L::kBytes >= 144 &&
                   prefetch_panels_far_to_l2();  // the k-quants: q4_k 144 bytes a row block, q6_k 210
  if (ahead == 0) ahead = (far ? kFarBlocks : kNearBlocks) * kPanelBlock;
  const int64_t groups = k / L::kGroup;
  VF acc[NP][TT];
  for (auto& row : acc)
#pragma GCC unroll 16
    for (auto& v : row) v = fzero();
  const uint8_t* xq[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) xq[t] = reinterpret_cast<const uint8_t*>(a.q.data() + (t0 + t) * k);
  if constexpr (kPairRowStep<L> && NP == 2 && TT == 1) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* pb[2] = {pw[0] + b * kPanelBlock, pw[1] + b * kPanelBlock};
      prefetch_block<kPanelBlock>(pb[0] + ahead, far);
      prefetch_block<kPanelBlock>(pb[1] + ahead, far);
      VF pair[2] = {acc[0][0], acc[1][0]};
      block_step_row_pair<L>(pb, b, groups, xq[0], a, t0, pair);
      acc[0][0] = pair[0], acc[1][0] = pair[1];
    }
  } else {
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) {
        const uint8_t* pb = pw[p] + b * kPanelBlock;
        prefetch_block<kPanelBlock>(pb + ahead, far);
        block_step<L, TT>(pb, b, groups, xq, a, t0, acc[p]);
      }
    }
  }
  for (int p = 0; p < NP; ++p) {
    const VF bv = bias[p] ? load_rows(bias[p], kP) : fzero();
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) store_rows(out[p] + t * ld, bias[p] ? vadd(acc[p][t], bv) : acc[p][t], kP);
  }
}

template <typename L>
void panel_tile(int tt, const uint8_t* pw, int64_t nb, int64_t k, const Acts& a, int64_t t0, float* out, int64_t ld,
                const float* bias) {
  switch (tt) {
#define TS_REPACKED_CASE(n) \
  case n:                   \
    return panel_rows<L, n>(&pw, nb, k, a, t0, &out, ld, &bias);
    TS_REPACKED_CASE(1)
    TS_REPACKED_CASE(2)
    TS_REPACKED_CASE(3)
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    TS_REPACKED_CASE(4)
    TS_REPACKED_CASE(5)
    TS_REPACKED_CASE(6)
    TS_REPACKED_CASE(7)
#endif
#undef TS_REPACKED_CASE
    default:
      return panel_rows<L, kT>(&pw, nb, k, a, t0, &out, ld, &bias);
  }
}

// FailedPrecondition when the layout is not the one this build reads or does not describe op.w (one matrix of a
// repacked stack, at its offset, qualifies).
inline Status check_layout(const MatMulOp& op, const PanelLayout& lay) {
  const int64_t k = op.x.dim(1), m = op.w.dim(0);
  if (lay.panel_rows != kP || !lay.describes(op.w.dtype, m, k, op.w.offset)) {
    return failed_precondition(fmt::format(
        "cpu matmul: the weight was repacked in panels of {} rows for a {} x {} {} matrix; these kernels read panels "
        "of {} and the operator gives a {} x {} {} weight at offset {}",
        lay.panel_rows, lay.rows, lay.cols, dtype_name(lay.type), kP, m, k, dtype_name(op.w.dtype), op.w.offset));
  }
  return ok_status();
}

// The types whose decode walks one stream where the processor prefers it (PanelWalk::kOne): the k-quants, whose
// 256-element blocks make panel blocks of 1.3-3.4 KiB, but for those whose pair step is what keeps up with memory
// (it loads the activations once for both panels): q2_k at avx512, q4_k at avx2. The 32-element types keep the
// pairs everywhere. Measured on Zen 5 (one 131072 x 4096 matrix from memory, 2 threads, the calls rotated over the
// walks, GB/s of weights, pairs -> one stream; docs/benchmarks.md, "One stream a thread"): avx512 q4_k 65 -> 76,
// q5_k 56 -> 63, q6_k 57 -> 71, q3_k 43 -> 46 but q2_k 43 -> 37, q4_0 52 -> 41, q5_0 49 -> 38; avx2 q6_k 37 -> 41,
// q5_k, q3_k and q2_k within the noise, q4_k 44 -> 36 in the llama3.1-8b decode.
template <typename L>
constexpr bool kOneStreamDecode =
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    L::kGroups > 1 && !std::is_same_v<L, PanelQ2_K>;
#else
    L::kGroups > 1 && !std::is_same_v<L, PanelQ4_K>;
#endif

// out [n, m] = x [n, k] . w^T (+ bias) for w repacked with layout `lay` (L reads its panels, Dec the row-major
// tail). FailedPrecondition as check_layout().
template <typename L, typename Dec>
Status matmul_repacked(const MatMulOp& op, const PanelLayout& lay, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0);
  TS_RETURN_IF_ERROR(check_layout(op, lay));
  const int64_t nb = k / Dec::kBlockElems, whole = m / kP, tail_rows = m - whole * kP;
  static_assert(L::kBytes == sizeof(typename Dec::Block) && L::kGroup == Dec::kGroup && L::kOffset == Dec::kOffset &&
                L::kMin == Dec::kMin);
  const auto* base = data<const uint8_t>(op.w);
  float* out = data<float>(op.out);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
  thread_local Acts tls_acts;  // the caller's thread's; workers reach it through the reference
  Acts& acts = tls_acts;
  quantize_acts(data<const float>(op.x), n, k, Dec::kGroup, Dec::kOffset, Dec::kMin, Dec::kBlockElems == 32, acts, ctx,
                Dec::kBlockElems == 256);
  const int64_t i0_tail = whole * kP;
  const auto* tail = reinterpret_cast<const typename Dec::Block*>(base + i0_tail * nb * L::kBytes);
  const float* tail_bias = bias ? bias + i0_tail : nullptr;
  auto tail_rows_of = [&](int64_t r0, int64_t r1) {
    // The row-major tail: matmul_packed.h's paths, as an unpacked matrix's last panel takes them.
    const int rows = static_cast<int>(tail_rows);
    if (n <= kGemvRows) {
      if (n == 1) return gemv_panel<Dec, 1>(tail, nb, k, rows, acts, out + i0_tail, m, tail_bias);
      return gemv_panel<Dec, 2>(tail, nb, k, rows, acts, out + i0_tail, m, tail_bias);
    }
    thread_local Panel panel;
    pack<Dec>(tail, nb, k, rows, panel);
    for (int64_t t0 = r0; t0 < r1; t0 += kT) {
      const int tt = static_cast<int>(std::min<int64_t>(kT, r1 - t0));
      tile<Dec::kGroup, Dec::kMin>(tt, panel, k, acts, t0, out + t0 * m + i0_tail, m, rows, tail_bias);
    }
  };
  auto panel_at = [&](int64_t pi) { return base + pi * kP * nb * L::kBytes; };
  auto bias_at = [&](int64_t pi) { return bias ? bias + pi * kP : nullptr; };
  if (n <= kGemvRows && kOneStreamDecode<L> && kquant_decode_walk() == PanelWalk::kOne) {
    // Decode, one stream: the panels in order, in tapered chunks.
    parallel_for_tapered(ctx.pool, whole + (tail_rows > 0 ? 1 : 0), [&](int64_t j) {
      if (j == whole) return tail_rows_of(0, n);
      const uint8_t* pw = panel_at(j);
      float* o = out + j * kP;
      const float* bp = bias_at(j);
      if (n == 1) return panel_rows<L, 1>(&pw, nb, k, acts, 0, &o, m, &bp, kOneStreamPrefetchBytes);
      return panel_rows<L, 2>(&pw, nb, k, acts, 0, &o, m, &bp, kOneStreamPrefetchBytes);
    });
    return ok_status();
  }
  if (n <= kGemvRows) {
    // Decode: panels pi and pi + half in lockstep (two streams), the odd one and the tail alone. In tapered chunks:
    // in the per-call rotation of docs/benchmarks.md ("Tapered chunks") the llama3.1-8b Q4_K_M decode's q6_k
    // matmuls ran 1-7% faster than in parallel_for's equal ones, its q4_k 0-5% (2 threads, four runs).
    const int64_t half = whole / 2;
    parallel_for_tapered(ctx.pool, half + (whole % 2) + (tail_rows > 0 ? 1 : 0), [&](int64_t j) {
      if (j < half) {
        const uint8_t* pw[2] = {panel_at(j), panel_at(j + half)};
        float* o[2] = {out + j * kP, out + (j + half) * kP};
        const float* bp[2] = {bias_at(j), bias_at(j + half)};
        if (n == 1) return panel_rows<L, 1, 2>(pw, nb, k, acts, 0, o, m, bp);
        return panel_rows<L, 2, 2>(pw, nb, k, acts, 0, o, m, bp);
      }
      if (j == half && whole % 2 == 1) {
        const uint8_t* pw = panel_at(whole - 1);
        float* o = out + (whole - 1) * kP;
        const float* bp = bias_at(whole - 1);
        if (n == 1) return panel_rows<L, 1>(&pw, nb, k, acts, 0, &o, m, &bp);
        return panel_rows<L, 2>(&pw, nb, k, acts, 0, &o, m, &bp);
      }
      tail_rows_of(0, n);
    });
    return ok_status();
  }
  parallel_for_blocks(
      ctx, whole + (tail_rows > 0 ? 1 : 0), (n + kTokenBlock - 1) / kTokenBlock, [&](int64_t blk, int64_t pi) {
        const int64_t r0 = blk * kTokenBlock, r1 = std::min(n, r0 + kTokenBlock);
        {
          if (pi < whole) {
            const uint8_t* pw = base + pi * kP * nb * L::kBytes;
            for (int64_t t0 = r0; t0 < r1; t0 += kT) {
              const int tt = static_cast<int>(std::min<int64_t>(kT, r1 - t0));
              panel_tile<L>(tt, pw, nb, k, acts, t0, out + t0 * m + pi * kP, m, bias ? bias + pi * kP : nullptr);
            }
            return;
          }
          tail_rows_of(r0, r1);
        }
      });
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA::packed
#endif  // __AVX2__
