// bf16 and f16 matmuls on weights the device repacked into panels (the avx512 and avx2 builds): every batch size,
// decode included. Included by matmul_dense.cc inside its per-build namespace.
//
// Layout (repack.h): a panel holds 16 (avx2: 8) consecutive weight rows, element by element; element j of the panel
// is one vector of 16 values, lane r = row r's element j. One widening load (f16: vcvtph2ps; bf16: a zero extension
// and a shift) gives 16 rows' element j as f32 lanes, and one FMA against the broadcast activation x[t][j] advances
// 16 outputs at once. A register tile is kGroup panels x kT activation rows: avx512 3 x 8, 24 accumulators, and per
// element 3 widening loads and 8 broadcasts for 24 FMAs (avx2 2 x 6). The row-major tiles (matmul_dense.cc's gemm) keep
// a weight row's elements across the lanes instead, so every output ends in a reduction and every element of a chunk
// needs a widened weight vector per 6 activation rows: on a Zen 5 core they ran at 62-73% of the FMA peak at f16 / bf16
// [8192 x 2048] x 512 rows, where this tile runs near 90% (docs/benchmarks.md).
//
// Numbers: each output is one FMA chain over the elements in order (acc = w[j] * x[j] + acc, j = 0, 1, ...), in its
// own lane, whatever the tile, the batch size or the thread: a k-block that ends parks the partial sum in the
// output and the next one continues the same chain from it, so a row's bits do not depend on what shares its
// batch. That order differs from dot()'s (two 8-wide accumulators, then a reduction), so a repacked matrix and
// the same matrix row-major give results that differ in the last bits; each matrix keeps one arithmetic at every
// batch size. The rows past the last whole panel stay row-major and take dot().
#pragma once

#include "ops/cpu/kernels.h"

#if defined(__AVX2__) && !defined(TS_AMX_TILES)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "ops/cpu/repack.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA::dense_panels {

#if defined(__AVX512F__)
constexpr int kP = 16;     // weight rows per panel: one f32 lane each
constexpr int kGroup = 3;  // panels per register tile
constexpr int kT = 8;      // activation rows per register tile: kGroup x kT = 24 accumulators (of 32 registers)
using VF = __m512;
inline VF vzero() { return _mm512_setzero_ps(); }
inline VF vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, VF v) { _mm512_storeu_ps(p, v); }
inline VF vbcast(float v) { return _mm512_set1_ps(v); }
inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
#else
constexpr int kP = 8;  // the avx2 build: 8 rows, 2 panels x 6 rows = 12 accumulators (of 16 registers)
constexpr int kGroup = 2;
constexpr int kT = 6;
using VF = __m256;
inline VF vzero() { return _mm256_setzero_ps(); }
inline VF vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, VF v) { _mm256_storeu_ps(p, v); }
inline VF vbcast(float v) { return _mm256_set1_ps(v); }
inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
#endif
constexpr int kElemsPerLine = 64 / (kP * 2);  // elements whose vectors share a 64-byte line
// Panels per group for a single activation row (decode): each output is a chain of dependent FMAs, so a group of
// kGroup panels had kGroup chains in flight, which bound the avx2 build's decode at half the row-major kernel's
// speed (f16 16384 x 4096, one thread, Zen 5: 7.0-8.1 against 4.0-5.8 ms); six keep the loads ahead of them.
constexpr int kDecodeGroup = 6;
// Elements per k block when a call has more than one tile of activation rows: a group's slice (3 x 16 x 1024
// values, 96 KiB) stays in L2 while a block of activation rows passes it. With one tile there is nothing to
// reuse, and decode streams each panel front to back.
constexpr int64_t kBlockK = 1024;

#if defined(__AVX512F__)
// The masked forms: GCC 12 warns (-Wmaybe-uninitialized) on the unmasked ones' undefined pass-through.
constexpr __mmask16 kAll = 0xffff;
inline VF widen(const uint16_t* p) {  // f16
  return _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VF widen(const Bf16* p) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, w, 16));
}
#else
inline VF widen(const uint16_t* p) { return load8(p); }  // simd.h: vcvtph2ps, or a zero extension and a shift
inline VF widen(const Bf16* p) { return load8(p); }
#endif

// Streaming the weights from memory (decode: one tile per group, each panel read once), each line read also
// fetches the line `ahead` bytes further, as the quantised panels do (matmul_repacked.h): 2 KiB into L1, or on AMD
// before Zen 5 kFarPrefetchBytes into L2 (prefetch_panels_far_to_l2). On Zen 5 (f16 16384 x 4096 from memory, one
// thread, median ms of alternating runs) the near fetch gave 4.9-5.6 (avx2 build) and 4.1-5.5 (avx512), the far
// one 6.1-7.4 and 5.4-6.8, the row-major kernels 4.8-5.4 and 4.6-7.4; the far fetch on Zen 3 / 4 is not measured.
struct Prefetch {
  int64_t ahead = 0;  // bytes; 0: none (a group's slice is in L2 after the first tile of a block)
  bool far = false;
};

// out[t * ldo + 16 g + r] for g < G panels (panel g at w + g * 16 * k), t < T activation rows (x + t * ldx),
// summed over elements [j0, j1), continuing from the stored partial sums when `resume`.
template <typename W, int G, int T>
void tile(const W* w, int64_t k, const float* x, int64_t ldx, int64_t j0, int64_t j1, float* out, int64_t ldo,
          bool resume, Prefetch pf) {
  VF acc[G][T];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[g][t] = resume ? vload(out + t * ldo + g * kP) : vzero();
  const int64_t ps = kP * k;
  for (int64_t j = j0; j < j1; ++j) {
    if (pf.ahead != 0 && j % kElemsPerLine == 0) {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        const char* next = reinterpret_cast<const char*>(w + g * ps + j * kP) + pf.ahead;
        if (pf.far) {
          _mm_prefetch(next, _MM_HINT_T1);
        } else {
          _mm_prefetch(next, _MM_HINT_T0);
        }
      }
    }
    VF wv[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) wv[g] = widen(w + g * ps + j * kP);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const VF xb = vbcast(x[t * ldx + j]);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) acc[g][t] = vfma(wv[g], xb, acc[g][t]);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) vstore(out + t * ldo + g * kP, acc[g][t]);
}

// tile<W, G, T> for every G in [1, kGroup] and T in [1, kT], indexed [G - 1][T - 1].
using TileFn = void (*)(const void*, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t, bool, Prefetch);
template <typename W, int G, int T>
void tile_erased(const void* w, int64_t k, const float* x, int64_t ldx, int64_t j0, int64_t j1, float* out, int64_t ldo,
                 bool resume, Prefetch pf) {
  tile<W, G, T>(static_cast<const W*>(w), k, x, ldx, j0, j1, out, ldo, resume, pf);
}
template <typename W, int G, int... T>
constexpr std::array<TileFn, kT> tile_row(std::integer_sequence<int, T...>) {
  return {&tile_erased<W, G, T + 1>...};
}
template <typename W, int... G>
constexpr std::array<std::array<TileFn, kT>, kGroup> tile_table(std::integer_sequence<int, G...>) {
  return {tile_row<W, G + 1>(std::make_integer_sequence<int, kT>{})...};
}
// tile<W, G, 1> for every G in [1, kDecodeGroup], indexed [G - 1].
template <typename W, int... G>
constexpr std::array<TileFn, kDecodeGroup> decode_tiles(std::integer_sequence<int, G...>) {
  return {&tile_erased<W, G + 1, 1>...};
}

// out [n, m] = x [n, k] . w^T for a matrix repacked into panels (`lay`); no bias (the caller adds it).
// FailedPrecondition when the layout does not describe the weight.
template <typename W>
Status matmul(const MatMulOp& op, const PanelLayout& lay, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0);
  if (lay.pairs || lay.panel_rows != kP || !lay.describes(op.w.dtype, m, k, op.w.offset)) return panels_unreadable(lay);
  const W* w = data<const W>(op.w);
  const float* x = data<const float>(op.x);
  float* out = data<float>(op.out);
  const int group = n == 1 ? kDecodeGroup : kGroup;
  const int64_t whole = m / kP, groups = (whole + group - 1) / group;
  const int64_t kc = n <= kT ? k : std::min(k, kBlockK), kblocks = (k + kc - 1) / kc;
  // Activation rows per block: their slice of kc elements stays in L2 (384 KiB) while the groups pass.
  const int64_t nb = std::min(n, std::clamp<int64_t>((int64_t{384} << 10) / (kc * 4) / kT * kT, kT, 96));
  const int64_t rblocks = (n + nb - 1) / nb;
  static constexpr auto kTiles = tile_table<W>(std::make_integer_sequence<int, kGroup>{});
  static constexpr auto kDecodeTiles = decode_tiles<W>(std::make_integer_sequence<int, kDecodeGroup>{});
  Prefetch pf;
  if (n <= kT) pf = prefetch_panels_far_to_l2() ? Prefetch{kFarPrefetchBytes, true} : Prefetch{2048, false};
  // Blocks run in order within each chunk of groups (parallel_for_blocks), so a group's k blocks follow each
  // other for every row block: the partial sums they park are the ones the next continues.
  parallel_for_blocks(
      ctx, groups, rblocks * kblocks,
      [&](int64_t b, int64_t g) {
        const int64_t r0 = b / kblocks * nb, r1 = std::min(n, r0 + nb);
        const int64_t j0 = b % kblocks * kc, j1 = std::min(k, j0 + kc);
        const int64_t p0 = g * group;
        const W* wg = w + p0 * kP * k;
        for (int64_t r = r0; r < r1; r += kT) {
          const int rows = static_cast<int>(std::min<int64_t>(kT, r1 - r));
          float* o = out + r * m + p0 * kP;
          const int here = static_cast<int>(std::min<int64_t>(group, whole - p0));
          const TileFn fn = n == 1 ? kDecodeTiles[here - 1] : kTiles[here - 1][rows - 1];
          fn(wg, k, x + r * k, k, j0, j1, o, m, j0 > 0, pf);
        }
      },
      static_cast<double>(nb * kc * group * kP), 1 << 16);
  // The rows past the last whole panel, row-major.
  const int64_t tail = whole * kP;
  if (tail < m) {
    parallel_for(
        ctx, n,
        [&](int64_t r) {
          for (int64_t i = tail; i < m; ++i) out[r * m + i] = dot(w + i * k, x + r * k, k);
        },
        static_cast<double>((m - tail) * k), 1 << 16);
  }
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA::dense_panels
#endif
