// Compiled once per kernel build (see kernels.h); measure_ceilings() in cpu_backend.cc picks the build.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/ceilings.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

float read_pass(const float* a, size_t n, int threads) {
  float total = 0.0f;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
  for (int64_t c = 0; c < static_cast<int64_t>(n / 4096); ++c) {
    const float* p = a + c * 4096;
#if defined(__AVX2__)
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int i = 0; i < 4096; i += 32) {
      s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
      s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
      s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
      s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
    }
    total += hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
#else
    float s[8] = {};
    for (int i = 0; i < 4096; i += 8) {
      for (int j = 0; j < 8; ++j) s[j] += p[i + j];
    }
    for (float v : s) total += v;
#endif
  }
  return total;
}

void triad_pass(float* a, const float* b, const float* c, size_t n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) a[i] = b[i] + 3.0f * c[i];
}

double fma_pass(int threads, int64_t iters) {
  float sink = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
#if defined(__AVX2__)
    // Ten named accumulators (an array would live on the stack): enough independent chains to cover the
    // FMA latency on both pipes.
    const __m256 m = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
    const float seed = static_cast<float>(omp_get_thread_num()) * 1e-3f;
    __m256 a0 = _mm256_set1_ps(seed), a1 = _mm256_set1_ps(seed + 1e-4f), a2 = _mm256_set1_ps(seed + 2e-4f);
    __m256 a3 = _mm256_set1_ps(seed + 3e-4f), a4 = _mm256_set1_ps(seed + 4e-4f), a5 = _mm256_set1_ps(seed + 5e-4f);
    __m256 a6 = _mm256_set1_ps(seed + 6e-4f), a7 = _mm256_set1_ps(seed + 7e-4f), a8 = _mm256_set1_ps(seed + 8e-4f);
    __m256 a9 = _mm256_set1_ps(seed + 9e-4f);
    for (int64_t i = 0; i < iters; ++i) {
      a0 = _mm256_fmadd_ps(a0, m, add);
      a1 = _mm256_fmadd_ps(a1, m, add);
      a2 = _mm256_fmadd_ps(a2, m, add);
      a3 = _mm256_fmadd_ps(a3, m, add);
      a4 = _mm256_fmadd_ps(a4, m, add);
      a5 = _mm256_fmadd_ps(a5, m, add);
      a6 = _mm256_fmadd_ps(a6, m, add);
      a7 = _mm256_fmadd_ps(a7, m, add);
      a8 = _mm256_fmadd_ps(a8, m, add);
      a9 = _mm256_fmadd_ps(a9, m, add);
    }
    sink += hsum(_mm256_add_ps(
        _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)), _mm256_add_ps(a8, a9))));
#else
    float a[80];
    for (int j = 0; j < 80; ++j) a[j] = static_cast<float>(j) * 1e-3f;
    for (int64_t i = 0; i < iters; ++i) {
      for (int j = 0; j < 80; ++j) a[j] = a[j] * 0.999999f + 1e-7f;
    }
    for (float v : a) sink += v;
#endif
  }
  return static_cast<double>(sink);
}

}  // namespace

Ceilings measure(int threads, size_t bytes) {
  const size_t n = std::max<size_t>(bytes / sizeof(float) / 4096, 1) * 4096;
  auto* a = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  auto* b = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  auto* c = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  Ceilings out;
  if (a == nullptr || b == nullptr || c == nullptr) {
    std::free(a);
    std::free(b);
    std::free(c);
    return out;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {  // first touch by the threads that will read
    a[i] = 1.0f;
    b[i] = 2.0f;
    c[i] = 0.5f;
  }
  volatile float keep = 0.0f;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = now();
    keep = keep + read_pass(a, n, threads);
    double t1 = now();
    triad_pass(a, b, c, n, threads);
    double t2 = now();
    out.read_bytes_per_s = std::max(out.read_bytes_per_s, static_cast<double>(n * sizeof(float)) / (t1 - t0));
    out.triad_bytes_per_s = std::max(out.triad_bytes_per_s, 3.0 * static_cast<double>(n * sizeof(float)) / (t2 - t1));
  }
  const int64_t iters = 20'000'000;
  for (int rep = 0; rep < 3; ++rep) {
    double t0 = now();
    keep = keep + static_cast<float>(fma_pass(threads, iters));
    double t1 = now();
    out.fma_flops_per_s = std::max(out.fma_flops_per_s, static_cast<double>(threads) * iters * 80 * 2 / (t1 - t0));
  }
  std::free(a);
  std::free(b);
  std::free(c);
  return out;
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
