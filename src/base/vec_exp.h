// e^x eight lanes at a time, for code that runs on the host CPU: the cpu backend's kernels (src/ops/cpu/simd.h,
// whose builds are compiled with AVX2/FMA or AVX-512 flags) and the engine's sampler (compiled for baseline
// x86-64, which calls it only from functions of its own marked target("avx2,fma") after asking the CPU).
//
// x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7 (relative error < 2e-8 there), and 2^n built
// in the exponent field: anything below -87 (where 2^n would leave the normal range), -inf included, gives 0;
// from 88.38 on (n = 128) +inf, +inf included (e^x itself leaves f32 at 88.72, and an unclamped n of 129 or more
// would carry into the sign bit); NaN stays NaN.
//
// `static`: every translation unit has its own copy, compiled for that unit's (or its caller's) instruction set,
// so the linker can never hand an AVX-512 unit's copy to a caller on an AVX2 host.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>

namespace tessera::vec {

[[gnu::target("avx2,fma")]] static inline __m256 exp8(__m256 x) {
  const __m256 dead = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  const __m256 huge = _mm256_cmp_ps(x, _mm256_set1_ps(88.7228f), _CMP_GT_OQ);
  // NaN passes through both: max and min return their second operand when either is NaN.
  x = _mm256_min_ps(_mm256_set1_ps(88.7228f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  for (float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_andnot_ps(dead, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  return _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), huge);
}

}  // namespace tessera::vec
#endif
