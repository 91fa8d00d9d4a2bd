// The row-by-row kernels of the 32-element block types (matmul_quant.cc): the SIMD builds' micro tiles, the
// avx512 build's prefill tiles on prepared weight vectors (prepare_tile, micro_prepared) and their token-count
// dispatch. Included only by matmul_quant.cc, inside its per-build anonymous namespace after the block decoders
// and min_term it uses, so it has no includes of its own (its own would land inside that namespace).
#pragma once

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
