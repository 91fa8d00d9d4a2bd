// Matrix products with GGUF K-quant weights (q2_k, q3_k, q4_k, q5_k, q6_k), integer dot products as the
// fastest CPU engines do them.
//
// Activations are quantised once per call, per row, into 256-element blocks matching the weights'
// super-blocks: an f32 scale, 256 int8 values and the sum of every 16 of them. Every K-quant element is
// w = d * sc_g * q - dmin * mn_g with an unsigned q (< 64) and integer group scales sc_g / mins mn_g per 16
// elements (the symmetric types fold their offset into mn: q6_k's q - 32 is q with mn = 32 sc, dmin = d), so
// one super-block's dot product with an activation block of scale xd is
//     xd * (d * sum_g sc_g * (q_g . x_g) - dmin * sum_g mn_g * xsum_g),
// all integer inside the brackets: maddubs (u8 x s8, pairs to int16; 2 * 63 * 127 fits) and then madd with
// the group scales (pairs to int32) on AVX2, or VNNI's vpdpwssd (multiply int16 pairs and accumulate in one
// instruction) in the avx512 build; the min term is one madd over the 16 sums.
//
// In batches of 4 rows or more a weight super-block is unpacked once (to 256 bytes of q plus its scales, in
// L1) and then multiplied against every activation row of the batch, so batched decode and prefill read and
// decode each weight byte once per block of 64 rows. Below that (decode), q4_k and q6_k blocks go straight
// from memory into the dot products, with the same integer sums and so the same outputs. Each output is accumulated
// super-block by super-block in the same order whatever the batch, so a row's result does not depend on what shares its
// batch.
#include <algorithm>
#include <cmath>
#include <cstddef>
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
constexpr int64_t kSmallBatch = 4;  // fewer activation rows than this: the direct (decode) kernels

struct QuantRowsK {
  std::vector<int8_t> q;   // n * k
  std::vector<float> d;    // n * k / 256
  std::vector<int16_t> s;  // n * k / 16: sums of 16 consecutive q
};

// One 256-element activation block with llama.cpp's arithmetic (quantize_row_q8_K_ref): the inverse scale
// 127 / amax in one rounding, q = round-to-even(x * that), the scale its reciprocal. (llama.cpp divides by the
// signed extreme, so its q and scale both carry the opposite sign when that extreme is positive; the products
// are the same.) amax / 127 and its reciprocal differ from these in the last bit often enough to flip a few
// roundings per row, which full-width parity notices (docs/models.md).
void quantize_block(const float* x, int8_t* q, float* d_out, int16_t* sums) {
  float amax = 0.0f;
#if defined(__AVX2__)
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < kSuperBlock; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  amax = _mm_cvtss_f32(h);
  const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m256 id = _mm256_set1_ps(iscale);
  *d_out = iscale != 0.0f ? 1.0f / iscale : 0.0f;
  for (int i = 0; i < kSuperBlock; i += 32) {
    // cvtps rounds to nearest even, as nearbyint does in the scalar build.
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), id));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), id));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), id));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), id));
    // 16-element sums before packing: (i0 + i1) and (i2 + i3), eight lanes each.
    const __m256i s01 = _mm256_add_epi32(i0, i1), s23 = _mm256_add_epi32(i2, i3);
    sums[i / 16] = static_cast<int16_t>(hsum_epi32(s01));
    sums[i / 16 + 1] = static_cast<int16_t>(hsum_epi32(s23));
    const __m256i p16a = _mm256_packs_epi32(i0, i1), p16b = _mm256_packs_epi32(i2, i3);
    const __m256i p8 =
        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), p8);
  }
#else
  for (int i = 0; i < kSuperBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  *d_out = id != 0.0f ? 1.0f / id : 0.0f;
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int i = 16 * g; i < 16 * g + 16; ++i) {
      q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
      s += q[i];
    }
    sums[g] = static_cast<int16_t>(s);
  }
#endif
}

void quantize_rows(const float* x, int64_t n, int64_t k, QuantRowsK& out, const Ctx& ctx) {
  const int64_t blocks = n * k / kSuperBlock;
  out.q.resize(static_cast<size_t>(n * k));
  out.d.resize(static_cast<size_t>(blocks));
  out.s.resize(static_cast<size_t>(blocks * 16));
  parallel_for(
      ctx, blocks,
      [&](int64_t b) {
        quantize_block(x + b * kSuperBlock, out.q.data() + b * kSuperBlock, &out.d[static_cast<size_t>(b)],
                       out.s.data() + b * 16);
      },
      1.0, 33.0);
}

// One weight super-block, unpacked: q[e] unsigned, w[e] = d * sc[e / 16] * q[e] - dmin * mn[e / 16]. In the
// SIMD builds scv[c] holds the scales of elements 32c..32c+31 as 16 int16 lanes (the first 8 lanes cover
// the first 16 elements after maddubs), ready for madd / vpdpwssd.
struct Unpacked {
  alignas(64) uint8_t q[kSuperBlock];
  alignas(32) int16_t sc[16];
  alignas(32) int16_t mn[16];
  alignas(32) int16_t scv[8][16];
  float d, dmin;
};

#if defined(__AVX2__)
// scv from sc[16] (a scale per 16 elements).
void spread_scales(Unpacked& u) {
  const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(u.sc));
  // Each int32 lane holds one scale twice; a permute then puts scale 2c in lanes 0-3, 2c + 1 in lanes 4-7.
  const __m256i lo = _mm256_unpacklo_epi16(v, v), hi = _mm256_unpackhi_epi16(v, v);
  // unpack works within 128-bit halves: lo = sc 0-3 | 8-11, hi = sc 4-7 | 12-15 (each doubled).
  const __m256i d0 = _mm256_permute2x128_si256(lo, hi, 0x20), d1 = _mm256_permute2x128_si256(lo, hi, 0x31);
  for (int c = 0; c < 8; ++c) {
    const int a = (2 * c) % 8, b = (2 * c + 1) % 8;
    const __m256i idx = _mm256_setr_epi32(a, a, a, a, b, b, b, b);
    _mm256_store_si256(reinterpret_cast<__m256i*>(u.scv[c]), _mm256_permutevar8x32_epi32(c < 4 ? d0 : d1, idx));
  }
}
#else
void spread_scales(Unpacked&) {}
#endif

// q4_k / q5_k: eight six-bit scale/min pairs (base/quant.h's unpack_k4_scale), four at a time with 32-bit
// masks: bytes 0-3 and 4-7 hold scales / mins 0-3 in their low six bits and the top two bits of 4-7.
void set_k4_scales(const uint8_t* s, Unpacked& u) {
  uint32_t a[3];
  std::memcpy(a, s, 12);
  const uint32_t sc_lo = a[0] & 0x3f3f3f3fu, m_lo = a[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
#if defined(__AVX2__)
  const __m128i sc8 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo)));
  const __m128i m8 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(u.mn),
                     _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8)));
  alignas(16) int16_t scs[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(scs), sc8);
  for (int c = 0; c < 8; ++c) _mm256_store_si256(reinterpret_cast<__m256i*>(u.scv[c]), _mm256_set1_epi16(scs[c]));
#else
  const uint32_t sc_w[2] = {sc_lo, sc_hi}, m_w[2] = {m_lo, m_hi};
  for (int j = 0; j < 8; ++j) {
    const auto sc = static_cast<int16_t>((sc_w[j / 4] >> (8 * (j % 4))) & 0xff);
    const auto m = static_cast<int16_t>((m_w[j / 4] >> (8 * (j % 4))) & 0xff);
    u.sc[2 * j] = u.sc[2 * j + 1] = sc;
    u.mn[2 * j] = u.mn[2 * j + 1] = m;
  }
#endif
}

#if defined(__AVX2__)
inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store32(uint8_t* p, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
// Bit t of every byte, moved to bit `to`.
inline __m256i bit_of(__m256i v, int t, int to) {
  const __m256i b = _mm256_and_si256(_mm256_srli_epi16(v, t), _mm256_set1_epi8(1));
  return _mm256_slli_epi16(b, to);
}
#endif

void unpack(const BlockQ4_K& b, Unpacked& u) {
  u.d = f16_to_f32(b.d);
  u.dmin = f16_to_f32(b.dmin);
  set_k4_scales(b.scales, u);
#if defined(__AVX2__)
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = load32(b.qs + 32 * c);
    store32(u.q + 64 * c, _mm256_and_si256(v, lo4));
    store32(u.q + 64 * c + 32, _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4));
  }
#else
  for (int e = 0; e < kSuperBlock; ++e) {
    const uint8_t v = b.qs[32 * (e / 64) + e % 32];
    u.q[e] = e % 64 < 32 ? (v & 15) : (v >> 4);
  }
#endif
}

void unpack(const BlockQ5_K& b, Unpacked& u) {
  u.d = f16_to_f32(b.d);
  u.dmin = f16_to_f32(b.dmin);
  set_k4_scales(b.scales, u);
#if defined(__AVX2__)
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  const __m256i h = load32(b.qh);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = load32(b.qs + 32 * c);
    store32(u.q + 64 * c, _mm256_or_si256(_mm256_and_si256(v, lo4), bit_of(h, 2 * c, 4)));
    store32(u.q + 64 * c + 32,
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), lo4), bit_of(h, 2 * c + 1, 4)));
  }
#else
  for (int e = 0; e < kSuperBlock; ++e) {
    const uint8_t v = b.qs[32 * (e / 64) + e % 32];
    u.q[e] = static_cast<uint8_t>((e % 64 < 32 ? (v & 15) : (v >> 4)) | (((b.qh[e % 32] >> (e / 32)) & 1) << 4));
  }
#endif
}

void unpack(const BlockQ6_K& b, Unpacked& u) {
  u.d = u.dmin = f16_to_f32(b.d);
#if defined(__AVX2__)
  const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(u.sc), sc);
  _mm256_store_si256(reinterpret_cast<__m256i*>(u.mn), _mm256_slli_epi16(sc, 5));  // 32 sc
  spread_scales(u);
#else
  for (int g = 0; g < 16; ++g) {
    u.sc[g] = b.scales[g];
    u.mn[g] = static_cast<int16_t>(32 * b.scales[g]);
  }
#endif
#if defined(__AVX2__)
  const __m256i lo4 = _mm256_set1_epi8(0x0f), lo2 = _mm256_set1_epi8(0x03);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = load32(b.ql + 64 * h), l1 = load32(b.ql + 64 * h + 32), hb = load32(b.qh + 32 * h);
    auto high = [&](int g) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * g), lo2), 4); };
    uint8_t* q = u.q + 128 * h;
    store32(q, _mm256_or_si256(_mm256_and_si256(l0, lo4), high(0)));
    store32(q + 32, _mm256_or_si256(_mm256_and_si256(l1, lo4), high(1)));
    store32(q + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4), high(2)));
    store32(q + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4), high(3)));
  }
#else
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, g = e % 128 / 32, l = e % 32;
    const uint8_t lo = b.ql[64 * h + 32 * (g & 1) + l];
    u.q[e] = static_cast<uint8_t>(((g >= 2 ? lo >> 4 : lo) & 15) | (((b.qh[32 * h + l] >> (2 * g)) & 3) << 4));
  }
#endif
}

// Two-bit fields shared by q2_k and q3_k: element e in byte 32 * (e / 128) + e % 32 at bit 2 * (e % 128 / 32).
void unpack_crumbs(const uint8_t* qs, uint8_t* q) {
#if defined(__AVX2__)
  const __m256i lo2 = _mm256_set1_epi8(0x03);
  for (int h = 0; h < 2; ++h) {
    const __m256i v = load32(qs + 32 * h);
    for (int j = 0; j < 4; ++j) store32(q + 128 * h + 32 * j, _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), lo2));
  }
#else
  for (int e = 0; e < kSuperBlock; ++e) q[e] = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
#endif
}

void unpack(const BlockQ2_K& b, Unpacked& u) {
  u.d = f16_to_f32(b.d);
  u.dmin = f16_to_f32(b.dmin);
  for (int g = 0; g < 16; ++g) {
    u.sc[g] = static_cast<int16_t>(b.scales[g] & 15);
    u.mn[g] = static_cast<int16_t>(b.scales[g] >> 4);
  }
  spread_scales(u);
  unpack_crumbs(b.qs, u.q);
}

void unpack(const BlockQ3_K& b, Unpacked& u) {
  u.d = u.dmin = f16_to_f32(b.d);
  int sc[16];
  unpack_q3_k_scales(b.scales, sc);
  for (int g = 0; g < 16; ++g) {
    u.sc[g] = static_cast<int16_t>(sc[g] - 32);
    u.mn[g] = static_cast<int16_t>(4 * (sc[g] - 32));  // q3_k's q - 4 as q with a min of 4 sc
  }
  spread_scales(u);
  unpack_crumbs(b.qs, u.q);
#if defined(__AVX2__)
  const __m256i h = load32(b.hmask);
  for (int t = 0; t < 8; ++t) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(u.q + 32 * t));
    store32(u.q + 32 * t, _mm256_or_si256(v, bit_of(h, t, 2)));
  }
#else
  for (int e = 0; e < kSuperBlock; ++e)
    u.q[e] = static_cast<uint8_t>(u.q[e] | (((b.hmask[e % 32] >> (e / 32)) & 1) << 2));
#endif
}

// dot(unpacked super-block, one activation block), the formula of the file comment, added to a row's
// accumulator. The AVX2 accumulator is 8 float lanes, summed once per output (no horizontal sum per block).
#if defined(__AVX2__)
using Acc = __m256;
// isum + (p . s) over int16 pairs: VNNI's vpdpwssd in one instruction, madd + add on AVX2.
inline __m256i scaled_add(__m256i isum, __m256i p, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(isum, p, s);
#else
  return _mm256_add_epi32(isum, _mm256_madd_epi16(p, s));
#endif
}
inline Acc acc_zero() { return _mm256_setzero_ps(); }
inline float acc_total(Acc a) { return hsum(a); }
// The integer sums of the formula: isum's 8 lanes hold sum_g sc_g * (q_g . x_g) split by element position
// (lane l: elements 4l..4l+3 of every 32), msum's the min terms. Integer sums are exact, so the direct
// decoders below (decode: no unpacked copy) give bit for bit what this gives from an unpacked block.
inline void sums_unpacked(const Unpacked& u, const int8_t* xq, const int16_t* xs, __m256i& isum, __m256i& msum) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  // Two 32-element chunks per 512-bit step (scv[c] and scv[c + 1] are adjacent); adding the halves at the end
  // gives the 256-bit path's lanes exactly (integer sums).
  __m512i wide = _mm512_setzero_si512();
  for (int c = 0; c < 8; c += 2) {
    const __m512i p = _mm512_maddubs_epi16(_mm512_load_si512(u.q + 32 * c), _mm512_loadu_si512(xq + 32 * c));
    wide = _mm512_dpwssd_epi32(wide, p, _mm512_loadu_si512(u.scv[c]));
  }
  isum = _mm256_add_epi32(_mm512_castsi512_si256(wide), _mm512_extracti64x4_epi64(wide, 1));
#else
  isum = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(u.q + 32 * c)),
                                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * c)));
    isum = scaled_add(isum, p, _mm256_load_si256(reinterpret_cast<const __m256i*>(u.scv[c])));
  }
#endif
  msum = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(u.mn)),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
}
inline void accumulate(__m256i isum, __m256i msum, float xd, float d, float dmin, Acc& acc) {
  acc = _mm256_fmadd_ps(_mm256_set1_ps(xd * d), _mm256_cvtepi32_ps(isum), acc);
  acc = _mm256_fnmadd_ps(_mm256_set1_ps(xd * dmin), _mm256_cvtepi32_ps(msum), acc);
}
inline void block_dot(const Unpacked& u, const int8_t* xq, float xd, const int16_t* xs, Acc& acc) {
  __m256i isum, msum;
  sums_unpacked(u, xq, xs, isum, msum);
  accumulate(isum, msum, xd, u.d, u.dmin, acc);
}

// Direct decoders for decode-sized batches: the weight bytes go from the block to maddubs in registers.
inline __m256i chunk_dot(__m256i q, const int8_t* x, __m256i scales, __m256i isum) {
  return scaled_add(isum, _mm256_maddubs_epi16(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))), scales);
}
inline void sums_direct(const BlockQ4_K& b, const int8_t* xq, const int16_t* xs, __m256i& isum, __m256i& msum) {
  uint32_t a[3];
  std::memcpy(a, b.scales, 12);
  const uint32_t sc_lo = a[0] & 0x3f3f3f3fu, m_lo = a[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
  const __m128i sc8 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo)));
  const __m128i m8 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo)));
  // 32-bit word j of scd holds scale j twice; a permute spreads one word over a vector.
  const __m256i scd = _mm256_set_m128i(_mm_unpackhi_epi16(sc8, sc8), _mm_unpacklo_epi16(sc8, sc8));
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  isum = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i s0 = _mm256_permutevar8x32_epi32(scd, _mm256_set1_epi32(2 * c));
    const __m256i s1 = _mm256_permutevar8x32_epi32(scd, _mm256_set1_epi32(2 * c + 1));
    const __m256i v = load32(b.qs + 32 * c);
    isum = chunk_dot(_mm256_and_si256(v, lo4), xq + 64 * c, s0, isum);
    isum = chunk_dot(_mm256_and_si256(_mm256_srli_epi16(v, 4), lo4), xq + 64 * c + 32, s1, isum);
  }
  const __m256i mn = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
  msum = _mm256_madd_epi16(mn, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
}
inline void sums_direct(const BlockQ6_K& b, const int8_t* xq, const int16_t* xs, __m256i& isum, __m256i& msum) {
  const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  // As spread_scales: scale 2c in lanes 0-7 of chunk c's vector, 2c + 1 in lanes 8-15.
  const __m256i lo = _mm256_unpacklo_epi16(sc, sc), hi = _mm256_unpackhi_epi16(sc, sc);
  const __m256i d0 = _mm256_permute2x128_si256(lo, hi, 0x20), d1 = _mm256_permute2x128_si256(lo, hi, 0x31);
  const __m256i lo4 = _mm256_set1_epi8(0x0f), lo2 = _mm256_set1_epi8(0x03);
  isum = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = load32(b.ql + 64 * h), l1 = load32(b.ql + 64 * h + 32), hb = load32(b.qh + 32 * h);
    auto high = [&](int g) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * g), lo2), 4); };
    const __m256i q[4] = {_mm256_or_si256(_mm256_and_si256(l0, lo4), high(0)),
                          _mm256_or_si256(_mm256_and_si256(l1, lo4), high(1)),
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4), high(2)),
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4), high(3))};
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int c = 4 * h + j, a = (2 * c) % 8, bb = (2 * c + 1) % 8;
      const __m256i s = _mm256_permutevar8x32_epi32(c < 4 ? d0 : d1, _mm256_setr_epi32(a, a, a, a, bb, bb, bb, bb));
      isum = chunk_dot(q[j], xq + 128 * h + 32 * j, s, isum);
    }
  }
  msum = _mm256_madd_epi16(_mm256_slli_epi16(sc, 5), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
}
template <typename B>
constexpr bool kDirect = std::is_same_v<B, BlockQ4_K> || std::is_same_v<B, BlockQ6_K>;
inline float scale_of(uint16_t h) { return _cvtsh_ss(h); }
inline float dmin_of(const BlockQ4_K& b) { return scale_of(b.dmin); }
inline float dmin_of(const BlockQ6_K& b) { return scale_of(b.d); }
#else
using Acc = float;
inline Acc acc_zero() { return 0.0f; }
inline float acc_total(Acc a) { return a; }
inline void block_dot(const Unpacked& u, const int8_t* xq, float xd, const int16_t* xs, Acc& acc) {
  int32_t isum = 0, msum = 0;
  for (int g = 0; g < 16; ++g) {
    int32_t dot = 0;
    for (int i = 16 * g; i < 16 * g + 16; ++i) dot += static_cast<int32_t>(u.q[i]) * xq[i];
    isum += u.sc[g] * dot;
    msum += u.mn[g] * xs[g];
  }
  acc += xd * (u.d * static_cast<float>(isum) - u.dmin * static_cast<float>(msum));
}
#endif

#if defined(__AVX2__)
// Decoders for matmul_packed.h (scales, and one vector of unsigned weight bytes at a time). q4_k: groups of 32 with f32
// scale d * sc and minimum dmin * m; q6_k: groups of 16 with scale d * sc and the integer offset 32.
template <typename B>
struct PackK4 {
  using Block = B;
  static constexpr int kBlockElems = kSuperBlock, kGroup = 32, kOffset = 0, kStepBlocks = 1;
  static constexpr bool kMin = true;
  static void scales(const Block* w, int64_t b, int, float* s, float* mn) {
    // As set_k4_scales: the eight scales and mins as bytes, four to a word, then widened and scaled at once.
    uint32_t a[3];
    std::memcpy(a, w[b].scales, 12);
    const uint32_t sc_lo = a[0] & 0x3f3f3f3fu, m_lo = a[1] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
    const __m256 scf =
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo))));
    const __m256 mf =
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo))));
    alignas(32) float sv[8], mv[8];
    _mm256_store_ps(sv, _mm256_mul_ps(_mm256_set1_ps(scale_of(w[b].d)), scf));
    _mm256_store_ps(mv, _mm256_mul_ps(_mm256_set1_ps(scale_of(w[b].dmin)), mf));
    for (int j = 0; j < 8; ++j) {
      s[j * packed::kP] = sv[j];
      mn[j * packed::kP] = mv[j];
    }
  }
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  // One super-block of 16 rows, as scales() computes it per row (the same f32 products).
  static void scales16(const Block* b, __m512i offs, __mmask16 live, float* s, float* mn) {
    const __m512i h = packed::gather_word(b, 0, offs, live);
    const __m512i a0 = packed::gather_word(b, 4, offs, live), a1 = packed::gather_word(b, 8, offs, live);
    const __m512i a2 = packed::gather_word(b, 12, offs, live);
    const __m512 d = packed::half_lo(h), dmin = packed::half_lo(_mm512_srli_epi32(h, 16));
    const __m512i c3f = _mm512_set1_epi32(0x3f3f3f3f), c0f = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i c03 = _mm512_set1_epi32(0x03030303);
    const __m512i sc_lo = _mm512_and_si512(a0, c3f), m_lo = _mm512_and_si512(a1, c3f);
    const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(a2, c0f),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a0, 6), c03), 4));
    const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, 4), c0f),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a1, 6), c03), 4));
    const __m512i ff = _mm512_set1_epi32(0xff);
    auto byte = [&](__m512i v, int j) { return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * j), ff)); };
    for (int j = 0; j < 4; ++j) {
      _mm512_store_ps(s + j * packed::kP, _mm512_mul_ps(d, byte(sc_lo, j)));
      _mm512_store_ps(s + (4 + j) * packed::kP, _mm512_mul_ps(d, byte(sc_hi, j)));
      _mm512_store_ps(mn + j * packed::kP, _mm512_mul_ps(dmin, byte(m_lo, j)));
      _mm512_store_ps(mn + (4 + j) * packed::kP, _mm512_mul_ps(dmin, byte(m_hi, j)));
    }
  }
#endif
  // Unit u: elements u * kUnitElems onwards, in Unpacked's order (low nibbles of a 32-byte run, then high).
  static packed::VI unit(const Block* w, int64_t b, int, int u) {
    const __m256i lo4 = _mm256_set1_epi8(0x0f);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    const __m256i v = load32(w[b].qs + 32 * u);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(v, lo4)),
                              _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4), 1);
#else
    const __m256i v = load32(w[b].qs + 32 * (u / 2));
    return _mm256_and_si256(u % 2 == 0 ? v : _mm256_srli_epi16(v, 4), lo4);
#endif
  }
};
using PackQ4_K = PackK4<BlockQ4_K>;
// q5_k: q4_k's scales and nibbles plus a fifth bit per element from qh (bit 2c of qh[l] for element 64c + l, bit
// 2c + 1 for element 64c + 32 + l), as unpack() builds it.
struct PackQ5_K : PackK4<BlockQ5_K> {
  static packed::VI unit(const Block* w, int64_t b, int, int u) {
    const __m256i lo4 = _mm256_set1_epi8(0x0f);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    const __m256i v = load32(w[b].qs + 32 * u), h = load32(w[b].qh);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_or_si256(_mm256_and_si256(v, lo4), bit_of(h, 2 * u, 4))),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), lo4), bit_of(h, 2 * u + 1, 4)),
                              1);
#else
    const __m256i v = load32(w[b].qs + 32 * (u / 2)), h = load32(w[b].qh);
    return _mm256_or_si256(_mm256_and_si256(u % 2 == 0 ? v : _mm256_srli_epi16(v, 4), lo4), bit_of(h, u, 4));
#endif
  }
};
// q2_k and q3_k: groups of 16 from the two-bit fields as unpack_crumbs() lays them out (element 128h + 32j + l at bit
// pair j of qs[32h + l]; avx512 unit u: elements 64u.., bit pairs 2 (u % 2) and 2 (u % 2) + 1 of qs[32 (u / 2) ..];
// avx2 unit u: elements 32u.., bit pair u % 4 of qs[32 (u / 4) ..]), q3_k with the hmask bit (bit 4h + j of
// hmask[l]) as bit 2. q2_k: scale d (sc & 15), minimum dmin (sc >> 4); q3_k: scale d (sc - 32) and the offset 4 (its
// q - 4). The scales row by row (no 16-row gather form).
inline packed::VI crumb_unit(const uint8_t* qs, int u) {
  const __m256i m3 = _mm256_set1_epi8(3);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  const __m256i v = load32(qs + 32 * (u / 2));
  const int sh = 4 * (u % 2);
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(v, sh), m3)),
                            _mm256_and_si256(_mm256_srli_epi16(v, sh + 2), m3), 1);
#else
  return _mm256_and_si256(_mm256_srli_epi16(load32(qs + 32 * (u / 4)), 2 * (u % 4)), m3);
#endif
}
struct PackQ2_K {
  using Block = BlockQ2_K;
  static constexpr int kBlockElems = kSuperBlock, kGroup = 16, kOffset = 0, kStepBlocks = 1;
  static constexpr bool kMin = true;
  static void scales(const Block* w, int64_t b, int, float* s, float* mn) {
    const float d = scale_of(w[b].d), dmin = scale_of(w[b].dmin);
    for (int g = 0; g < 16; ++g) {
      s[g * packed::kP] = d * static_cast<float>(w[b].scales[g] & 15);
      mn[g * packed::kP] = dmin * static_cast<float>(w[b].scales[g] >> 4);
    }
  }
  static packed::VI unit(const Block* w, int64_t b, int, int u) { return crumb_unit(w[b].qs, u); }
};
struct PackQ3_K {
  using Block = BlockQ3_K;
  static constexpr int kBlockElems = kSuperBlock, kGroup = 16, kOffset = 4, kStepBlocks = 1;
  static constexpr bool kMin = false;
  static void scales(const Block* w, int64_t b, int, float* s, float*) {
    int sc[16];
    unpack_q3_k_scales(w[b].scales, sc);
    const float d = scale_of(w[b].d);
    for (int g = 0; g < 16; ++g) s[g * packed::kP] = d * static_cast<float>(sc[g] - 32);
  }
  static packed::VI unit(const Block* w, int64_t b, int, int u) {
    const __m256i h = load32(w[b].hmask);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(bit_of(h, 2 * u, 2)), bit_of(h, 2 * u + 1, 2), 1);
    return _mm512_or_si512(crumb_unit(w[b].qs, u), hb);
#else
    return _mm256_or_si256(crumb_unit(w[b].qs, u), bit_of(h, u, 2));
#endif
  }
};
struct PackQ6_K {
  using Block = BlockQ6_K;
  static constexpr int kBlockElems = kSuperBlock, kGroup = 16, kOffset = 32, kStepBlocks = 1;
  static constexpr bool kMin = false;
  static void scales(const Block* w, int64_t b, int, float* s, float*) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales));
    const __m256 d = _mm256_set1_ps(scale_of(w[b].d));
    alignas(32) float sv[16];
    _mm256_store_ps(sv, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))));
    _mm256_store_ps(sv + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8)))));
    for (int g = 0; g < 16; ++g) s[g * packed::kP] = sv[g];
  }
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  // One super-block of 16 rows: d is the high half of the word at byte 206, the int8 scales bytes 192-207.
  static void scales16(const Block* b, __m512i offs, __mmask16 live, float* s, float*) {
    static_assert(offsetof(BlockQ6_K, scales) == 192 && offsetof(BlockQ6_K, d) == 208);
    const __m512 d = packed::half_lo(_mm512_srli_epi32(packed::gather_word(b, 206, offs, live), 16));
    for (int q = 0; q < 4; ++q) {
      const __m512i v = packed::gather_word(b, 192 + 4 * q, offs, live);
      for (int j = 0; j < 4; ++j) {
        const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * j), 24);
        _mm512_store_ps(s + (4 * q + j) * packed::kP, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
      }
    }
  }
#endif
  // Unit u in Unpacked's order: in half h, low nibbles of ql[64h..] (runs of 32) with qh bit pairs 0 and 1,
  // then the high nibbles with bit pairs 2 and 3.
  static packed::VI unit(const Block* w, int64_t b, int, int u) {
    const BlockQ6_K& blk = w[b];
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    const int h = u / 2, part = u % 2;
    const __m512i l = _mm512_loadu_si512(blk.ql + 64 * h);
    const __m512i hb = _mm512_broadcast_i64x4(load32(blk.qh + 32 * h));
    const __m512i lo = part == 0 ? l : _mm512_srli_epi16(l, 4);
    // Bit pairs 2 * (2 part) and 2 * (2 part + 1) for the two 32-element halves of the unit.
    const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(4 * part)),
                                             _mm256_set1_epi16(static_cast<int16_t>(4 * part + 2)), 1);
    const __m512i high = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, shift), _mm512_set1_epi8(3)), 4);
    return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi8(0x0f)), high);
#else
    const int h = u / 4, j = u % 4;
    const __m256i l = load32(blk.ql + 64 * h + 32 * (j & 1)), hb = load32(blk.qh + 32 * h);
    const __m256i lo = j >= 2 ? _mm256_srli_epi16(l, 4) : l;
    const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), _mm256_set1_epi8(3)), 4);
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(0x0f)), high);
#endif
  }
};
#endif

template <typename B>
void matmul_k(const MatMulOp& op, const QuantRowsK& xq, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0), nb = k / kSuperBlock;
  const B* w = data<const B>(op.w);
  float* out = data<float>(op.out);
  const float* bias = op.bias.valid() ? data<const float>(op.bias) : nullptr;
#if defined(__AVX2__)
  if constexpr (kDirect<B>) {
    if (n < kSmallBatch) {
      // Decode: each weight super-block goes straight from memory to the dot products (no unpacked copy);
      // the same integer sums, hence the same outputs, as the unpacked path for larger batches.
      parallel_for(ctx, m, [&](int64_t i) {
        Acc acc[kSmallBatch];
        for (int64_t r = 0; r < n; ++r) acc[r] = acc_zero();
        for (int64_t b = 0; b < nb; ++b) {
          const B& blk = w[i * nb + b];
          const float d = scale_of(blk.d), dmin = dmin_of(blk);
          for (int64_t r = 0; r < n; ++r) {
            const int64_t x = r * nb + b;
            __m256i isum, msum;
            sums_direct(blk, xq.q.data() + x * kSuperBlock, xq.s.data() + x * 16, isum, msum);
            accumulate(isum, msum, xq.d[static_cast<size_t>(x)], d, dmin, acc[r]);
          }
        }
        for (int64_t r = 0; r < n; ++r) {
          const float v = acc_total(acc[r]);
          out[r * m + i] = bias ? v + bias[i] : v;
        }
      });
      return;
    }
  }
#endif
  for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
    const int64_t r1 = std::min(n, r0 + kRowBlock);
    parallel_for(ctx, m, [&](int64_t i) {
      Unpacked u;
      Acc acc[kRowBlock];
      for (int64_t r = r0; r < r1; ++r) acc[r - r0] = acc_zero();
      for (int64_t b = 0; b < nb; ++b) {
        unpack(w[i * nb + b], u);
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t blk = r * nb + b;
          block_dot(u, xq.q.data() + blk * kSuperBlock, xq.d[static_cast<size_t>(blk)], xq.s.data() + blk * 16,
                    acc[r - r0]);
        }
      }
      for (int64_t r = r0; r < r1; ++r) {
        const float v = acc_total(acc[r - r0]);
        out[r * m + i] = bias ? v + bias[i] : v;
      }
    });
  }
}

}  // namespace

Status matmul_kquant(const MatMulOp& op, const Ctx& ctx) {
#if defined(TS_AMX_TILES)
  if (const PanelLayout* lay = panel_layout(op.w)) {
    if (op.w.dtype == DType::kQ4_K)
      return packed::repacked_tiles_or_vectors<packed::PanelQ4_K, PackQ4_K>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ6_K)
      return packed::repacked_tiles_or_vectors<packed::PanelQ6_K, PackQ6_K>(op, *lay, ctx);
    return panels_unreadable(*lay);
  }
  if (op.w.dtype == DType::kQ4_K) return packed::tiles_or_vectors<PackQ4_K>(op, ctx);
  if (op.w.dtype == DType::kQ5_K) return packed::tiles_or_vectors<PackQ5_K>(op, ctx);
  if (op.w.dtype == DType::kQ6_K) return packed::tiles_or_vectors<PackQ6_K>(op, ctx);
  if (op.w.dtype == DType::kQ2_K) return packed::tiles_or_vectors<PackQ2_K>(op, ctx);
  if (op.w.dtype == DType::kQ3_K) return packed::tiles_or_vectors<PackQ3_K>(op, ctx);
  return unimplemented(fmt::format("cpu K-quant matmul does not take {} weights", dtype_name(op.w.dtype)));
#endif
  if (const PanelLayout* lay = panel_layout(op.w)) {
#if defined(__AVX2__)
    // Repacked at load (repack.h): every batch size reads the panels.
    if (op.w.dtype == DType::kQ4_K) return packed::matmul_repacked<packed::PanelQ4_K, PackQ4_K>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ5_K) return packed::matmul_repacked<packed::PanelQ5_K, PackQ5_K>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ6_K) return packed::matmul_repacked<packed::PanelQ6_K, PackQ6_K>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ2_K) return packed::matmul_repacked<packed::PanelQ2_K, PackQ2_K>(op, *lay, ctx);
    if (op.w.dtype == DType::kQ3_K) return packed::matmul_repacked<packed::PanelQ3_K, PackQ3_K>(op, *lay, ctx);
#endif
    return panels_unreadable(*lay);
  }
#if defined(__AVX2__)
  // Every K-quant: the kernels of matmul_packed.h, for every batch size.
  if (op.w.dtype == DType::kQ2_K) {
    packed::matmul<PackQ2_K>(op, ctx);
    return ok_status();
  }
  if (op.w.dtype == DType::kQ3_K) {
    packed::matmul<PackQ3_K>(op, ctx);
    return ok_status();
  }
  if (op.w.dtype == DType::kQ4_K) {
    packed::matmul<PackQ4_K>(op, ctx);
    return ok_status();
  }
  if (op.w.dtype == DType::kQ5_K) {
    packed::matmul<PackQ5_K>(op, ctx);
    return ok_status();
  }
  if (op.w.dtype == DType::kQ6_K) {
    packed::matmul<PackQ6_K>(op, ctx);
    return ok_status();
  }
#endif
  thread_local QuantRowsK xq;
  quantize_rows(data<const float>(op.x), op.x.dim(0), op.x.dim(1), xq, ctx);
  switch (op.w.dtype) {
    case DType::kQ2_K:
      matmul_k<BlockQ2_K>(op, xq, ctx);
      return ok_status();
    case DType::kQ3_K:
      matmul_k<BlockQ3_K>(op, xq, ctx);
      return ok_status();
    case DType::kQ4_K:
      matmul_k<BlockQ4_K>(op, xq, ctx);
      return ok_status();
    case DType::kQ5_K:
      matmul_k<BlockQ5_K>(op, xq, ctx);
      return ok_status();
    case DType::kQ6_K:
      matmul_k<BlockQ6_K>(op, xq, ctx);
      return ok_status();
    default:
      return unimplemented(fmt::format("cpu K-quant matmul does not take {} weights", dtype_name(op.w.dtype)));
  }
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
