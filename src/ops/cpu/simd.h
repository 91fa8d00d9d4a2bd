// Small vector helpers shared by the cpu kernels: dot products and axpy over f32 rows, and loads of
// f16 / bf16 rows widened to f32. With AVX2/FMA/F16C (the avx2 and avx512 builds) they use 8-wide
// intrinsics and several accumulators; in the generic build they are plain loops.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "base/quant.h"
#include "base/vec_exp.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

// Inside the per-build namespace: the avx2 and generic builds each get their own copies of these inline
// functions (one shared name would let the linker pick one build's code for both).
namespace tessera::ops::cpu::TS_CPU_ISA {

// 64-byte aligned storage for vectors read with aligned 512-bit loads (activation blocks, weight panels).
template <typename T>
struct AlignedAlloc {
  using value_type = T;
  AlignedAlloc() = default;
  template <typename U>
  AlignedAlloc(const AlignedAlloc<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{64}); }
  bool operator==(const AlignedAlloc&) const { return true; }
};
template <typename T>
using AVec = std::vector<T, AlignedAlloc<T>>;

#if defined(__AVX2__)
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// mxfp4's 16 E2M1 codes as unsigned bytes, each doubled value (kMxfp4Values) + 16 (4 .. 28): a byte-shuffle table.
inline __m128i mxfp4_code_bytes() {
  return _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)), _mm_set1_epi8(16));
}
inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
// Eight vectors to one, lane r = the sum of a[r]'s lanes. hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5,
// x6+x7, y4+y5, y6+y7]; two levels of it and one cross-half add.
inline __m256 reduce8(const __m256* a) {
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {  // f16
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
struct Bf16 {
  uint16_t bits;
};
inline __m256 load8(const Bf16* p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
// e^x eight at a time: base/vec_exp.h (the sampler uses the same one).
using ::tessera::vec::exp8;
// tanh x, odd, for a = |x|: below 0.4 its Taylor series to a^15 (the next term is under 3e-10 of a there);
// from 0.4 on 1 - 2 / (e^2a + 1), whose cancellation costs at most a factor 1.7 on exp8's error; from 10 on it
// rounds to 1 in f32, so a is capped there (e^18 stays finite). The sign is x's; NaN stays NaN.
inline __m256 tanh8(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign, x);
  const __m256 a2 = _mm256_mul_ps(a, a);
  // tanh a = a (1 + a^2 (-1/3 + a^2 (2/15 + ...))), the coefficients of a^3 .. a^15.
  __m256 p = _mm256_set1_ps(-929569.0f / 638512875.0f);
  for (float c :
       {21844.0f / 6081075.0f, -1382.0f / 155925.0f, 62.0f / 2835.0f, -17.0f / 315.0f, 2.0f / 15.0f, -1.0f / 3.0f})
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(c));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, a2), a, a);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e =
      exp8(_mm256_add_ps(_mm256_min_ps(a, _mm256_set1_ps(10.0f)), _mm256_min_ps(a, _mm256_set1_ps(10.0f))));
  const __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  const __m256 t = _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.4f), _CMP_LT_OQ));
  const __m256 r = _mm256_or_ps(t, _mm256_and_ps(sign, x));
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#else
struct Bf16 {
  uint16_t bits;
};
#endif

inline float to_f32(float v) { return v; }
inline float to_f32(uint16_t h) { return f16_to_f32(h); }
inline float to_f32(Bf16 b) { return bf16_to_f32(b.bits); }

// sum a[i] * b[i]; W is float, uint16_t (f16) or Bf16.
template <typename W>
inline float dot(const W* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0.0f;
#if defined(__AVX2__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(load8(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load8(a + i), _mm256_loadu_ps(b + i), acc0);
  s = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) s += to_f32(a[i]) * b[i];
  return s;
}

// y[i] += a * x[i]; X is float or uint16_t (f16).
template <typename X>
inline void axpy(float a, const X* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256 av = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, load8(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * to_f32(x[i]);
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
