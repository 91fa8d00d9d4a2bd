// Matrix products with f32, f16 and bf16 weights. The avx512 and avx2 builds read bf16 and f16 matrices the device
// repacked at load from their panels at every batch size (matmul_dense_panels.h; the amx build: on bf16 tiles,
// matmul_amx_dense.h); what follows serves f32 and the row-major rest (a decode-bound classifier, matrices of fewer
// rows than a panel, every f16 / bf16 matrix of the generic build). With a few activation rows (decode) each
// weight row is streamed once, front to back, against every activation row: decode is bandwidth-bound and a single
// sequential stream per thread is what the prefetcher serves fastest. With more rows (a batch, a prefill
// chunk), gemm() runs register tiles: the avx512 build 4 weight rows x 6 activation rows of 512-bit
// accumulators, the avx2 build 4 x 3 of 256-bit ones in two passes; each weight panel sits in L1 while a block of
// activation rows sized for L2 passes it, and every output is bit-identical to dot() of its row. The generic
// build takes weight rows four at a time (tile4). f32 takes the same paths (no sgemm: see matmul_dense()).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_amx_dense.h"
#include "ops/cpu/matmul_dense_panels.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

constexpr int64_t kTile = 4;        // weight rows per tile
constexpr int64_t kRowBlock = 64;   // activation rows kept hot in L2 while the weights stream past
constexpr int64_t kSmallBatch = 4;  // fewer activation rows than this: row-by-row dot products

// Four weight rows against T activation rows (out[t * ld + r]), each output summed in exactly the order dot()
// uses (two accumulators over alternating 8-wide chunks, then the tail), so a row's result does not depend on
// whether it was computed here or by dot(): outputs are the same whatever the batch size (graph replay pads
// batches). Each weight chunk is loaded (and widened from f16 / bf16) once for the T rows; the avx2 build
// takes T = 1 (8 accumulators and 8 weight vectors fill its 16 registers). The avx512 build uses gemm() below.
constexpr int kTileTokens = 1;
template <typename W, int T>
void tile4(const W* w, int64_t k, const float* x, int64_t ldx, float* out, int64_t ld) {
  const W* r[4] = {w, w + k, w + 2 * k, w + 3 * k};
  int64_t j = 0;
  float s[T][4] = {};
#if defined(__AVX2__)
  __m256 a[T][4], b[T][4];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < 4; ++i) a[t][i] = b[t][i] = _mm256_setzero_ps();
  for (; j + 16 <= k; j += 16) {
    __m256 wa[4], wb[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      wa[i] = load8(r[i] + j);
      wb[i] = load8(r[i] + j + 8);
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) {
      const __m256 xa = _mm256_loadu_ps(x + t * ldx + j), xb = _mm256_loadu_ps(x + t * ldx + j + 8);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        a[t][i] = _mm256_fmadd_ps(wa[i], xa, a[t][i]);
        b[t][i] = _mm256_fmadd_ps(wb[i], xb, b[t][i]);
      }
    }
  }
  if (j + 8 <= k) {
    for (int t = 0; t < T; ++t) {
      const __m256 xa = _mm256_loadu_ps(x + t * ldx + j);
      for (int i = 0; i < 4; ++i) a[t][i] = _mm256_fmadd_ps(load8(r[i] + j), xa, a[t][i]);
    }
    j += 8;
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < 4; ++i) s[t][i] = hsum(_mm256_add_ps(a[t][i], b[t][i]));
#endif
  for (int t = 0; t < T; ++t) {
    for (int64_t e = j; e < k; ++e) {
      for (int i = 0; i < 4; ++i) s[t][i] += to_f32(r[i][e]) * x[t * ldx + e];
    }
    std::copy(s[t], s[t] + 4, out + t * ld);
  }
}

#if defined(__AVX512F__)
// Prefill GEMM (the avx512 build): a register tile of kGemmRows weight rows x up to kGemmTokens activation
// rows, one 512-bit accumulator per output, over the whole of k. A 16-lane accumulator fed 16-element chunks
// holds exactly what dot()'s two 8-lane accumulators hold (lanes 0-7 its first, 8-15 its second), an 8-element
// remainder goes to the low half only (a masked FMA leaves the high lanes untouched), and the reduction adds
// the halves before the same horizontal sum: every output is bit-identical to dot() of its row, so results
// do not depend on the batch size or on which path computed them. Each weight chunk is loaded and widened
// (f16 / bf16 -> f32) once per tile and used for kGemmTokens FMAs; each activation chunk is used for
// kGemmRows. 4 x 6 = 24 accumulators + 4 weight vectors + 1 activation vector fit the 32 registers.
constexpr int kGemmRows = 4;
constexpr int kGemmTokens = 6;

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
// The masked forms throughout: GCC 12 warns (-Wuninitialized) on the unmasked ones' undefined pass-through.
inline __m512 load16(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load16(const Bf16* p) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
}
// The first 8 elements in the low lanes, zeros above (nothing past p + 8 is read).
inline __m512 load8z(const float* p) { return _mm512_maskz_loadu_ps(0x00ff, p); }
inline __m256i load8_u16(const void* p) {
  return _mm256_zextsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}
inline __m512 load8z(const uint16_t* p) { return _mm512_maskz_cvtph_ps(0x00ff, load8_u16(p)); }
inline __m512 load8z(const Bf16* p) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(0x00ff, load8_u16(p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0x00ff, w, 16));
}

// out[t * ldo + i] = row i of w . row t of x, for i < R, t < T.
template <typename W, int R, int T>
void gemm_tile(const W* w, const float* x, int64_t k, float* out, int64_t ldo) {
  // The accumulators stay in registers for the main loop only (its loops unrolled) and go to `sums` after it, where
  // the remainder and the reduction read them: with those two as loops over `acc` itself, GCC 12 kept the array on
  // the stack from its zeroing on; with them unrolled too, it ran short of registers and spilled inside the main
  // loop (Zen 4, f16 [2048 x 768] x 512 rows, one thread: 49 -> 41 G multiply-adds/s).
  __m512 acc[R][T];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= k; j += 16) {
    __m512 wv[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) wv[i] = load16(w + i * k + j);
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * k + j);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
    }
  }
  alignas(64) float sums[R][T][16];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) _mm512_store_ps(sums[i][t], acc[i][t]);
  if (j + 8 <= k) {
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = load8z(w + i * k + j);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = load8z(x + t * k + j);
      for (int i = 0; i < R; ++i)
        _mm512_store_ps(sums[i][t], _mm512_mask3_fmadd_ps(wv[i], xv, _mm512_load_ps(sums[i][t]), 0x00ff));
    }
    j += 8;
  }
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < R; ++i) {
      const __m512 a = _mm512_load_ps(sums[i][t]);
      const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(a), 0));
      const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(a), 1));
      float s = hsum(_mm256_add_ps(lo, hi));
      for (int64_t e = j; e < k; ++e) s += to_f32(w[i * k + e]) * x[t * k + e];
      out[t * ldo + i] = s;
    }
  }
}
#elif defined(__AVX2__)
// The avx2 build's tile: 4 weight rows x 3 activation rows, one 8-lane accumulator per output, in two passes over
// each block of k (kGemmBlockK below). dot() sums a row in two accumulators, the first over the even 8-element chunks
// (and an odd last chunk), the second over the odd ones; the tile's first pass runs the even chunks into its 12
// accumulators and parks them on the stack, the second runs the odd chunks into fresh ones, and each output is
// hsum(first + second) and the scalar tail: bit-identical to dot(), so outputs still do not depend on the batch size.
// Holding both halves at once (the former 2 x 3 tile with pairs of accumulators) left 10 loads for 12 FMAs; here the 3
// activation vectors of a chunk sit in registers for the 4 weight rows, one weight vector at a time: 7 loads for 12
// FMAs, 16 registers.
constexpr int kGemmRows = 4;
constexpr int kGemmTokens = 3;

// acc[i][t] += rows of w . rows of x over the 8-element chunks at j0, j0 + 16, j0 + 32, ... below `end`.
template <typename W, int R, int T>
inline void gemm_pass(const W* w, const float* x, int64_t k, int64_t j0, int64_t end, __m256 (&acc)[R][T]) {
  for (int64_t j = j0; j + 8 <= end; j += 16) {
    __m256 xv[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + t * k + j);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 wv = load8(w + i * k + j);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
}

// Elements of k per block of gemm_tile's passes: both passes of a block read the same 8-element chunks' lines, so
// the second finds them in L1 only if a block's R weight rows and T activation rows fit there beside the next
// panel. A row up to kGemmWholeK elements is one block; longer ones go in blocks of kGemmBlockK (a multiple of 16, so
// every block starts on an even chunk). f16 [768 x 2048] x 512 rows, one thread, Zen 4 (32 KiB L1): 38 -> 44 G
// multiply-adds/s with gemm_panel's L2 prefetch, where a 4 x 3 tile's 40 KiB of lines missed L1 in every pass.
constexpr int64_t kGemmWholeK = 1024;
constexpr int64_t kGemmBlockK = 512;

template <typename W, int R, int T>
void gemm_tile(const W* w, const float* x, int64_t k, float* out, int64_t ldo) {
  const int64_t full = k / 16 * 16;  // the 16-element steps of dot()
  const int64_t vec = k / 8 * 8;     // plus its last 8-element chunk (into the first accumulator)
  const int64_t kc = k <= kGemmWholeK ? k : kGemmBlockK;
  // Every loop over the tile is unrolled, so that the accumulators live in registers through each pass: left rolled
  // (GCC 12 at -O2), they were zeroed in a stack array and loaded from it before each pass, and that store/reload
  // around 48-step passes (k = 768) cost 15% of the tile's time (4 x 3 in L1, Zen 4: 50 -> 58 G multiply-adds/s,
  // the FMA peak). Between blocks each pass's sums wait in `first` / `second`.
  alignas(32) float first[R][T][8], second[R][T][8];
  // One block: kStart (the first) starts both passes from zero, the others from the sums parked by the one before.
  const auto block = [&](int64_t k0, auto start) {
    constexpr bool kStart = decltype(start)::value;
    __m256 acc[R][T];
    const int64_t k1 = std::min(k, k0 + kc);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[i][t] = kStart ? _mm256_setzero_ps() : _mm256_load_ps(first[i][t]);
    gemm_pass<W, R, T>(w, x, k, k0, std::min(k1, vec), acc);  // even chunks, and an odd last one (at full)
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        _mm256_store_ps(first[i][t], acc[i][t]);
        acc[i][t] = kStart ? _mm256_setzero_ps() : _mm256_load_ps(second[i][t]);
      }
    gemm_pass<W, R, T>(w, x, k, k0 + 8, std::min(k1, full), acc);  // odd chunks
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) _mm256_store_ps(second[i][t], acc[i][t]);
  };
  block(0, std::true_type{});
  for (int64_t k0 = kc; k0 < k; k0 += kc) block(k0, std::false_type{});
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      float s = hsum(_mm256_add_ps(_mm256_load_ps(first[i][t]), _mm256_load_ps(second[i][t])));
      for (int64_t e = vec; e < k; ++e) s += to_f32(w[i * k + e]) * x[t * k + e];
      out[t * ldo + i] = s;
    }
  }
}
#endif

#if defined(__AVX2__)
// Weight rows [i0, i0 + R) against activation rows [r0, r1), T at a time with a shorter tile for the rest.
template <typename W, int R>
void gemm_panel_rows(const W* wp, const float* x, int64_t k, int64_t m, int64_t i0, int64_t r0, int64_t r1,
                     float* out) {
  int64_t r = r0;
  for (; r + kGemmTokens <= r1; r += kGemmTokens) gemm_tile<W, R, kGemmTokens>(wp, x + r * k, k, out + r * m + i0, m);
  const float* xp = x + r * k;
  float* op = out + r * m + i0;
  switch (r1 - r) {
    case 5:
      gemm_tile<W, R, 5>(wp, xp, k, op, m);
      break;
    case 4:
      gemm_tile<W, R, 4>(wp, xp, k, op, m);
      break;
    case 3:
      gemm_tile<W, R, 3>(wp, xp, k, op, m);
      break;
    case 2:
      gemm_tile<W, R, 2>(wp, xp, k, op, m);
      break;
    case 1:
      gemm_tile<W, R, 1>(wp, xp, k, op, m);
      break;
    default:
      break;
  }
}

template <typename W, int R>
void gemm_panel(const W* w, const float* x, int64_t k, int64_t m, int64_t i0, int64_t r0, int64_t r1, float* out) {
  const W* wp = w + i0 * k;
  // The next panel (the next index of this thread's chunk, adjacent in memory) is fetched while this one's tiles
  // run: a panel is read from memory once per block of activation rows, and the hardware prefetcher, idle during
  // the tiles, left its first loads waiting on DRAM (the widening below was 12% of prefill time). Into L2, not L1:
  // a panel of 4 rows of 2048 f16 is 16 KiB, and fetched into L1 it pushed out the lines the tiles were reading
  // (avx2, f16 [768 x 2048] x 512 rows, one thread, Zen 4: 38 -> 44 G multiply-adds/s with the tile's k blocks;
  // the avx512 tile and rows of 768 unchanged).
  if (i0 + 2 * R <= m) {
    const char* next = reinterpret_cast<const char*>(wp + R * k);
    const int64_t bytes = R * k * static_cast<int64_t>(sizeof(W));
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(next + o, _MM_HINT_T1);
  }

  gemm_panel_rows<W, R>(wp, x, k, m, i0, r0, r1, out);
}

// Many activation rows: blocks of rows sized to stay in L2 (~384 KiB) while every weight panel passes
// through L1 once per block; the panels of a block are spread over the stream's threads.
template <typename W>
void gemm(const MatMulOp& op, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0);
  const float* x = data<const float>(op.x);
  const W* w = data<const W>(op.w);
  float* out = data<float>(op.out);
  const int64_t block = std::clamp<int64_t>((384 << 10) / (k * 4) / kGemmTokens * kGemmTokens, kGemmTokens, 96);
  const int64_t panels = (m + kGemmRows - 1) / kGemmRows;
  parallel_for_blocks(
      ctx, panels, (n + block - 1) / block,
      [&](int64_t b, int64_t p) {
        const int64_t r0 = b * block, r1 = std::min(n, r0 + block);
        const int64_t i0 = p * kGemmRows;
        if (i0 + kGemmRows <= m) {
          gemm_panel<W, kGemmRows>(w, x, k, m, i0, r0, r1, out);
        } else {
          for (int64_t i = i0; i < m; ++i) gemm_panel<W, 1>(w, x, k, m, i, r0, r1, out);
        }
      },
      static_cast<double>(std::min(n, block) * k * kGemmRows), 1 << 16);
}
#endif

#if defined(__AVX2__)
// R weight rows against one activation row, each summed exactly as dot() sums it (two 8-wide accumulators
// over 16-element steps, an 8-wide step, hsum, then the scalar tail), so decode keeps the bits of every
// other path; R rows in lockstep give 2R FMA chains. With `far`, every line read also fetches the line
// kFarPrefetchBytes ahead into L2 (AMD Zen 4, f16 16384 x 4096 from memory: one thread 10.7 -> 15.8 G
// multiply-adds/s, two 14.3 -> 18.8 on a slow bus; docs/benchmarks.md).
template <typename W, int R>
inline void dot_rows(const W* a, int64_t lda, const float* b, int64_t n, float* out, bool far) {
  constexpr int64_t kLineElems = 64 / sizeof(W);
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (far && i % kLineElems == 0) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(a + r * lda + i) + kFarPrefetchBytes, _MM_HINT_T1);
    }
    const __m256 b0 = _mm256_loadu_ps(b + i), b1 = _mm256_loadu_ps(b + i + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm256_fmadd_ps(load8(a + r * lda + i), b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(load8(a + r * lda + i + 8), b1, acc1[r]);
    }
  }
  const int64_t i8 = i;
  if (i8 + 8 <= n) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc0[r] = _mm256_fmadd_ps(load8(a + r * lda + i8), _mm256_loadu_ps(b + i8), acc0[r]);
    i += 8;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float s = hsum(_mm256_add_ps(acc0[r], acc1[r]));
    for (int64_t j = i; j < n; ++j) s += to_f32(a[r * lda + j]) * b[j];
    out[r] = s;
  }
}
constexpr int kDecodeRows = 2;
#endif

template <typename W>
void matmul_rows(const MatMulOp& op, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0);
  const float* x = data<const float>(op.x);
  const W* w = data<const W>(op.w);
  float* out = data<float>(op.out);
  if (n < kSmallBatch) {
    // Decode. dot() alone is bound by its two FMA chains (f16, one thread: 30 GB/s of a 42 GB/s read
    // ceiling), so kDecodeRows rows go in lockstep (dot_rows), each summed in dot()'s order. Which rows
    // matters: rows side by side (the tile below, or dot_rows over adjacent rows) are short streams that the
    // hardware prefetcher loses at every row's end (adjacent pairs ran at 60% of dot()'s speed, four-row
    // tiles at 40%). So row i goes with row i + m / 2: two long sequential streams. stories110M f16 decode
    // step, one thread, depth 1-33: 7.4 ms -> 5.85 ms (about 40 GB/s); four streams gave 6.6 ms.
#if defined(__AVX2__)
    const int64_t part = m / kDecodeRows;
    const bool far = prefetch_far_to_l2();
    parallel_for(ctx, part, [&](int64_t i) {
      for (int64_t r = 0; r < n; ++r) {
        float o[kDecodeRows];
        dot_rows<W, kDecodeRows>(w + i * k, part * k, x + r * k, k, o, far);
        for (int j = 0; j < kDecodeRows; ++j) out[r * m + i + j * part] = o[j];
      }
    });
    for (int64_t i = part * kDecodeRows; i < m; ++i) {
      for (int64_t r = 0; r < n; ++r) out[r * m + i] = dot(w + i * k, x + r * k, k);
    }
#else
    parallel_for(ctx, m, [&](int64_t i) {
      for (int64_t r = 0; r < n; ++r) out[r * m + i] = dot(w + i * k, x + r * k, k);
    });
#endif
    return;
  }
#if defined(__AVX2__)
  gemm<W>(op, ctx);
#else
  const int64_t tiles = (m + kTile - 1) / kTile;
  for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
    const int64_t r1 = std::min(n, r0 + kRowBlock);
    parallel_for(ctx, tiles, [&](int64_t t) {
      const int64_t i0 = t * kTile;
      const int64_t cnt = std::min(kTile, m - i0);
      int64_t r = r0;
      if (cnt == kTile) {
        for (; r + kTileTokens <= r1; r += kTileTokens)
          tile4<W, kTileTokens>(w + i0 * k, k, x + r * k, k, out + r * m + i0, m);
      }
      for (; r < r1; ++r) {
        const float* xr = x + r * k;
        if (cnt == kTile) {
          tile4<W, 1>(w + i0 * k, k, xr, k, out + r * m + i0, m);
        } else {
          for (int64_t i = 0; i < cnt; ++i) out[r * m + i0 + i] = dot(w + (i0 + i) * k, xr, k);
        }
      }
    });
  }
#endif
}

void add_bias(const MatMulOp& op) {
  if (!op.bias.valid()) return;
  const int64_t n = op.out.dim(0), m = op.out.dim(1);
  const float* b = data<const float>(op.bias);
  float* out = data<float>(op.out);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < m; ++i) out[r * m + i] += b[i];
  }
}

}  // namespace

Status matmul_dense(const MatMulOp& op, const Ctx& ctx) {
#if defined(TS_AMX_TILES)
  // The amx builds: bf16 weights, and f16 weights whose rows are whole 32-element tile steps, on bf16 tiles at every
  // batch size (matmul_amx_dense.h); f32 and the other f16 matrices below (e.g. gemma4's 16-wide per-layer input
  // projections, kept f16 in llama.cpp's Q8_0 files: on tiles, zero-padded, they tipped two near ties of the
  // strict llama.cpp parity check, 6 of 8 identical where the f32 kernels keep 7 of 8). The choice is by shape,
  // so a matrix takes one arithmetic at every batch size. So is an f16 classifier's (WeightHints::decode_bound):
  // prefill multiplies only its last row by it, so tiles gain nothing there, and a decode step on tiles is bound
  // by storing each step's split weights (llama3.2-1b F16, 4 layers, 1 thread: 15.9 -> 12.7 tok/s with it on tiles).
  if (op.w.dtype == DType::kBF16 ||
      (op.w.dtype == DType::kF16 && op.x.dim(1) % dense_tiles::kStep == 0 && !decode_bound(op.w))) {
    TS_RETURN_IF_ERROR(dense_tiles::matmul(op, ctx));
    add_bias(op);
    return ok_status();
  }
#endif
#if defined(__AVX2__) && !defined(TS_AMX_TILES)
  // The avx512 and avx2 builds: bf16 and f16 matrices the device repacked (every one but a decode-bound classifier and
  // matrices of fewer rows than a panel) on the panel tiles at every batch size (matmul_dense_panels.h).
  if (const PanelLayout* lay = panel_layout(op.w); lay != nullptr && op.w.dtype == DType::kF16) {
    TS_RETURN_IF_ERROR(dense_panels::matmul<uint16_t>(op, *lay, ctx));
    add_bias(op);
    return ok_status();
  } else if (lay != nullptr && op.w.dtype == DType::kBF16) {
    TS_RETURN_IF_ERROR(dense_panels::matmul<Bf16>(op, *lay, ctx));
    add_bias(op);
    return ok_status();
  }
#endif
  // No other build reads repacked bf16 / f16 panels.
  if (const PanelLayout* lay = panel_layout(op.w)) return panels_unreadable(*lay);
  switch (op.w.dtype) {
    case DType::kF32:
      // Through the tiles like f16 and bf16, never OpenBLAS's sgemm: sgemm rounds differently from dot(), so a
      // row's result would depend on how many rows share its step (a decode stream next to a prefill chunk
      // would then leave the greedy path a batch-1 run takes; scripts/planner-tie.sh found exactly that). The
      // avx2 tile costs some speed against sgemm (stories110M f32, prefill 512, 1 thread: 5.9 s against 4.4 s
      // of CPU time for 3 runs + warm-up); the avx512 tile beats it (2.9 s against 3.9 s).
      matmul_rows<float>(op, ctx);
      break;
    case DType::kF16:
      matmul_rows<uint16_t>(op, ctx);
      break;
    case DType::kBF16:
      matmul_rows<Bf16>(op, ctx);
      break;
    default:
      return unimplemented("cpu dense matmul takes f32, f16 or bf16 weights");
  }
  add_bias(op);
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
