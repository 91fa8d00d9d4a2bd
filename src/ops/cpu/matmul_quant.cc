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

#if defined(__AVX2__)
// The SIMD kernel. Every weight block becomes 32 unsigned bytes u = q + off (q8_0: q + 128, q4_0: nibble = q + 8,
// q5_0: q + 16, the _1 types: q itself), so one u8 x s8 product against the activation block gives
// sum(u * x) = sum(q * x) + off * sum(x); the accumulator starts at -off * sum(x) (the activation block's
// integer sum, kept with its quantisation), which leaves the exact sum(q * x) in int32 with no sign fix-ups.
// With 512-bit VNNI one vpdpbusd takes two blocks (64 bytes); on AVX2 maddubs + madd take one (there q8_0
// keeps its signed form, since 255 * 127 * 2 would saturate maddubs' int16 pairs, and uses the sign trick).
// Each block's int32 lanes are converted once and multiplied by the vector of its two scales (weight d times
// activation d); the _1 types then add m * d_x * sum(x) per block.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr int kStep = 2;  // blocks per vector
using VI = __m512i;
using VF = __m512;
constexpr int kTileRows = 4, kTileTokens = 4;  // 16 accumulators + 8 weight vectors: 32 registers
#else
constexpr int kStep = 1;
using VI = __m256i;
using VF = __m256;
constexpr int kTileRows = 2, kTileTokens = 4;  // 8 accumulators + 4 weight vectors: 16 registers
#endif

template <typename B>
constexpr bool kSignedDot = std::is_same_v<B, BlockQ8_0>&& kStep == 1;
template <typename B>
constexpr int kOffset = kSignedDot<B>                   ? 0
                        : std::is_same_v<B, BlockQ8_0>  ? 128
                        : std::is_same_v<B, BlockQ4_0>  ? 8
                        : std::is_same_v<B, BlockQ5_0>  ? 16
                        : std::is_same_v<B, BlockMXFP4> ? 16
                                                        : 0;

template <typename B>
constexpr int kLog2Offset = kOffset<B> == 128  ? 7
                            : kOffset<B> == 16 ? 4
                            : kOffset<B> == 8  ? 3
                                               : 0;
static_assert(kLog2Offset<BlockQ4_0> == 3 && kLog2Offset<BlockQ5_0> == 4);

// One block's 32 weights as bytes: unsigned q + off, or (kSignedDot) q itself.
inline __m256i block_bytes(const BlockQ8_0& b, bool signed_dot) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  return signed_dot ? v : _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
}
inline __m256i block_bytes(const BlockQ4_0& b, bool) { return nibbles(b.qs); }
inline __m256i block_bytes(const BlockQ4_1& b, bool) { return nibbles(b.qs); }
inline __m256i block_bytes(const BlockQ5_0& b, bool) { return _mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh)); }
inline __m256i block_bytes(const BlockQ5_1& b, bool) { return _mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh)); }
// mxfp4: each nibble looked up as its code + 16 (4 .. 28), an unsigned byte like the others.
inline __m256i block_bytes(const BlockMXFP4& b, bool) {
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(mxfp4_code_bytes()), nibbles(b.qs));
}

// Blocks b .. b + kStep - 1 of one weight row (`two`: whether block b + 1 exists; without it its lanes are zero).
template <typename B>
inline VI weight_vec(const B* w, int64_t b, bool two) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  const __m256i lo = block_bytes(w[b], false);
  const __m256i hi = two ? block_bytes(w[b + 1], false) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1);
#else
  (void)two;
  return block_bytes(w[b], kSignedDot<B>);
#endif
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// Lanes 0-7 take element 0 of v, lanes 8-15 element 1.
inline VF spread2(__m128 v) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               _mm512_zextps128_ps512(v));
}
#endif

// The weight scales of the blocks in a vector, each over its block's lanes.
inline VF weight_scales(const BlockMXFP4* w, int64_t b, bool two) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return spread2(_mm_setr_ps(e8m0_half(w[b].e), two ? e8m0_half(w[b + 1].e) : 0.0f, 0.0f, 0.0f));
#else
  (void)two;
  return _mm256_set1_ps(e8m0_half(w[b].e));
#endif
}
template <typename B>
inline VF weight_scales(const B* w, int64_t b, bool two) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  const int h = static_cast<int>(w[b].d) | (two ? static_cast<int>(w[b + 1].d) << 16 : 0);
  return spread2(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
#else
  (void)two;
  return _mm256_set1_ps(scale(w[b].d));
#endif
}
inline VF act_scales(const float* xd, int64_t b, bool two) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return spread2(two ? _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(xd + b))) : _mm_load_ss(xd + b));
#else
  (void)two;
  return _mm256_set1_ps(xd[b]);
#endif
}
inline VI act_bytes(const int8_t* xq, int64_t b, bool two) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  const int8_t* p = xq + b * kQuantBlock;
  return two ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(0xffffffffull, p);
#else
  (void)two;
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQuantBlock));
#endif
}
// The accumulator's start: -off * sum(x) in the first lane of each block.
template <int kOff>
inline VI act_start(const int32_t* sq, int64_t b, bool two) {
  if constexpr (kOff == 0) {
    (void)sq, (void)b, (void)two;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    return _mm512_setzero_si512();
#else
    return _mm256_setzero_si256();
#endif
  } else {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    const __m128i c = _mm_setr_epi32(-kOff * sq[b], two ? -kOff * sq[b + 1] : 0, 0, 0);
    return _mm512_maskz_permutexvar_epi32(0x0101, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                          _mm512_zextsi128_si512(c));
#else
    (void)two;
    return _mm256_zextsi128_si256(_mm_cvtsi32_si128(-kOff * sq[b]));
#endif
  }
}
template <bool kSigned>
inline VI dot_acc(VI start, VI w, VI x) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return _mm512_dpbusd_epi32(start, w, x);
#else
  const __m256i p16 =
      kSigned ? _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)) : _mm256_maddubs_epi16(w, x);
  return _mm256_add_epi32(start, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}
inline VF fzero() {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return _mm512_setzero_ps();
#else
  return _mm256_setzero_ps();
#endif
}
inline VF vfmadd(VI i, VF s, VF acc) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), s, acc);
#else
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), s, acc);
#endif
}
inline VF vmul(VF a, VF b) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return _mm512_mul_ps(a, b);
#else
  return _mm256_mul_ps(a, b);
#endif
}
inline float vsum(VF v) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
#else
  return hsum(v);
#endif
}

// out[r * ld + t] = dot(weight row r, activation row t) for R weight rows (`nb` blocks apart) and T activation
// rows (`k` bytes apart in xq, `nb` scales apart). Each output is accumulated by exactly the same instructions
// whatever R and T are, so its value does not depend on the tile it was computed in (decode, prefill and
// graph replay's padded batches agree bit for bit).
// `rs` / `os`: blocks between weight rows and floats between output rows when the R rows are not adjacent (0:
// nb and 1, adjacent).
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// acc[r][t] += the products of R weight rows' vectors of blocks b, b + 1 (wv, ws) with the same blocks of T activation
// rows (np: block pairs per row): the step micro and micro_prepared share, so both give an output the same bits.
template <typename B, int R, int T, bool kTwo>
inline __attribute__((always_inline)) void pair_products(const VI* wv, const VF* ws, const int8_t* xq, int64_t k,
                                                         int64_t b, int64_t np, const float* dv, const int32_t* nv,
                                                         VF (&acc)[R][T]) {
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const VI xv = act_bytes(xq + t * k, b, kTwo);
    const int64_t pv = (t * np + b / 2) * 16;
    const VF xsc = _mm512_load_ps(dv + pv);
    VI start = _mm512_setzero_si512();
    if constexpr (kOffset<B> != 0) start = _mm512_slli_epi32(_mm512_load_si512(nv + pv), kLog2Offset<B>);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      acc[r][t] = vfmadd(dot_acc<kSignedDot<B>>(start, wv[r], xv), vmul(ws[r], xsc), acc[r][t]);
  }
}

template <typename B, int R, int T>
void micro(const B* w, int64_t nb, int64_t k, const int8_t* xq, const float* xd, const int32_t* sq, const float* xs,
           const float* dv, const int32_t* nv, float* out, int64_t ld, int64_t rs = 0, int64_t os = 1) {
  if (rs == 0) rs = nb;
  // Adjacent rows (a tile) are R short streams, which the hardware prefetcher loses at every row's end (q8_0
  // at batch 8 stalled on these loads): the next tile's rows are prefetched at the same block. Rows rs apart
  // (decode's two long streams) need no help.
  const bool prefetch = R > 1 && rs == nb;
  VF acc[R][T];
  for (auto& row : acc)
    for (auto& a : row) a = fzero();
  // The last pair of an odd row (one block) outside the loop: see micro_prepared.
  const auto pair = [&](int64_t b, auto two_blocks) {
    constexpr bool two = decltype(two_blocks)::value;
    if (prefetch) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + (R + r) * nb + b), _MM_HINT_T0);
    }
    VI wv[R];
    VF ws[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      wv[r] = weight_vec(w + r * rs, b, two);
      ws[r] = weight_scales(w + r * rs, b, two);
    }
    pair_products<B, R, T, two>(wv, ws, xq, k, b, (nb + 1) / 2, dv, nv, acc);
  };
  for (int64_t b = 0; b + 1 < nb; b += kStep) pair(b, std::true_type{});
  if (nb % 2 != 0) pair(nb - 1, std::false_type{});
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[t * ld + r * os] = vsum(acc[r][t]) + min_term(w + r * rs, nb, xs + t * nb);
}

// Prefill runs micro<B, kTileRows, kTileTokens> 16 times on the same weight rows per 64-row activation block, and
// turning a block pair into its vectors (bytes to their unsigned form, two f16 scales spread over their lanes)
// was about as many instructions as the four products that use them (q8_0 [8192 x 2048] x 512 rows: 80 G
// multiply-adds/s a core, q4_0's panels 265). prepare_tile writes a tile's vectors once per activation block,
// R per block pair in the order micro_prepared loads them; micro_prepared is micro's loop on them, the same
// instructions on the same values, so every output keeps its bits (decode, prefill and replay still agree).
template <typename B, int R>
void prepare_tile(const B* w, int64_t nb, VI* wv, VF* ws) {
  for (int64_t b = 0, p = 0; b < nb; b += kStep, ++p) {
    const bool two = b + 1 < nb;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      wv[p * R + r] = weight_vec(w + r * nb, b, two);
      ws[p * R + r] = weight_scales(w + r * nb, b, two);
    }
  }
}

template <typename B, int R, int T>
void micro_prepared(const VI* wvp, const VF* wsp, const B* w, int64_t nb, int64_t k, const int8_t* xq, const float* xs,
                    const float* dv, const int32_t* nv, float* out, int64_t ld) {
  const int64_t np = (nb + 1) / 2;
  VF acc[R][T];
  for (auto& row : acc)
    for (auto& a : row) a = fzero();
  // A pair with its second block (every pair but an odd row's last) is a branch-free body: with the test inside,
  // GCC stored all 16 accumulators to the stack on every pair.
  const auto pair = [&](int64_t p, auto two_blocks) {
    VI wv[R];
    VF ws[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      wv[r] = _mm512_load_si512(wvp + p * R + r);
      ws[r] = _mm512_load_ps(wsp + p * R + r);
    }
    pair_products<B, R, T, decltype(two_blocks)::value>(wv, ws, xq, k, 2 * p, np, dv, nv, acc);
  };
  for (int64_t p = 0; p < nb / 2; ++p) pair(p, std::true_type{});
  if (nb % 2 != 0) pair(nb / 2, std::false_type{});
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[t * ld + r] = vsum(acc[r][t]) + min_term(w + r * nb, nb, xs + t * nb);
}

template <typename B, int R>
void micro_prepared_tokens(int t, const VI* wv, const VF* ws, const B* w, int64_t nb, int64_t k, const int8_t* xq,
                           const float* xs, const float* dv, const int32_t* nv, float* out, int64_t ld) {
  switch (t) {
    case 1:
      return micro_prepared<B, R, 1>(wv, ws, w, nb, k, xq, xs, dv, nv, out, ld);
    case 2:
      return micro_prepared<B, R, 2>(wv, ws, w, nb, k, xq, xs, dv, nv, out, ld);
    case 3:
      return micro_prepared<B, R, 3>(wv, ws, w, nb, k, xq, xs, dv, nv, out, ld);
    default:
      return micro_prepared<B, R, kTileTokens>(wv, ws, w, nb, k, xq, xs, dv, nv, out, ld);
  }
}

#else
// The avx2 build: two weight rows share each vector, the first in the low 128 bits and the second in the high,
// each half holding 16 of the block's 32 bytes; a block is two such products (its bytes 0-15, then 16-31)
// against the activation half repeated in both halves. So one conversion and one FMA (with the scale vector
// {d0 * dx x 4, d1 * dx x 4}) serve two outputs, where a vector per output took one each: per block and pair
// of rows, 10 vector operations for q8_0 instead of 16. A lone row (R = 1) is paired with itself; its half
// holds the same lanes whatever the other half holds, so every output has the same bits in every tile (decode,
// prefill and graph replay's padded batches agree).
inline float hsum128(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}
template <typename B, int R, int T>
void micro(const B* w, int64_t nb, int64_t k, const int8_t* xq, const float* xd, const int32_t* sq, const float* xs,
           const float* dv, const int32_t* nv, float* out, int64_t ld, int64_t rs = 0, int64_t os = 1) {
  static_assert(R == 1 || R == 2);
  (void)dv, (void)nv;
  if (rs == 0) rs = nb;
  const B* w1 = R == 2 ? w + rs : w;
  // Adjacent rows (a tile) are short streams, which the hardware prefetcher loses at every row's end: the next
  // tile's rows are prefetched at the same block. Rows rs apart (decode's two long streams) need no help.
  const bool prefetch = R > 1 && rs == nb;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  __m256 acc[T];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(w + 2 * nb + b), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w + 3 * nb + b), _MM_HINT_T0);
    }
    __m256i lo, hi;
    if constexpr (kSignedDot<B>) {
      // q8_0's bytes are the weights: each half loaded into place.
      const auto* q0 = reinterpret_cast<const __m128i*>(w[b].qs);
      const auto* q1 = reinterpret_cast<const __m128i*>(w1[b].qs);
      lo = _mm256_loadu2_m128i(q1, q0);
      hi = _mm256_loadu2_m128i(q1 + 1, q0 + 1);
    } else {
      const __m256i w0v = block_bytes(w[b], false), w1v = block_bytes(w1[b], false);
      lo = _mm256_permute2x128_si256(w0v, w1v, 0x20);
      hi = _mm256_permute2x128_si256(w0v, w1v, 0x31);
    }
    __m256 ws;
    if constexpr (std::is_same_v<B, BlockMXFP4>) {
      ws = _mm256_set_m128(_mm_set1_ps(wscale(w1[b])), _mm_set1_ps(wscale(w[b])));
    } else {
      // Both f16 scales converted by one instruction, then spread over their halves.
      const int h = static_cast<int>(w[b].d) | static_cast<int>(w1[b].d) << 16;
      ws = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128(h))), spread);
    }
    __m256i alo = lo, ahi = hi;
    if constexpr (kSignedDot<B>) {
      alo = _mm256_sign_epi8(lo, lo);
      ahi = _mm256_sign_epi8(hi, hi);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int8_t* xb = xq + t * k + b * kQuantBlock;
      const __m256i xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb)));
      const __m256i xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 16)));
      __m256i isum;
      if constexpr (kSignedDot<B>) {
        // |w| x sign(x, w); each pair of products is at most 2 * 127 * 127, so the two halves are widened apart.
        isum = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(alo, _mm256_sign_epi8(xlo, lo)), ones),
                                _mm256_madd_epi16(_mm256_maddubs_epi16(ahi, _mm256_sign_epi8(xhi, hi)), ones));
      } else {
        // Unsigned bytes of at most 31 against |x| <= 127: both halves' pair sums fit one int16.
        isum =
            _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(alo, xlo), _mm256_maddubs_epi16(ahi, xhi)), ones);
        if constexpr (kOffset<B> != 0)
          isum = _mm256_add_epi32(
              isum, _mm256_set_epi32(0, 0, 0, -kOffset<B> * sq[t * nb + b], 0, 0, 0, -kOffset<B> * sq[t * nb + b]));
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(ws, _mm256_set1_ps(xd[t * nb + b])), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    out[t * ld] = hsum128(_mm256_castps256_ps128(acc[t])) + min_term(w, nb, xs + t * nb);
    if (R == 2) out[t * ld + os] = hsum128(_mm256_extractf128_ps(acc[t], 1)) + min_term(w1, nb, xs + t * nb);
  }
}
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// QuantRows::dv / nv from d / sq, once per call: every weight row of the product then loads them instead of
// assembling them per block. (Only the avx512 kernel uses them; the AVX2 one broadcasts one block's values.)
void spread_pairs(QuantRows& x, int64_t n, int64_t nb) {
  const int64_t np = (nb + 1) / 2;
  x.dv.resize(static_cast<size_t>(n * np * 16));
  x.nv.resize(static_cast<size_t>(n * np * 16));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t p = 0; p < np; ++p) {
      const int64_t b = t * nb + 2 * p;
      const bool two = 2 * p + 1 < nb;
      const int64_t o = (t * np + p) * 16;
      _mm512_store_ps(x.dv.data() + o, act_scales(x.d.data(), b, two));
      const __m128i c =
          _mm_setr_epi32(-x.sq[static_cast<size_t>(b)], two ? -x.sq[static_cast<size_t>(b + 1)] : 0, 0, 0);
      _mm512_store_si512(x.nv.data() + o, _mm512_maskz_permutexvar_epi32(
                                              0x0101, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                              _mm512_zextsi128_si512(c)));
    }
  }
}
#endif

template <typename B, int R>
void micro_tokens(int t, const B* w, int64_t nb, int64_t k, const int8_t* xq, const float* xd, const int32_t* sq,
                  const float* xs, const float* dv, const int32_t* nv, float* out, int64_t ld, int64_t rs = 0,
                  int64_t os = 1) {
  switch (t) {
    case 1:
      return micro<B, R, 1>(w, nb, k, xq, xd, sq, xs, dv, nv, out, ld, rs, os);
    case 2:
      return micro<B, R, 2>(w, nb, k, xq, xd, sq, xs, dv, nv, out, ld, rs, os);
    case 3:
      return micro<B, R, 3>(w, nb, k, xq, xd, sq, xs, dv, nv, out, ld, rs, os);
    default:
      return micro<B, R, kTileTokens>(w, nb, k, xq, xd, sq, xs, dv, nv, out, ld, rs, os);
  }
}
#endif  // __AVX2__

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
#if defined(__AMX_INT8__)
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
