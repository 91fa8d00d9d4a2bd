// A plain two-thread read of one 4.6 GB buffer (2 MiB aligned, transparent huge pages asked for), at four sizes per
// round: each size's window of the buffer read three times in a row, best pass printed, GB/s. Not part of the
// build; docs/benchmarks.md ("Tapered chunks") quotes it.
//   g++ -O2 -mavx512f -fopenmp read-probe.cc -o read-probe && ./read-probe 6
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 16 independent 512-bit loads per KiB into four sums, no prefetch instructions.
static float pass(const float* a, size_t n) {
  float total = 0;
#pragma omp parallel for num_threads(2) reduction(+ : total) schedule(static)
  for (size_t i = 0; i < n; i += 256) {
    __m512 s0 = _mm512_load_ps(a + i), s1 = _mm512_load_ps(a + i + 16), s2 = _mm512_load_ps(a + i + 32),
           s3 = _mm512_load_ps(a + i + 48);
    for (int j = 64; j < 256; j += 64) {
      s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i + j));
      s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + j + 16));
      s2 = _mm512_add_ps(s2, _mm512_load_ps(a + i + j + 32));
      s3 = _mm512_add_ps(s3, _mm512_load_ps(a + i + j + 48));
    }
    total += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  }
  return total;
}

int main(int argc, char** argv) {
  const size_t big = 4600ull << 20, align = 2 << 20;
  auto* a = static_cast<float*>(aligned_alloc(align, big));
  if (a == nullptr) return 1;
  madvise(a, big, MADV_HUGEPAGE);
#pragma omp parallel for num_threads(2) schedule(static)
  for (size_t i = 0; i < big / 4; i++) a[i] = 1e-9f * static_cast<float>(i & 1023);
  const std::vector<size_t> sizes = {256ull << 20, 1024ull << 20, 2048ull << 20, big};
  float keep = 0;
  const int rounds = argc > 1 ? atoi(argv[1]) : 3;
  for (int r = 0; r < rounds; r++) {
    printf("round %d:", r);
    for (size_t s : sizes) {
      double best = 0;
      size_t off = (static_cast<size_t>(r) * s) % big;
      if (off + s > big) off = 0;
      for (int p = 0; p < 3; p++) {
        const double t0 = now();
        keep += pass(a + off / 4, s / 4);
        best = std::max(best, static_cast<double>(s) / (now() - t0) / 1e9);
      }
      printf("  %zuMiB %.1f", s >> 20, best);
    }
    printf("\n");
    fflush(stdout);
  }
  printf("(checksum %g)\n", keep);
  free(a);
}
