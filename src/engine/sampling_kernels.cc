// The sampler's loops over a whole row of logits, in two builds: eight lanes at a time with AVX2 and FMA
// (base/vec_exp.h's exp8 for e^x), and plain loops. The sampler ran libm's expf per logit and sorted on the host
// thread: 1.4 ms a token for a softmax over a 262144-token vocabulary, per sampled sequence.
#include "engine/internal/sampling_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/vec_exp.h"

namespace tessera::engine::internal {
namespace {

float max_generic(const float* x, size_t n) {
  float mx = -INFINITY;
  for (size_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  return mx;
}

void softmax_generic(float* x, size_t n, float scale) {
  const float mx = max_generic(x, n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp((x[i] - mx) * scale);
    sum += x[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

size_t first_above_generic(const float* x, size_t from, size_t n, float bar) {
  for (size_t i = from; i < n; ++i)
    if (x[i] > bar) return i;
  return n;
}

double sum_exp_generic(const float* x, size_t n, float mx) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  return sum;
}

#if defined(__x86_64__)
[[gnu::target("avx2,fma")]] float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

[[gnu::target("avx2,fma")]] double hsum4d(__m256d v) {
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, v);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// The largest value other than NaN (-inf if there is none): max_ps returns its second operand when either is NaN.
[[gnu::target("avx2,fma")]] float max_avx2(const float* x, size_t n) {
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  float mx = hmax8(_mm256_max_ps(m0, m1));
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  return mx;
}

[[gnu::target("avx2,fma")]] void softmax_avx2(float* x, size_t n, float scale) {
  const float mx = max_avx2(x, n);
  const __m256 vm = _mm256_set1_ps(mx), vs = _mm256_set1_ps(scale);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (size_t i = 0; i < n; i += 8) {
    const size_t lanes = std::min<size_t>(8, n - i);
    alignas(32) float tail[8];  // the last 1-7 through the same exp8, the unused lanes at -inf (e^-inf = 0)
    if (lanes < 8) {
      for (size_t j = 0; j < 8; ++j) tail[j] = j < lanes ? x[i + j] : -INFINITY;
    }
    const __m256 v = lanes == 8 ? _mm256_loadu_ps(x + i) : _mm256_load_ps(tail);
    const __m256 e = vec::exp8(_mm256_mul_ps(_mm256_sub_ps(v, vm), vs));
    if (lanes == 8) {
      _mm256_storeu_ps(x + i, e);
    } else {
      _mm256_store_ps(tail, e);
      for (size_t j = 0; j < lanes; ++j) x[i + j] = tail[j];
    }
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  const float inv = static_cast<float>(1.0 / hsum4d(_mm256_add_pd(s0, s1)));
  const size_t body = n & ~size_t{7};
  for (size_t i = 0; i < body; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(inv)));
  for (size_t i = body; i < n; ++i) x[i] *= inv;
}

// The first i >= from with x[i] > bar, or n: eight compared at once.
[[gnu::target("avx2,fma")]] size_t first_above_avx2(const float* x, size_t from, size_t n, float bar) {
  const __m256 b = _mm256_set1_ps(bar);
  size_t i = from;
  for (; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), b, _CMP_GT_OQ));
    if (mask != 0) return i + static_cast<size_t>(std::countr_zero(static_cast<unsigned>(mask)));
  }
  for (; i < n; ++i)
    if (x[i] > bar) return i;
  return n;
}

// The sum of e^(x - mx) in double (each term through exp8, eight at a time; the tail's unused lanes at -inf).
[[gnu::target("avx2,fma")]] double sum_exp_avx2(const float* x, size_t n, float mx) {
  const __m256 vm = _mm256_set1_ps(mx);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (size_t i = 0; i < n; i += 8) {
    __m256 v;
    if (i + 8 <= n) {
      v = _mm256_loadu_ps(x + i);
    } else {
      alignas(32) float tail[8];
      for (size_t j = 0; j < 8; ++j) tail[j] = i + j < n ? x[i + j] : -INFINITY;
      v = _mm256_load_ps(tail);
    }
    const __m256 e = vec::exp8(_mm256_sub_ps(v, vm));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  return hsum4d(_mm256_add_pd(s0, s1));
}

#endif

}  // namespace

HostVector host_vector() {
  static const HostVector detected = [] {
#if defined(__x86_64__)
    const char* isa = std::getenv("TESSERA_CPU_ISA");
    if ((isa == nullptr || std::strcmp(isa, "generic") != 0) && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
      return HostVector::kAvx2;
#endif
    return HostVector::kScalar;
  }();
  return detected;
}

void softmax(std::span<float> x, float scale, HostVector v) {
  if (x.empty()) return;
#if defined(__x86_64__)
  if (v == HostVector::kAvx2) return softmax_avx2(x.data(), x.size(), scale);
#endif
  softmax_generic(x.data(), x.size(), scale);
}

size_t first_above(std::span<const float> x, size_t from, float bar, HostVector v) {
#if defined(__x86_64__)
  if (v == HostVector::kAvx2) return first_above_avx2(x.data(), from, x.size(), bar);
#endif
  return first_above_generic(x.data(), from, x.size(), bar);
}

float max_value(std::span<const float> x, HostVector v) {
#if defined(__x86_64__)
  if (v == HostVector::kAvx2) return max_avx2(x.data(), x.size());
#endif
  return max_generic(x.data(), x.size());
}

double sum_exp(std::span<const float> x, float mx, HostVector v) {
#if defined(__x86_64__)
  if (v == HostVector::kAvx2) return sum_exp_avx2(x.data(), x.size(), mx);
#endif
  return sum_exp_generic(x.data(), x.size(), mx);
}

}  // namespace tessera::engine::internal
