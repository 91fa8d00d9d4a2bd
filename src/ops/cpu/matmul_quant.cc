// Matrix products with GGUF's 32-element block weights: q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4. The activation rows are
// quantised once per call to int8 blocks of 32 with an f32 scale and the block's integer sum; every weight block is
// then an integer dot product (the SIMD kernel's comment below: unsigned weight bytes against signed activations,
// 512-bit VNNI vpdpbusd over two blocks at a time in the avx512 build, maddubs + madd over one in the avx2 build), one
// int->float conversion and one FMA with the two blocks' scales. Decode (fewer than 4 activation rows) streams one
// weight row at a time against all of them; prefill takes tiles of 4 (avx2: 2) weight rows x 4 activation rows,
// so each activation block is loaded once for 4 weight rows and each weight block decoded once for 4 activation
// rows (avx512: once for a block of 64, prepare_tile).
// In the SIMD builds these row-by-row kernels serve q8_0 only (repack.h says why); the other types take
// matmul_packed.h's and matmul_repacked.h's rows-in-lanes kernels (decoders at the end of this file). The generic
// build runs every type here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include <fmt/core.h>

#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_amx.h"
#include "ops/cpu/matmul_packed.h"
#include "ops/cpu/matmul_repacked.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/simd.h"

// GCC 12's AVX-512 intrinsics start unmasked operations from _mm512_undefined_*(), which its own
// -Wmaybe-uninitialized then reports at every inlined call site (a known false positive of that release).
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

constexpr int64_t kRowBlock = 64;
constexpr int64_t kSmallBatch = 4;  // fewer activation rows than this: row-by-row dot products

struct QuantRows {
  std::vector<int8_t> q;    // n * k
  std::vector<float> d;     // n * k / 32
  std::vector<float> s;     // n * k / 32: d * sum(q), for the weight types with a minimum
  std::vector<int32_t> sq;  // n * k / 32: sum(q), for the offset of the unsigned weight bytes
  // The avx512 build's per-pair vectors (see spread_pairs): for each row and pair of blocks, 16 scales (d of
  // the first block in lanes 0-7, of the second in 8-15) and 16 ints (-sum(q) of each block in lanes 0 and 8).
  AVec<float> dv;
  AVec<int32_t> nv;
};

void quantize_rows(const float* x, int64_t n, int64_t k, QuantRows& out, const Ctx& ctx) {
  out.q.resize(static_cast<size_t>(n * k));
  out.d.resize(static_cast<size_t>(n * k / kQuantBlock));
  out.s.resize(static_cast<size_t>(n * k / kQuantBlock));
  out.sq.resize(static_cast<size_t>(n * k / kQuantBlock));
  const int64_t blocks = n * k / kQuantBlock;
  parallel_for(
      ctx, blocks,
      [&](int64_t b) {
        const float* xb = x + b * kQuantBlock;
#if defined(__AVX2__)
        {
          // Same result as the scalar loop below: cvtps rounds to nearest even, as nearbyint does by default.
          const __m256 sign = _mm256_set1_ps(-0.0f);
          __m256 v[4], m = _mm256_setzero_ps();
          for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
          }
          __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
          h = _mm_max_ps(h, _mm_movehl_ps(h, h));
          h = _mm_max_ss(h, _mm_movehdup_ps(h));
          const float d = _mm_cvtss_f32(h) / 127.0f;
          const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
          out.d[static_cast<size_t>(b)] = d;
          const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], id)),
                        i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], id));
          const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], id)),
                        i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], id));
          // packs work within 128-bit lanes; the permute puts the 32 bytes back in order.
          const __m256i p16a = _mm256_packs_epi32(i0, i1), p16b = _mm256_packs_epi32(i2, i3);
          const __m256i p8 =
              _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + b * kQuantBlock), p8);
          const int32_t sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
          out.sq[static_cast<size_t>(b)] = sum;
          out.s[static_cast<size_t>(b)] = d * static_cast<float>(sum);
          return;
        }
#endif
        float amax = 0.0f;
        for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out.d[static_cast<size_t>(b)] = d;
        int sum = 0;
        for (int i = 0; i < kQuantBlock; ++i) {
          out.q[static_cast<size_t>(b * kQuantBlock + i)] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
          sum += out.q[static_cast<size_t>(b * kQuantBlock + i)];
        }
        out.sq[static_cast<size_t>(b)] = sum;
        out.s[static_cast<size_t>(b)] = d * static_cast<float>(sum);
      },
      1.0, 257.0);
}

#if defined(__AVX2__)
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}
// 0x10 in byte j where bit j of the 32-bit qh is set: each byte picks its qh byte, then tests its own bit.
inline __m256i fifth_bits(const uint8_t* qh4) {
  uint32_t h;
  std::memcpy(&h, qh4, 4);
  const __m256i pick =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)), pick);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}
inline float scale(uint16_t h) { return _cvtsh_ss(h); }
#else
inline float scale(uint16_t h) { return f16_to_f32(h); }
#endif
// A block's weight scale: its f16 d, or mxfp4's power of two.
template <typename B>
inline float wscale(const B& b) {
  return scale(b.d);
}
inline float wscale(const BlockMXFP4& b) { return e8m0_half(b.e); }

// The 32 weights of a block as integers (the tail and the baseline build).
inline void weights_of(const BlockQ8_0& b, int* w) {
  for (int i = 0; i < 32; ++i) w[i] = b.qs[i];
}
inline void nibbles_of(const uint8_t* qs, int offset, int* w) {
  for (int j = 0; j < 16; ++j) {
    w[j] = (qs[j] & 0x0f) - offset;
    w[j + 16] = (qs[j] >> 4) - offset;
  }
}
inline void add_fifth_bits(const uint8_t* qh4, int* w) {
  uint32_t h;
  std::memcpy(&h, qh4, 4);
  for (int i = 0; i < 32; ++i) w[i] += static_cast<int>((h >> i) & 1u) << 4;
}
inline void weights_of(const BlockQ4_0& b, int* w) { nibbles_of(b.qs, 8, w); }
inline void weights_of(const BlockMXFP4& b, int* w) {
  for (int j = 0; j < 16; ++j) {
    w[j] = kMxfp4Values[b.qs[j] & 0x0f];
    w[j + 16] = kMxfp4Values[b.qs[j] >> 4];
  }
}
inline void weights_of(const BlockQ4_1& b, int* w) { nibbles_of(b.qs, 0, w); }
inline void weights_of(const BlockQ5_0& b, int* w) {
  nibbles_of(b.qs, 16, w);
  add_fifth_bits(b.qh, w);
}
inline void weights_of(const BlockQ5_1& b, int* w) {
  nibbles_of(b.qs, 0, w);
  add_fifth_bits(b.qh, w);
}

// sum over blocks of m * xd * sum(x_q) for the types with a minimum; zero (and no work) for the others.
template <typename B>
float min_term(const B* w, int64_t nb, const float* xs) {
  float s = 0.0f;
  if constexpr (std::is_same_v<B, BlockQ4_1> || std::is_same_v<B, BlockQ5_1>) {
    for (int64_t b = 0; b < nb; ++b) s += scale(w[b].m) * xs[b];
  }
  return s;
}

// One block's contribution, in plain integer arithmetic (the tail and the baseline build).
template <typename B>
float block_dot(const B& blk, const int8_t* xq, float xd) {
  int w[kQuantBlock];
  weights_of(blk, w);
  int32_t acc = 0;
  for (int i = 0; i < kQuantBlock; ++i) acc += w[i] * xq[i];
  return wscale(blk) * xd * static_cast<float>(acc);
}

// The SIMD builds' row-by-row kernels, inside this namespace (the header says why).
#include "ops/cpu/matmul_quant_rows.h"

// dot(one weight row of `nb` blocks, x) in plain integer arithmetic (the baseline build).
template <typename B>
float row_dot(const B* w, int64_t nb, const int8_t* xq, const float* xd, const float* xs) {
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) s += block_dot(w[b], xq + b * kQuantBlock, xd[b]);
  return s + min_term(w, nb, xs);
}

template <typename B>
void matmul_blocks(const MatMulOp& op, const QuantRows& xq, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0), nb = k / kQuantBlock;
  const B* w = data<const B>(op.w);
  float* out = data<float>(op.out);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
#if defined(__AVX2__)
  const int8_t* q = xq.q.data();
  const float *d = xq.d.data(), *s = xq.s.data();
  const int32_t* sq = xq.sq.data();
  const float* dv = xq.dv.data();
  const int32_t* nv = xq.nv.data();
  if (n < kSmallBatch) {
    // Decode: one weight row at a time, front to back (see matmul_dense.cc: one sequential stream per thread
    // is what the prefetcher serves; q8_0 2048 x 768 on one thread ran 5.7 GB/s tiled, 27 GB/s row by row),
    // against every activation row at once.
    // Two rows at once, row i with row i + m / 2 (two long streams, as matmul_dense.cc's decode; each row
    // summed by the same instructions as alone).
    const int64_t half = m / 2;
    parallel_for(ctx, half, [&](int64_t i) {
      micro_tokens<B, 2>(static_cast<int>(n), w + i * nb, nb, k, q, d, sq, s, dv, nv, out + i, m, half * nb, half);
    });
    for (int64_t i = 2 * half; i < m; ++i)
      micro_tokens<B, 1>(static_cast<int>(n), w + i * nb, nb, k, q, d, sq, s, dv, nv, out + i, m);
  } else {
    // Prefill: tiles of kTileRows weight rows x kTileTokens activation rows; each weight block is decoded
    // once per tile and the activation rows of a 64-row block stay in L2 while the weights stream past.
    const int64_t tiles = (m + kTileRows - 1) / kTileRows;
    parallel_for_blocks(ctx, tiles, (n + kRowBlock - 1) / kRowBlock, [&](int64_t blk, int64_t ti) {
      const int64_t r0 = blk * kRowBlock, r1 = std::min(n, r0 + kRowBlock);
      {
        const int64_t i0 = ti * kTileRows, rows = std::min<int64_t>(kTileRows, m - i0);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
        if (rows == kTileRows && r1 - r0 > kTileTokens) {
          // The tile's vectors once for this activation block (prepare_tile), then every 4 rows of it.
          thread_local AVec<uint8_t> tls_tile;  // raw bytes: a vector of VI would drop its alignment attribute
          const int64_t np = (nb + 1) / 2;
          tls_tile.resize(static_cast<size_t>(np * kTileRows) * (sizeof(VI) + sizeof(VF)));
          VI* wv = reinterpret_cast<VI*>(tls_tile.data());
          VF* ws = reinterpret_cast<VF*>(tls_tile.data() + static_cast<size_t>(np * kTileRows) * sizeof(VI));
          prepare_tile<B, kTileRows>(w + i0 * nb, nb, wv, ws);
          for (int64_t t0 = r0; t0 < r1; t0 += kTileTokens) {
            const int tt = static_cast<int>(std::min<int64_t>(kTileTokens, r1 - t0));
            const int64_t xo = t0 * nb, vo = t0 * ((nb + 1) / 2) * 16;
            micro_prepared_tokens<B, kTileRows>(tt, wv, ws, w + i0 * nb, nb, k, q + t0 * k, s + xo, dv + vo, nv + vo,
                                                out + t0 * m + i0, m);
          }
          return;
        }
#endif
        for (int64_t t0 = r0; t0 < r1; t0 += kTileTokens) {
          const int tt = static_cast<int>(std::min<int64_t>(kTileTokens, r1 - t0));
          const int64_t xo = t0 * nb, vo = t0 * ((nb + 1) / 2) * 16;
          if (rows == kTileRows) {
            micro_tokens<B, kTileRows>(tt, w + i0 * nb, nb, k, q + t0 * k, d + xo, sq + xo, s + xo, dv + vo, nv + vo,
                                       out + t0 * m + i0, m);
          } else {
            for (int64_t i = i0; i < i0 + rows; ++i)
              micro_tokens<B, 1>(tt, w + i * nb, nb, k, q + t0 * k, d + xo, sq + xo, s + xo, dv + vo, nv + vo,
                                 out + t0 * m + i, m);
          }
        }
      }
    });
  }
  if (bias) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < m; ++i) out[r * m + i] += bias[i];
  }
#else
  parallel_for(ctx, m, [&](int64_t i) {
    for (int64_t r = 0; r < n; ++r) {
      const float v = row_dot(w + i * nb, nb, xq.q.data() + r * k, xq.d.data() + r * nb, xq.s.data() + r * nb);
      out[r * m + i] = bias ? v + bias[i] : v;
    }
  });
#endif
}

#if defined(__AVX2__)
// Decoders for matmul_packed.h: the blocks' scales, and their 32 weights as unsigned bytes q + off, one vector
// of kStep blocks at a time.
template <typename B>
struct PackBlocks {
  using Block = B;
  static constexpr int kBlockElems = kQuantBlock, kGroup = kQuantBlock, kStepBlocks = kStep;
  static constexpr bool kMin = false;
  static void scales(const B* w, int64_t b0, int nbl, float* s, float*) {
    for (int i = 0; i < nbl; ++i) s[i * packed::kP] = scale(w[b0 + i].d);
  }
  static VI unit(const B* w, int64_t b0, int nbl, int) { return weight_vec(w, b0, nbl == 2); }
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  // One block of 16 rows: d is the first half word.
  static void scales16(const B* b, __m512i offs, __mmask16 live, float* s, float*) {
    _mm512_store_ps(s, packed::half_lo(packed::gather_word(b, 0, offs, live)));
  }
#endif
};
struct PackQ4_0 : PackBlocks<BlockQ4_0> {
  static constexpr int kOffset = 8;
};
struct PackQ5_0 : PackBlocks<BlockQ5_0> {
  static constexpr int kOffset = 16;
};
// mxfp4: its scale is the exponent byte's 2^(e - 128), its bytes the codes' doubled values + 16 (block_bytes).
struct PackMXFP4 {
  using Block = BlockMXFP4;
  static constexpr int kBlockElems = kQuantBlock, kGroup = kQuantBlock, kStepBlocks = kStep, kOffset = 16;
  static constexpr bool kMin = false;
  static void scales(const Block* w, int64_t b0, int nbl, float* s, float*) {
    for (int i = 0; i < nbl; ++i) s[i * packed::kP] = e8m0_half(w[b0 + i].e);
  }
  static VI unit(const Block* w, int64_t b0, int nbl, int) { return weight_vec(w, b0, nbl == 2); }
};
// q4_1 and q5_1 (the rows-in-lanes kernels in every SIMD build; in the amx build, from kTileMinRows rows, the tiles,
// with the same bits). q8_0 stays on the row-by-row kernels in every build: the tiles' block sums need the
// rows-in-lanes rounding, with which the strict llama.cpp parity check fails (repack.h). q4_1 / q5_1: w = d q + m, so
// the minimum term is -m (the kernels subtract mn * xd * sum(x)).
template <typename B>
struct PackMinBlocks : PackBlocks<B> {
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;
  static void scales(const B* w, int64_t b0, int nbl, float* s, float* mn) {
    for (int i = 0; i < nbl; ++i) {
      s[i * packed::kP] = scale(w[b0 + i].d);
      mn[i * packed::kP] = -scale(w[b0 + i].m);
    }
  }
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  // One block of 16 rows: d and m are the first word's halves.
  static void scales16(const B* b, __m512i offs, __mmask16 live, float* s, float* mn) {
    const __m512i h = packed::gather_word(b, 0, offs, live);
    _mm512_store_ps(s, packed::half_lo(h));
    const __m512 m = packed::half_lo(_mm512_srli_epi32(h, 16));
    _mm512_store_ps(mn, _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(m),
                                                             _mm512_set1_epi32(static_cast<int>(0x80000000u)))));
  }
#endif
};
using PackQ4_1 = PackMinBlocks<BlockQ4_1>;
using PackQ5_1 = PackMinBlocks<BlockQ5_1>;
#endif

}  // namespace

Status matmul_quant(const MatMulOp& op, const Ctx& ctx) {
#if defined(TS_AMX_TILES)
  if (const PanelLayout* lay = panel_layout(op.w)) {
    if (op.w.dtype == DType::kQ4_0)
      return packed::repacked_tiles_or_vectors<packed::PanelQ4_0, PackQ4_0>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ5_0)
      return packed::repacked_tiles_or_vectors<packed::PanelQ5_0, PackQ5_0>(op, *lay, ctx);
    return panels_unreadable(*lay);
  }
  switch (op.w.dtype) {
    case DType::kQ8_0:
      break;  // the row-by-row kernels below, as in the avx512 build
    case DType::kMXFP4:
      // The rows-in-lanes vector kernels at every batch size, as in the avx512 build (row-major: the amx build
      // does not repack mxfp4; no tile path reads it).
      packed::matmul<PackMXFP4>(op, ctx);
      return ok_status();
    case DType::kQ4_0:
      return packed::tiles_or_vectors<PackQ4_0>(op, ctx);
    case DType::kQ4_1:
      return packed::tiles_or_vectors<PackQ4_1>(op, ctx);
    case DType::kQ5_0:
      return packed::tiles_or_vectors<PackQ5_0>(op, ctx);
    case DType::kQ5_1:
      return packed::tiles_or_vectors<PackQ5_1>(op, ctx);
    default:
      return unimplemented(fmt::format("cpu quantised matmul does not take {} weights", dtype_name(op.w.dtype)));
  }
#endif
  if (const PanelLayout* lay = panel_layout(op.w)) {
#if defined(__AVX2__)
    // Repacked at load (repack.h): every batch size reads the panels.
    if (op.w.dtype == DType::kQ4_0) return packed::matmul_repacked<packed::PanelQ4_0, PackQ4_0>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ5_0) return packed::matmul_repacked<packed::PanelQ5_0, PackQ5_0>(op, *lay, ctx);
    if (op.w.dtype == DType::kMXFP4) return packed::matmul_repacked<packed::PanelMXFP4, PackMXFP4>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ4_1) return packed::matmul_repacked<packed::PanelQ4_1, PackQ4_1>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ5_1) return packed::matmul_repacked<packed::PanelQ5_1, PackQ5_1>(op, *lay, ctx);
#endif
    return panels_unreadable(*lay);
  }
#if defined(__AVX2__)
  // The kernels of matmul_packed.h, for every batch size, where they cover the type in this build.
  if (op.w.dtype == DType::kQ4_0) {
    packed::matmul<PackQ4_0>(op, ctx);
    return ok_status();
  }
  // q8_0 stays on the row-by-row kernels below, in every build (repack.h says why).
  if (op.w.dtype == DType::kQ5_0) {
    packed::matmul<PackQ5_0>(op, ctx);
    return ok_status();
  }
  if (op.w.dtype == DType::kMXFP4) {
    packed::matmul<PackMXFP4>(op, ctx);
    return ok_status();
  }
  if (op.w.dtype == DType::kQ4_1) {
    packed::matmul<PackQ4_1>(op, ctx);
    return ok_status();
  }
  if (op.w.dtype == DType::kQ5_1) {
    packed::matmul<PackQ5_1>(op, ctx);
    return ok_status();
  }
#endif
  thread_local QuantRows xq;
  quantize_rows(data<const float>(op.x), op.x.dim(0), op.x.dim(1), xq, ctx);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  spread_pairs(xq, op.x.dim(0), op.x.dim(1) / kQuantBlock);
#endif
  if (op.w.dtype == DType::kQ8_0) {
    matmul_blocks<BlockQ8_0>(op, xq, ctx);
  } else if (op.w.dtype == DType::kQ4_0) {
    matmul_blocks<BlockQ4_0>(op, xq, ctx);
  } else if (op.w.dtype == DType::kQ4_1) {
    matmul_blocks<BlockQ4_1>(op, xq, ctx);
  } else if (op.w.dtype == DType::kQ5_0) {
    matmul_blocks<BlockQ5_0>(op, xq, ctx);
  } else if (op.w.dtype == DType::kQ5_1) {
    matmul_blocks<BlockQ5_1>(op, xq, ctx);
  } else if (op.w.dtype == DType::kMXFP4) {
    matmul_blocks<BlockMXFP4>(op, xq, ctx);
  } else {
    return unimplemented(fmt::format("cpu quantised matmul does not take {} weights", dtype_name(op.w.dtype)));
  }
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
