// bf16 and f16 matmuls on AMX-BF16 tiles (the amx build): every batch size, decode included. Included by
// matmul_dense.cc inside its per-build namespace.
//
// A bf16 tile product (tdpbf16ps) multiplies 16 x 32 bf16 activations by 32 x 16 bf16 weights into 16 x 16 f32
// sums at 512 multiply-adds per cycle on paper, 16x the 512-bit FMA peak. Plain bf16 activations would lose
// precision the conformance bound (a normalised squared error of 1e-9 against f32 activations) does not allow: an
// f32 value rounded to bf16 keeps 8 significant bits (about 1e-6 of squared error). So each activation is split
// into hi = bf16(x) and lo = bf16(x - hi), whose sum is x to 2^-18, and every 32 elements add hi.w and lo.w
// (measured: about 5e-12 of squared error).
//
// The tile unit's f32 accumulation is its own (no sequence of FMAs reproduces its bits, nor does AVX512-BF16's
// vdpbf16ps: measured, each differs from it on a third to a half of the outputs), so a row keeps the same bits at
// every batch size only if every batch size runs on the tiles: decode loads tiles of its one or two activation
// rows (a tile product costs the same whatever its height, 4.7 ns here, and each row's sums do not depend on it).
// Each output is the same chain of tile products, in the same order, whichever tile and batch it is in.
//
// f16 weights: an f16 value w (11 significant bits) is exactly hi + lo with hi its first 8 significant bits (w's
// f32 bits with the low 16 cleared) and lo = w - hi (at most 3 bits), both bf16. Each B tile of f16 is split so
// when its panel is read (split_f16: 10 vector instructions per 32 weights, no shuffles: the pair layout is
// elementwise), and every step adds hi_x.hi_w, lo_x.hi_w, hi_x.lo_w and lo_x.lo_w: the four products are exact in
// f32, so the error is the activation split's (2^-18) and the tile unit's accumulation, as for bf16 weights.
// Prefill runs about 2x the f32 kernels. Decode of one row runs about 0.8x of them: each step's split (2 KiB of
// stores per KiB of f16 read) must reach memory before its tile loads, and that, not the split's arithmetic nor
// the four products, bounds it (measured by leaving each out; two panels in lockstep gained 3%). An earlier form
// that split row-major weights per call decoded at half the f32 kernels' speed. The classifier, whose cost is
// decode's, stays on the f32 kernels (matmul_dense.cc).
//
// Weights: bf16 and f16 matrices the device repacked at load (repack.h: panels of 16 rows, one dword per row and
// pair of elements) are the tiles' B operand as they are (f16: after the split), read in place. Other matrices
// (rows not a multiple of 32, fewer than 16 rows, the rows after the last whole panel, a matrix nobody prepared) are
// laid out the same way per call, with zeros past the row's end.
#pragma once

#include "ops/cpu/kernels.h"

#if defined(TS_AMX_TILES) && defined(__AVX512BF16__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/cpu/amx_tiles.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA::dense_tiles {

using tiles::tile_dp_bf16;
using tiles::tile_load;
using tiles::tile_zero;

constexpr int kM = 16;                    // activation rows per A tile
constexpr int kN = 16;                    // weight rows per panel (columns of C)
constexpr int kStep = 32;                 // elements per tile product: 16 pairs
constexpr int64_t kStepU16 = kStep * kN;  // bf16 values of one B tile (1 KiB)

// Activation rows as bf16 hi and lo, kp = k rounded up to kStep (zeros after k), rows padded to whole tiles.
struct SplitActs {
  AVec<uint16_t> hi, lo;
  int64_t kp = 0;
};

// The masked forms throughout: GCC 12 warns (-Wmaybe-uninitialized) on the unmasked ones' undefined pass-through.
constexpr __mmask16 kAll = 0xffff;
inline __m256i lower_half(__m512i v) { return _mm512_maskz_extracti64x4_epi64(0xff, v, 0); }
inline __m256i upper_half(__m512i v) { return _mm512_maskz_extracti64x4_epi64(0xff, v, 1); }
inline __m512 bf16_to_f32(__m256i h) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
}
inline __m512 bf16_lo_to_f32(__m512i h) { return bf16_to_f32(lower_half(h)); }  // elements 0..15
inline __m512 bf16_hi_to_f32(__m512i h) { return bf16_to_f32(upper_half(h)); }  // elements 16..31
// x - hi, or 0 where hi is not finite (x - inf would make a NaN of an infinite product).
inline __m512 residual(__m512 x, __m512 hi) {
  const __mmask16 special = _mm512_fpclass_ps_mask(hi, 0x01 | 0x08 | 0x10 | 0x80);  // NaN, +inf, -inf
  return _mm512_maskz_sub_ps(static_cast<__mmask16>(~special), x, hi);
}
// 32 f32 values (a: elements 0..15, b: 16..31) split into bf16 hi and lo, in element order.
inline void split32(__m512 a, __m512 b, uint16_t* hi, uint16_t* lo) {
  const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
  _mm512_store_si512(hi, h);
  const __m512i l =
      reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(residual(b, bf16_hi_to_f32(h)), residual(a, bf16_lo_to_f32(h))));
  _mm512_store_si512(lo, l);
}

// 32 f16 weights of the pair layout (one B tile row) into their exact bf16 hi and lo, in element order. hi keeps
// the top 16 bits of each f32 (an f16's first 8 significant bits; a NaN stays a NaN, inf stays inf, lo then 0).
inline void split_f16_32(const uint16_t* w, uint16_t* hi, uint16_t* lo) {
  const __m512 a = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
  const __m512 b = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16)));
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512 ha = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), top));
  const __m512 hb = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(b), top));
  _mm512_store_si512(hi, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hb, ha)));  // exact: ha, hb are bf16 values
  _mm512_store_si512(lo, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(residual(b, hb), residual(a, ha))));
}

// A panel of f16 pairs (steps B tiles) split into bf16 hi and lo panels of the same layout.
inline void split_f16(const uint16_t* b, int64_t steps, AVec<uint16_t>& hi, AVec<uint16_t>& lo) {
  const int64_t n = steps * kStepU16;
  hi.resize(static_cast<size_t>(n));
  lo.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(b + i + 1024), _MM_HINT_T0);  // 2 KiB ahead, as the panels' decode
    split_f16_32(b + i, hi.data() + i, lo.data() + i);
  }
}

// x [n, k] f32 into `a` (rows padded with zeros to a multiple of kM).
inline void split_acts(const float* x, int64_t n, int64_t k, SplitActs& a, const Ctx& ctx) {
  a.kp = (k + kStep - 1) / kStep * kStep;
  const int64_t padded = (n + kM - 1) / kM * kM;
  a.hi.resize(static_cast<size_t>(padded * a.kp));
  a.lo.resize(static_cast<size_t>(padded * a.kp));
  parallel_for(
      ctx, padded,
      [&](int64_t r) {
        uint16_t* hi = a.hi.data() + r * a.kp;
        uint16_t* lo = a.lo.data() + r * a.kp;
        for (int64_t j = 0; j < a.kp; j += kStep) {
          const int64_t valid = r < n ? std::clamp<int64_t>(k - j, 0, kStep) : 0;
          const auto m0 = static_cast<__mmask16>(valid >= 16 ? 0xffff : (1u << valid) - 1u);
          const auto m1 = static_cast<__mmask16>(valid >= 32 ? 0xffff : valid > 16 ? (1u << (valid - 16)) - 1u : 0u);
          const float* xr = x + r * k + j;
          split32(_mm512_maskz_loadu_ps(m0, xr), _mm512_maskz_loadu_ps(m1, xr + 16), hi + j, lo + j);
        }
      },
      static_cast<double>(k), 16384.0);
}

// kN rows i0.. of a row-major bf16 matrix (rows past `rows` and elements past k zero) in the panel layout of
// repack.h: per pair j of elements a vector of kN dwords, lane r = row r's elements 2j, 2j + 1.
inline void gather_pairs(const uint16_t* w, int64_t k, int rows, int64_t kp, AVec<uint16_t>& out) {
  out.assign(static_cast<size_t>(kp * kN), 0);
  for (int r = 0; r < rows; ++r) {
    const uint16_t* wr = w + r * k;
    for (int64_t e = 0; e < k; ++e) out[static_cast<size_t>((e / 2) * 2 * kN + 2 * r + e % 2)] = wr[e];
  }
}

// Tile registers 0-3: A (hi and lo of two activation tiles), 4: B (f16 weights: their hi), 5: f16 weights' lo,
// 6/7: C (one per activation tile).
// `m_rows`: activation rows per A (and C) tile: kM, or the batch when it is smaller (decode loads only its rows;
// each row's sums are the same whatever the tile's height, CpuAmxMatMul checks it).
inline tiles::TileConfig bf16_tiles(int m_rows) {
  tiles::TileConfig c;
  for (int t = 0; t < 8; ++t) c.set(t, t == 4 || t == 5 ? 16 : m_rows, 64);
  return c;
}

// out[t * ld + r] for activation rows t0 .. t1 - 1 (t0 a multiple of kM) and the panel's rows r < rows, from the
// panel's B tiles (steps x kStepU16 values); `bl`: the lo tiles of split f16 weights (b their hi), else null;
// `f16`: f16 weights split here, a step at a time (b and bl unused): decode and small batches, where the split
// overlaps the tile products and the reads of the next steps.
inline void panel_tiles(const uint16_t* b, const uint16_t* bl, const uint16_t* f16, int64_t steps, const SplitActs& a,
                        int64_t t0, int64_t t1, float* out, int64_t ld, int rows) {
  const int64_t sa = a.kp * 2;  // bytes between activation rows
  alignas(64) float c[256];
  alignas(64) uint16_t sh[kStepU16], sl[kStepU16];  // one step's split f16 tiles
  for (int64_t tb = t0; tb < t1; tb += 2 * kM) {
    const bool two = tb + kM < t1;
    const uint16_t* h0 = a.hi.data() + tb * a.kp;
    const uint16_t* l0 = a.lo.data() + tb * a.kp;
    const uint16_t* h1 = h0 + kM * a.kp;
    const uint16_t* l1 = l0 + kM * a.kp;
    tile_zero<6>();
    if (two) tile_zero<7>();
    for (int64_t s = 0; s < steps; ++s) {
      // Decode streams the weights once: fetch a few tiles ahead (tile loads alone left each step waiting; split
      // f16 panels were just written and are in cache).
      if (f16 != nullptr) {
        const uint16_t* src = f16 + s * kStepU16;
        const char* ahead = reinterpret_cast<const char*>(src + 2 * kStepU16);
#pragma GCC unroll 16
        for (int l = 0; l < 16; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int i = 0; i < kStepU16; i += 32) split_f16_32(src + i, sh + i, sl + i);
        tiles::tile_sources_ready();
        tile_load<4>(sh, 64);
      } else {
        if (t1 - t0 <= kM && bl == nullptr) {
          const char* ahead = reinterpret_cast<const char*>(b + (s + 4) * kStepU16);
#pragma GCC unroll 16
          for (int l = 0; l < 16; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
        }
        tile_load<4>(b + s * kStepU16, 64);
      }
      // Per output, per step: hi.w, then lo.w, in both slots (split f16 weights: then hi.w_lo, lo.w_lo).
      tile_load<0>(h0 + s * kStep, sa);
      tile_dp_bf16<6, 0, 4>();
      tile_load<1>(l0 + s * kStep, sa);
      tile_dp_bf16<6, 1, 4>();
      if (two) {
        tile_load<2>(h1 + s * kStep, sa);
        tile_dp_bf16<7, 2, 4>();
        tile_load<3>(l1 + s * kStep, sa);
        tile_dp_bf16<7, 3, 4>();
      }
      if (bl != nullptr || f16 != nullptr) {
        tile_load<5>(f16 != nullptr ? sl : bl + s * kStepU16, 64);
        tile_dp_bf16<6, 0, 5>();
        tile_dp_bf16<6, 1, 5>();
        if (two) {
          tile_dp_bf16<7, 2, 5>();
          tile_dp_bf16<7, 3, 5>();
        }
      }
    }
    // Straight into the output where the tile covers 16 whole rows of it, else through `c`.
    auto store = [&](auto slot, int64_t first) {
      constexpr int kC = decltype(slot)::value;
      const int64_t valid = std::min<int64_t>(kM, t1 - first);
      if (valid == kM && rows == kN) {
        tiles::tile_store_rows<kC>(out + first * ld, ld * 4);
        return;
      }
      tiles::tile_store<kC>(c);
      for (int64_t t = 0; t < valid; ++t) std::memcpy(out + (first + t) * ld, c + t * kN, sizeof(float) * rows);
    };
    store(std::integral_constant<int, 6>{}, tb);
    if (two) store(std::integral_constant<int, 7>{}, tb + kM);
  }
}

// Activation rows per pass over the panels: their hi and lo (4 bytes an element) stay in L2 while each panel is
// laid out once per pass.
inline int64_t token_block(int64_t kp) { return std::clamp<int64_t>((int64_t{1} << 20) / (kp * 4) / 32 * 32, 32, 512); }

// out [n, m] = x [n, k] . w^T for bf16 or f16 weights, on the tiles; no bias (the caller adds it).
// FailedPrecondition when w is repacked in a layout that does not describe it.
inline Status matmul(const MatMulOp& op, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0);
  const PanelLayout* lay = panel_layout(op.w);
  if (lay != nullptr && (lay->panel_rows != kN || !lay->describes(op.w.dtype, m, k, op.w.offset) || k % kStep != 0)) {
    return panels_unreadable(*lay);
  }
  const auto* w = data<const uint16_t>(op.w);
  const bool f16 = op.w.dtype == DType::kF16;
  float* out = data<float>(op.out);
  thread_local SplitActs tls_acts;
  SplitActs& a = tls_acts;
  split_acts(data<const float>(op.x), n, k, a, ctx);
  const int64_t steps = a.kp / kStep, whole = lay ? m / kN : 0, panels = (m + kN - 1) / kN;
  const int64_t block = token_block(a.kp);
  const tiles::TileConfig config = bf16_tiles(static_cast<int>(std::min<int64_t>(kM, n)));
  // Runs of panels per job item, so that a thread configures its tiles once per run (ldtilecfg and tilerelease
  // per panel cost more than a decode panel's products).
  const int64_t runs = std::min<int64_t>(panels, int64_t{16} * (ctx.pool ? ctx.pool->threads() : 1));
  for (int64_t r0 = 0; r0 < n; r0 += block) {
    const int64_t r1 = std::min(n, r0 + block);
    parallel_for(ctx, runs, [&](int64_t run) {
      thread_local AVec<uint16_t> gathered, whi, wlo;
      const tiles::TileScope scope(config);
      for (int64_t pi = panels * run / runs; pi < panels * (run + 1) / runs; ++pi) {
        const int64_t i0 = pi * kN;
        const int rows = static_cast<int>(std::min<int64_t>(kN, m - i0));
        // The panel in repack.h's layout: in place, or gathered from row-major rows.
        const uint16_t* b = w + i0 * k;
        if (pi >= whole) {
          gather_pairs(w + i0 * k, k, rows, a.kp, gathered);
          b = gathered.data();
        }
        // f16: split once per panel where the pass has several pairs of activation tiles, else step by step.
        const uint16_t* bl = nullptr;
        const uint16_t* per_step = nullptr;
        if (f16 && r1 - r0 > 2 * kM) {
          split_f16(b, steps, whi, wlo);
          b = whi.data();
          bl = wlo.data();
        } else if (f16) {
          per_step = b;
        }
        tiles::tile_sources_ready();
        panel_tiles(b, bl, per_step, steps, a, r0, r1, out + i0, m, rows);
      }
    });
  }
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA::dense_tiles
#endif  // TS_AMX_TILES && __AVX512BF16__
